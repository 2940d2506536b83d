# %store, as IPython's storemagic extension (loaded in every Jupyter kernel) has it: a
# variable's value pickled to a file of its own under ~/.ipython/profile_default/db/
# autorestore/, read back with %store -r. The files are the sandbox's own, so what is
# stored stays with the sandbox (its restarts, its saved copy, its forks).

__sandbox_internal__ = True

import os

import _sandbox_api as api
from _sandbox_shell import UsageError

FLAGS = "drz"


def directory():
    """Where stored variables are kept."""
    return os.path.join(os.path.expanduser("~"), ".ipython", "profile_default", "db", "autorestore")


def stored_names():
    """The names stored so far, sorted."""
    try:
        return sorted(name for name in os.listdir(directory()) if name.isidentifier())
    except OSError:
        return []


def read(name):
    """The value stored under `name`; KeyError when there is none."""
    import pickle

    if not name.isidentifier():
        raise KeyError(name)
    try:
        with open(os.path.join(directory(), name), "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        raise KeyError(name) from None


def store(line=""):
    """%store [-d|-r|-z] [names] [>file]: lightweight persistence for variables."""
    flags, args = split_flags(line)
    if "d" in flags:
        forget(args)
    elif "z" in flags:
        for name in stored_names():
            os.remove(os.path.join(directory(), name))
    elif "r" in flags:
        restore(args)
    elif not args:
        show()
    elif len(args) > 1 and args[1].startswith(">"):
        write_out(args[0], args[1])
    else:
        for name in args:
            keep(name)


def split_flags(line):
    """The -d/-r/-z flags of `line` and its other words."""
    flags, args = set(), []
    for word in line.split():
        if word.startswith("-") and len(word) > 1 and not args:
            unknown = set(word[1:]) - set(FLAGS)
            if unknown:
                raise UsageError(f"option -{sorted(unknown)[0]} not recognized ( allowed: \"{FLAGS}\")")
            flags.update(word[1:])
        else:
            args.append(word)
    return flags, args


def forget(args):
    if not args:
        raise UsageError("You must provide the variable to forget")
    if args[0].isidentifier():
        try:
            os.remove(os.path.join(directory(), args[0]))
        except FileNotFoundError:
            pass  # as IPython's store: nothing to forget is no error


def restore(args):
    names = args or stored_names()
    for name in names:
        try:
            api.namespace[name] = read(name)
        except KeyError:
            if args:
                print(f"no stored variable or alias {name}")
        except Exception as exc:  # noqa: BLE001 - as IPython says of a value it cannot load
            print(f"Unable to restore variable '{name}', ignoring (use %store -d to forget!)")
            print(f"The error was: {exc!r}")


def show():
    names = stored_names()
    size = max(map(len, names), default=0)
    print("Stored variables and their in-db values:")
    for name in names:
        try:
            value = repr(read(name))
        except Exception:  # noqa: BLE001 - listed all the same
            value = "'<unavailable>'"
        print(f"{name:<{size}} -> {value[:50]}")


def write_out(expression, target):
    from _sandbox_shell import shell

    path = os.path.expanduser(target.lstrip(">").lstrip())
    with open(path, "a" if target.startswith(">>") else "w", encoding="utf-8") as f:
        value = shell().ev(expression)
        print(f"Writing '{expression}' ({type(value).__name__}) to file '{path}'.")
        if isinstance(value, str):
            f.write(value if value.endswith("\n") else value + "\n")
        else:
            import pprint

            pprint.pprint(value, f)


def keep(name):
    import inspect
    import pickle

    if not name.isidentifier() or name not in api.namespace:
        raise UsageError(f"Unknown variable '{name}'")
    value = api.namespace[name]
    if getattr(inspect.getmodule(value), "__name__", "") == "__main__":
        print(f"Warning:{name} is {value}\nProper storage of interactively declared classes "
              "(or instances\nof those classes) is not possible! Only instances\nof classes "
              "in real modules on file system can be %store'd.\n")
        return
    data = pickle.dumps(value)
    os.makedirs(directory(), exist_ok=True)
    path = os.path.join(directory(), name)
    partial = path + ".partial"
    try:
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    except BaseException:
        # A write the disk quota stopped leaves the value stored before, if any.
        try:
            os.remove(partial)
        except OSError:
            pass
        raise
    print(f"Stored '{name}' ({type(value).__name__})")


def register_magics(shell):
    shell.magics_manager.register_function(store, "line", "store")
