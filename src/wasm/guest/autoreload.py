# IPython's autoreload extension (`%load_ext autoreload`, `%autoreload 2`, `%aimport`):
# before each cell, modules whose source file changed since they were imported are
# reloaded, and the functions and classes the notebook already holds from them (`from
# mod import f`, instances of `mod.C`) run the new code, as IPython's "superreload" does.
# Modes: 0 (off), 1 (only modules named with %aimport), 2 (all but those %aimport -mod
# excludes), 3 (as 2; new names are picked up by the reload itself).

__sandbox_internal__ = True

import os
import sys
import types

import _sandbox_api as api
from _sandbox_cell_code import magic
from _sandbox_shell import UsageError

MODES = {"0": 0, "off": 0, "1": 1, "explicit": 1, "2": 2, "all": 2, "3": 3, "complete": 3,
         "": 2, "now": None}

state = {"mode": 0, "registered": False, "say": False}
# Every version of each function and class a watched module defined, weakly: the
# notebook may hold any of them (`from mod import f` before an earlier reload).
versions = {}
# Modules named with %aimport, and with %aimport -mod.
chosen, excluded = set(), set()
# The modification time of each module's file when it was last (re)loaded, or UNWATCHED.
seen = {}
UNWATCHED = object()
# Descriptors that say where an instance keeps its values (slots): never moved
# from one class to the other, which would leave instances' values unreachable.
LAYOUT = (types.MemberDescriptorType, types.GetSetDescriptorType)


@magic("line")
def autoreload(line=""):
    """%autoreload [0|1|2|3|off|explicit|all|complete|now]: reloads changed modules
    before each cell (mode 2 for all of them); `now` reloads them at once."""
    words = line.split()
    flags = {w for w in words if w.startswith("-") and not w.lstrip("-").isdigit()}
    unknown = flags - {"-p", "--print", "-l", "--log"}
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(sorted(unknown))}")
    state["say"] = bool(flags)
    word = next((w for w in words if w not in flags), "")
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
        if state["say"]:
            print(f"Reloading '{name}'.")
        try:
            superreload(module)
        except Exception as exc:  # noqa: BLE001 - as IPython: reported, the cell runs
            import traceback

            print(f"[autoreload of {name} failed: {''.join(traceback.format_exception_only(exc)).strip()}]",
                  file=sys.stderr)


def superreload(module):
    """Reloads `module`, then makes every earlier version of the functions and classes
    it defines run the new code (as IPython's superreload does)."""
    import importlib
    import types
    import weakref

    name = module.__name__
    for key, value in module.__dict__.items():
        if isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == name:
            kept = versions.setdefault((name, key), [])
            if not any(ref() is value for ref in kept):
                try:
                    kept.append(weakref.ref(value))
                except TypeError:
                    pass
    importlib.reload(module)
    moves = {}
    for key, new in module.__dict__.items():
        kept = versions.get((name, key))
        if not kept:
            continue
        kept[:] = [ref for ref in kept if ref() is not None]
        for ref in kept:
            old = ref()
            if old is not None and old is not new:
                update(old, new, moves)
    move_instances(moves)


def update(old, new, moves, depth=0):
    """Makes `old` (a function or class of the module before the reload) behave as `new`;
    a class's instances are to move to the new class (`moves`: by the old class's id,
    the old class and the new)."""
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
            if key in ("__dict__", "__weakref__", "__module__", "__qualname__", "__slots__") \
                    or isinstance(value, LAYOUT):
                continue  # where an instance keeps its values: the old class's own

            current = vars(old).get(key)
            if current is not None and current is not value and \
                    type(current) is type(value) and isinstance(value, (types.FunctionType, type)):
                update(current, value, moves, depth + 1)
                continue
            try:
                setattr(old, key, value)
            except (AttributeError, TypeError):
                pass
        moves[id(old)] = (old, new)
    elif isinstance(old, property) and isinstance(new, property):
        for part in ("fget", "fset", "fdel"):
            if getattr(old, part) is not None and getattr(new, part) is not None:
                update(getattr(old, part), getattr(new, part), moves, depth + 1)


def move_instances(moves):
    """Makes the instances of each old class in `moves` instances of its new class (so
    isinstance() holds against the module's class), when their layout allows it, as
    IPython does; one look over the interpreter's objects for all of them."""
    import gc

    if not moves:
        return
    for obj in gc.get_objects():
        move = moves.get(id(type(obj)))
        if move is not None and type(obj) is move[0]:
            try:
                object.__setattr__(obj, "__class__", move[1])
            except TypeError:
                pass  # another layout: the instance keeps its class, updated in place


def register_magics(shell):
    shell.magics_manager.register_function(autoreload, "line", "autoreload")
    shell.magics_manager.register_function(aimport, "line", "aimport")
