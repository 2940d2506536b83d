# IPython's help: obj? and obj?? (%pinfo, %pinfo2), %pdoc, %psource, %pfile, %pycat and
# %psearch (np.*sum*?), as IPython prints them.

__sandbox_internal__ = True

import os
import sys

import _sandbox_api as api
from _sandbox_cell_code import magic
from _sandbox_shell import UsageError


def resolve(target, frame=None):
    """The object `target` names (dotted, perhaps indexed), or a magic's function."""
    from _sandbox_shell import shell

    if target.startswith("%"):
        name = target.lstrip("%")
        found = shell().find_line_magic(name) or shell().find_cell_magic(name)
        if found is None:
            raise UsageError(f"Object `{target}` not found.")
        return found
    namespace = dict(api.namespace)
    try:
        return eval(target, vars(sys.modules["builtins"]), namespace)
    except Exception:  # noqa: BLE001 - as IPython says it
        raise UsageError(f"Object `{target}` not found.") from None


def describe(obj, detail=False):
    """What `obj?` shows: signature, docstring, file, type (and source for `??`)."""
    import inspect

    lines = []
    try:
        lines.append(("Signature", f"{getattr(obj, '__name__', '')}{inspect.signature(obj)}"))
    except (TypeError, ValueError):
        text = repr(obj)
        lines.append(("String form", text if len(text) < 200 else text[:190] + "<...>"))
    if isinstance(obj, (list, tuple, dict, set, str)):
        lines.append(("Length", str(len(obj))))
    source = None
    if detail:
        try:
            source = inspect.getsource(obj)
        except (TypeError, OSError):
            pass
    doc = inspect.getdoc(obj)
    if source:
        lines.append(("Source", "\n" + source.rstrip()))
    elif doc:
        lines.append(("Docstring", doc))
    else:
        lines.append(("Docstring", "<no docstring>"))
    try:
        lines.append(("File", inspect.getfile(obj)))
    except TypeError:
        pass
    lines.append(("Type", type(obj).__name__))
    return "\n".join(f"{label + ':':<11}{text}" for label, text in lines)


@magic("line", expand=False)
def pinfo(line):
    """obj? (or %pinfo obj): signature, docstring and type of obj."""
    print(describe(resolve(line.strip())))


@magic("line", expand=False)
def pinfo2(line):
    """obj?? (or %pinfo2 obj): the same, with its source when there is one."""
    print(describe(resolve(line.strip()), detail=True))


@magic("line", expand=False)
def pdoc(line):
    """%pdoc obj: its docstring (and its class's constructor's, for a class)."""
    target = resolve(line.strip())
    import inspect

    doc = inspect.getdoc(target)
    print(doc if doc else "No documentation found for " + line.strip())


@magic("line", expand=False)
def psource(line):
    """%psource obj: its source code."""
    import inspect

    try:
        print(inspect.getsource(resolve(line.strip())), end="")
    except (OSError, TypeError):
        print("No source found for " + line.strip())


@magic("line", expand=False)
def pfile(line):
    """%pfile obj: the whole file obj was defined in."""
    import inspect

    try:
        path = inspect.getsourcefile(resolve(line.strip()))
        lines = inspect.linecache.getlines(path) if path else []
    except TypeError:
        lines = []
    if not lines:
        print("No file found for " + line.strip())
    print("".join(lines), end="")


@magic("line", expand=False)
def pycat(line):
    """%pycat file: shows a file's text (IPython pages it with colours)."""
    path = line.strip()
    if not os.path.exists(path) and os.path.exists(path + ".py"):
        path += ".py"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            print(f.read(), end="")
    except OSError:
        raise UsageError(f"File {line.strip()!r} not found.") from None


@magic("line", expand=False)
def psearch(line):
    """%psearch pattern (or np.*sum*?): the names matching a wildcard pattern."""
    import fnmatch

    pattern = line.split()[0] if line.split() else "*"
    base, _, leaf = pattern.rpartition(".")
    scope = vars(resolve(base)) if base else {**vars(sys.modules["builtins"]), **api.namespace}
    for name in sorted(fnmatch.filter([n for n in scope if not n.startswith("_")], leaf)):
        print(f"{base + '.' if base else ''}{name}")
