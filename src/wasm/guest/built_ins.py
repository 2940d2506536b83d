# Pure-Python built-ins that an install replaced (imported by the driver as
# `_sandbox_built_ins`, on each start and after each install).
#
# The runtime's zip comes before site-packages on sys.path, so a version installed in
# place of a pure-Python built-in (attrs, pyparsing, sympy) would never be imported. For
# each top-level module that site-packages holds and the zip holds too (not the standard
# library's, none with compiled parts in the runtime), a finder at the front of
# sys.meta_path imports site-packages' copy instead, and importlib.metadata reports its
# version. A copy already imported from the zip (a snapshot preloads some) is dropped from
# sys.modules, so the next import takes the installed one; modules that imported the old
# copy keep it.

import posix
import sys

_state = {"site": "", "modules": frozenset(), "dists": frozenset()}


def _normalized(name):
    out = []
    for ch in name.lower():
        out.append("-" if ch in "-_." else ch)
    text = "".join(out)
    while "--" in text:
        text = text.replace("--", "-")
    return text


def _zip_importers():
    return [
        finder
        for path, finder in list(sys.path_importer_cache.items())
        if path.endswith(".zip") and finder is not None and hasattr(finder, "find_spec")
    ]


def _zip_distributions(importers):
    """The distributions at the top of the runtime's zips, normalized."""
    found = set()
    for importer in importers:
        files = getattr(importer, "_get_files", None)
        try:
            names = files() if files is not None else ()
        except Exception:
            continue
        for name in names:
            head, sep, tail = name.partition("/")
            if sep and tail == "METADATA" and head.endswith(".dist-info"):
                found.add(_normalized(head[: -len(".dist-info")].rpartition("-")[0]))
    return found


def _regular(spec):
    return spec is not None and spec.loader is not None


def _shadowed(site, entries, importers):
    """Top-level modules in `entries` of site-packages that a zip holds too."""
    import importlib.machinery

    compiled = {n.partition(".")[0] for n in sys.builtin_module_names if "." in n}
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    names = set()
    for entry in entries:
        name = entry[:-3] if entry.endswith(".py") else entry
        if not name.isidentifier() or name in stdlib or name in compiled or name in names:
            continue
        if not any(_regular(importer.find_spec(name)) for importer in importers):
            continue
        if _regular(importlib.machinery.PathFinder.find_spec(name, [site])):
            names.add(name)
    return names


class SitePackagesFirst:
    """Imports the replaced built-ins, and reports their metadata, from site-packages."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or name not in _state["modules"]:
            return None
        import importlib.machinery

        return importlib.machinery.PathFinder.find_spec(name, [_state["site"]])

    @classmethod
    def find_distributions(cls, context=None):
        name = getattr(context, "name", None)
        if not name or _normalized(name) not in _state["dists"]:
            return iter(())
        import importlib.metadata

        local = importlib.metadata.DistributionFinder.Context(name=name, path=[_state["site"]])
        return importlib.metadata.MetadataPathFinder.find_distributions(local)


def _forget(names, site):
    """Drops copies of `names` imported from elsewhere than `site`."""
    for name in names:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) or ""
        if module is None or where.startswith(site):
            continue
        prefix = name + "."
        for loaded in [k for k in sys.modules if k == name or k.startswith(prefix)]:
            del sys.modules[loaded]


def refresh(site):
    """Works out again what site-packages replaces, and puts its finder first."""
    try:
        entries = posix.listdir(site)
    except OSError:
        entries = []
    importers = _zip_importers()
    modules = _shadowed(site, entries, importers) if importers else set()
    dists = set()
    if modules:
        in_zip = _zip_distributions(importers)
        for entry in entries:
            if entry.endswith(".dist-info"):
                dist = _normalized(entry[: -len(".dist-info")].rpartition("-")[0])
                if dist in in_zip:
                    dists.add(dist)
    _state.update(site=site, modules=frozenset(modules), dists=frozenset(dists))
    _forget(modules, site)
    if SitePackagesFirst in sys.meta_path:
        sys.meta_path.remove(SitePackagesFirst)
    if modules:
        sys.meta_path.insert(0, SitePackagesFirst)
