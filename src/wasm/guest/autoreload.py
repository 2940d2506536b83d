# IPython's autoreload extension (`%load_ext autoreload`, `%autoreload 2`, `%aimport`):
# before each cell, modules whose source file changed since they were imported are
# reloaded, and the functions and classes the notebook already holds from them (`from
# mod import f`, instances of `mod.C`) run the new code, as IPython's "superreload" does.
# Modes: 0 (off), 1 (only modules named with %aimport), 2 (all but those %aimport -mod
# excludes), 3 (as 2; new names are picked up by the reload itself).

__sandbox_internal__ = True

import os
import sys

import _sandbox_api as api
from _sandbox_cell_code import magic
from _sandbox_shell import UsageError

MODES = {"0": 0, "off": 0, "1": 1, "explicit": 1, "2": 2, "all": 2, "3": 3, "complete": 3,
         "": 2, "now": None}

state = {"mode": 0, "registered": False}
# Modules named with %aimport, and with %aimport -mod.
chosen, excluded = set(), set()
# The modification time of each module's file when it was last (re)loaded, or UNWATCHED.
seen = {}
UNWATCHED = object()


@magic("line")
def autoreload(line=""):
    """%autoreload [0|1|2|3|off|explicit|all|complete|now]: reloads changed modules
    before each cell (mode 2 for all of them); `now` reloads them at once."""
    word = line.strip().split()[0] if line.strip() else ""
    if word.lstrip("-") in ("p", "print", "l", "log"):
        return None
    if word not in MODES:
        raise UsageError(f"Unrecognized autoreload mode \"{word}\".")
    if MODES[word] is None:
        reload_changed(force_mode=2)
        return None
    state["mode"] = MODES[word]
    start()
    return None


@magic("line")
def aimport(line=""):
    """%aimport [mod] [-mod]: marks modules to reload (mode 1) or never (-mod); without a
    name, lists them."""
    import importlib

    names = line.replace(",", " ").split()
    if not names:
        print(f"Modules to reload:\n{' '.join(sorted(chosen))}\n\n"
              f"Modules to skip:\n{' '.join(sorted(excluded))}")
        return
    for name in names:
        if name.startswith("-"):
            excluded.add(name[1:])
            chosen.discard(name[1:])
            continue
        chosen.add(name)
        excluded.discard(name)
        module = importlib.import_module(name)
        note(module)
        api.namespace[name.split(".")[0]] = sys.modules[name.split(".")[0]]
    start()


def start():
    """Watches modules from now on (before each cell)."""
    from _sandbox_shell import shell

    for module in list(sys.modules.values()):
        note(module)
    if not state["registered"]:
        shell().events.register("pre_run_cell", lambda info=None: reload_changed())
        state["registered"] = True


def source_of(module):
    """The path of a module's source file, when it is the code's own: a file on disk,
    neither in the runtime's zip nor an installed package (those do not change, and
    looking at each of them before every cell would cost milliseconds)."""
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return None
    if ".zip/" in path or "site-packages" in path or getattr(module, "__sandbox_internal__", False):
        return None
    return path


def modified(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def note(module):
    """Remembers when `module`'s file was last changed (or that it has none to watch)."""
    path = source_of(module)
    seen.setdefault(module.__name__, UNWATCHED if path is None else modified(path))


def reload_changed(force_mode=None):
    """Reloads the watched modules whose file changed since they were loaded."""
    mode = state["mode"] if force_mode is None else force_mode
    if mode == 0:
        return
    for name, module in list(sys.modules.items()):
        if module is None or name in excluded or (mode == 1 and name not in chosen):
            continue
        if seen.get(name, 0) is UNWATCHED:
            continue
        path = source_of(module)
        if path is None:
            seen[name] = UNWATCHED
            continue
        now = modified(path)
        if name not in seen:
            seen[name] = now
            continue
        if now is None or now == seen[name]:
            continue
        seen[name] = now
        try:
            superreload(module)
        except Exception as exc:  # noqa: BLE001 - as IPython: reported, the cell runs
            import traceback

            print(f"[autoreload of {name} failed: {''.join(traceback.format_exception_only(exc)).strip()}]",
                  file=sys.stderr)


def superreload(module):
    """Reloads `module`, then makes the functions and classes it had run the new code."""
    import importlib

    old = dict(module.__dict__)
    importlib.reload(module)
    for name, new in module.__dict__.items():
        if name in old and old[name] is not new:
            update(old[name], new)


def update(old, new, depth=0):
    """Makes `old` (a function or class of the module before the reload) behave as `new`."""
    import types

    if depth > 4:
        return
    if isinstance(old, types.FunctionType) and isinstance(new, types.FunctionType):
        for attr in ("__code__", "__defaults__", "__kwdefaults__", "__doc__", "__annotations__"):
            try:
                setattr(old, attr, getattr(new, attr))
            except (AttributeError, TypeError, ValueError):
                pass
        old.__dict__.update(new.__dict__)
    elif isinstance(old, type) and isinstance(new, type):
        for key in list(vars(old)):
            if key not in vars(new) and not key.startswith("__"):
                try:
                    delattr(old, key)
                except (AttributeError, TypeError):
                    pass
        for key, value in vars(new).items():
            if key in ("__dict__", "__weakref__", "__module__", "__qualname__"):
                continue
            current = vars(old).get(key)
            if current is not None and current is not value and \
                    type(current) is type(value) and isinstance(value, (types.FunctionType, type)):
                update(current, value, depth + 1)
                continue
            try:
                setattr(old, key, value)
            except (AttributeError, TypeError):
                pass
    elif isinstance(old, property) and isinstance(new, property):
        for part in ("fget", "fset", "fdel"):
            if getattr(old, part) is not None and getattr(new, part) is not None:
                update(getattr(old, part), getattr(new, part), depth + 1)


def register_magics(shell):
    shell.magics_manager.register_function(autoreload, "line", "autoreload")
    shell.magics_manager.register_function(aimport, "line", "aimport")
