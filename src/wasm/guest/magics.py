# IPython's common magics, as they behave in IPython (the output a notebook shows), for
# the sandbox's shell (shell.py). The code they run is read and run as a cell's is
# (cell_code.py); the timing and profiling magics are in timing.py.

__sandbox_internal__ = True

import os
import re
import sys

import _sandbox_api as api
from _sandbox_cell_code import compiled, magic, parse_at, run_compiled, run_source, where
from _sandbox_shell import UsageError


# ---- output capture -----------------------------------------------------------------------

@magic("cell", frame=True)
def capture(line, cell, frame=None):
    """%%capture [--no-stdout] [--no-stderr] [--no-display] [name]: runs the cell and keeps
    what it printed and displayed in `name` (an IPython CapturedIO), showing nothing."""
    import _sandbox_display

    words = line.split()
    name = next((w for w in words if not w.startswith("--")), None)
    filename, at = where(frame)
    displays = "--no-display" not in words
    with _sandbox_display.capture_output("--no-stdout" not in words, "--no-stderr" not in words,
                                         displays) as captured:
        value = run_source(cell, filename, at, display_last=displays)
    if name and not cell.rstrip().endswith(";"):
        api.namespace[name] = captured
    # Displays not captured: the value is the cell's, as IPython's displayhook shows it.
    return None if displays or cell.rstrip().endswith(";") else value


# ---- namespace ------------------------------------------------------------------------------

# Names the notebook defines, not the code: %who leaves them out, as IPython does.
HIDDEN = {"In", "Out", "get_ipython", "exit", "quit"}


def user_names(types=""):
    namespace = api.namespace
    names = sorted(n for n in namespace if not n.startswith("_") and n not in HIDDEN)
    wanted = set(types.split())
    return [n for n in names if not wanted or type(namespace[n]).__name__ in wanted]


@magic("line")
def who_ls(line=""):
    """%who_ls [type ...]: the names the code defined (sorted)."""
    return user_names(line)


@magic("line")
def who(line=""):
    """%who [type ...]: the names the code defined, as IPython lists them."""
    names = user_names(line)
    if not names:
        print("No variables match your requested type." if line.strip() else "Interactive namespace is empty.")
        return
    for count, name in enumerate(names, 1):
        print(name + "\t", end=" ")
        if count % 9 == 0:
            print()
    print()


@magic("line")
def whos(line=""):
    """%whos [type ...]: the code's names with their types and a short description."""
    names = user_names(line)
    if not names:
        print("No variables match your requested type." if line.strip() else "Interactive namespace is empty.")
        return
    namespace = api.namespace
    types = [type(namespace[n]).__name__ for n in names]
    var_width = max(max(map(len, names)), len("Variable")) + 3
    type_width = max(max(map(len, types)), len("Type")) + 3
    print("Variable".ljust(var_width) + "Type".ljust(type_width) + " Data/Info\n" + "-" * (var_width + type_width + 10))
    for name, kind in zip(names, types):
        value = namespace[name]
        print(f"{name:<{var_width}}{kind:<{type_width}}", end=" ")
        if kind in ("dict", "list", "tuple"):
            print(f"n={len(value)}")
        elif kind == "ndarray":
            shape = str(value.shape).replace(",", "").replace(" ", "x")[1:-1]
            print(f"{shape}: {value.size} elems, type `{value.dtype}`, {value.size * value.itemsize} bytes")
        elif kind in ("DataFrame", "Series"):
            print(f"Shape: {value.shape}")
        else:
            try:
                text = str(value).replace("\n", "\\n")
            except Exception:  # noqa: BLE001 - as IPython words it
                text = f"<object with id {id(value)} (str() failed)>"
            print(text if len(text) < 50 else text[:25] + "<...>" + text[-25:])


@magic("line")
def reset(line=""):
    """%reset [-f]: forgets every name the code defined and the values cells showed, and
    keeps In and the notebook's own names, as IPython does (the sandbox asks no question)."""
    namespace = api.namespace
    api.outputs.clear()
    for name in [n for n in namespace if not n.startswith("__") and n not in HIDDEN]:
        del namespace[name]
    namespace.update({"In": api.inputs, "_ih": api.inputs, "Out": api.outputs, "_oh": api.outputs,
                      "_dh": api.dir_history})


@magic("line")
def reset_selective(line=""):
    """%reset_selective [-f] regex: forgets the names of the code matching `regex` (the
    sandbox asks no question)."""
    import re

    words = [w for w in line.split() if w != "-f"]
    if not words:
        raise UsageError("%reset_selective needs a regular expression for the names to delete")
    pattern = re.compile(words[0])
    for name in [n for n in api.namespace if not n.startswith("__") and n not in HIDDEN]:
        if pattern.search(name):
            del api.namespace[name]


@magic("line")
def xdel(line):
    """%xdel name: deletes a name."""
    for name in line.split():
        api.namespace.pop(name, None)


@magic("line")
def precision(line=""):
    """%precision [n | format]: how floats shown as values look ("%.nf", or a format of
    your own such as %e; none resets to repr), and numpy's printing precision, as in IPython."""
    said = line.strip()
    numpy = sys.modules.get("numpy") if numpy_in_use() else None
    if "%" in said:
        said % 3.14159  # a format that cannot format a float fails here, as in IPython
        chosen = said
    elif said:
        if not said.isdigit():
            raise UsageError(f"%precision takes a number of digits or a %-format, not {said!r}")
        chosen = f"%.{int(said)}f"
        if numpy is not None:
            numpy.set_printoptions(precision=int(said))
    else:
        chosen = "%r"
        if numpy is not None:
            numpy.set_printoptions(precision=8)
    api.float_format[0] = None if chosen == "%r" else chosen
    return chosen


# Packages that import numpy as they are imported.
NUMPY_USERS = frozenset({
    "numpy", "pandas", "scipy", "sklearn", "matplotlib", "mpl_toolkits", "seaborn", "statsmodels",
    "patsy", "skimage", "xarray", "pyarrow", "h5py", "tables", "numba", "torch", "tensorflow",
    "cv2", "imageio", "shapely", "geopandas", "plotnine", "numexpr", "bottleneck", "joblib",
    "contourpy", "formulaic", "pylab",
})
# An import statement's module names (`from a.b import c`, `import a, b as c`).
IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import\b|import[ \t]+([A-Za-z_][\w., \t]*))",
                         re.MULTILINE)
# Magics that import matplotlib (and so numpy).
LOADING_MAGIC = re.compile(r"^[ \t]*%(?:matplotlib|pylab)\b", re.MULTILINE)


def numpy_in_use():
    """Whether the code has imported numpy, itself or through a package that does (IPython's
    %precision sets numpy's precision only then). numpy is loaded ahead here, so the cells
    run so far tell (an import of such a package, %matplotlib), or what the namespace holds
    (a module or an object of one); no attribute of the code's objects is read."""
    for source in list(api.inputs):
        if isinstance(source, str) and (LOADING_MAGIC.search(source) or any(
                name in NUMPY_USERS for name in imported_packages(source))):
            return True
    return any(package_of(value) in NUMPY_USERS for value in list(api.namespace.values()))


def imported_packages(source):
    """The top-level packages a cell's import statements name."""
    for found in IMPORT_LINE.finditer(source):
        modules = [found[1]] if found[1] else [part.split()[0] for part in found[2].split(",") if part.split()]
        yield from (module.partition(".")[0] for module in modules)


def package_of(value):
    """The top-level package a module is, or an object's type comes from (None if not
    known), read through the base descriptors, so no property of the code's runs."""
    kind = type(value)
    try:
        if issubclass(kind, type(sys)):
            name = type(sys).__dict__["__dict__"].__get__(value).get("__name__")
        else:
            name = type.__dict__["__module__"].__get__(kind)
    except Exception:
        return None
    return name.partition(".")[0] if isinstance(name, str) else None


# ---- environment and files -----------------------------------------------------------------

@magic("line")
def env(line=""):
    """%env: the environment (secrets hidden); %env NAME: one value; %env NAME=value: set it."""
    if line.strip():
        split = "=" if "=" in line else " "
        bits = line.split(split)
        if len(bits) == 1:
            key = line.strip()
            if key in os.environ:
                return os.environ[key]
            raise UsageError(f"Environment does not have key: {key}")
        return set_env(line)
    shown = dict(os.environ)
    for key in shown:
        if any(s in key.lower() for s in ("key", "token", "secret")):
            shown[key] = "<hidden>"
    return shown


@magic("line")
def set_env(line):
    """%set_env NAME value (or NAME=value)."""
    split = "=" if "=" in line else " "
    bits = line.split(split, 1)
    if not line.strip() or len(bits) < 2:
        raise UsageError("usage is 'set_env var=val'")
    var, val = bits[0].strip(), bits[1].strip()
    if any(c.isspace() for c in var):
        raise UsageError(f"refusing to set env var with whitespace: '{val}'")
    os.environ[var] = val
    print(f"env: {var}={val}")


@magic("line")
def pwd(line=""):
    """%pwd: the working directory."""
    return os.getcwd()


@magic("line")
def cd(line=""):
    """%cd [dir]: changes the working directory (to / alone) and prints it."""
    from _sandbox_shell import shell

    words = line.split()
    quiet = "-q" in words
    target = " ".join(word for word in words if word != "-q").strip("'\"")
    dir_stack = shell().dir_stack
    if target == "-":
        target = dir_stack[-1] if dir_stack else "/"
    elif target[:1] == "-" and target[1:].isdigit():
        # %cd -N: the directory %dhist numbers N.
        if int(target[1:]) >= len(api.dir_history):
            print("The requested directory does not exist in history.")
            return
        target = api.dir_history[int(target[1:])]
    previous = os.getcwd()
    try:
        os.chdir(os.path.expanduser(target) if target else "/")
    except OSError as exc:
        print(exc)
        return
    dir_stack.append(previous)
    if os.getcwd() != previous:
        api.dir_history.append(os.getcwd())
    if not quiet:
        print(os.getcwd())


@magic("line")
def pushd(line=""):
    from _sandbox_shell import shell

    shell().dir_stack.insert(0, os.getcwd())
    cd(line)


@magic("line")
def popd(line=""):
    from _sandbox_shell import shell

    stack = shell().dir_stack
    if not stack:
        raise UsageError("%popd on empty stack")
    os.chdir(stack.pop(0))
    print(f"popd -> {os.getcwd()}")


@magic("line")
def dirs(line=""):
    from _sandbox_shell import shell

    return [os.getcwd()] + shell().dir_stack


@magic("cell")
def writefile(line, cell):
    """%%writefile [-a] name: writes the cell's body to a file."""
    words = line.split()
    append = "-a" in words or "--append" in words
    names = [w for w in words if w not in ("-a", "--append")]
    if not names:
        raise UsageError("the following arguments are required: filename")
    filename = os.path.expanduser(" ".join(names).strip("'\""))
    if os.path.exists(filename):
        print(("Appending to %s" if append else "Overwriting %s") % filename)
    else:
        print("Writing %s" % filename)
    with open(filename, "a" if append else "w", encoding="utf-8") as f:
        f.write(cell)


@magic("line", frame=True)
def run_(line, frame=None):
    """%run [-i] [-n] [-t] [-p [-s key -l limit -q -r -T file -D file]] [-m] script.py
    [args] (or a notebook.ipynb: its code cells in order): runs it and keeps its names. As
    in IPython, sys.exit() ends it quietly, and a non-zero status says so in two lines."""
    import shlex

    import _sandbox_timing

    words = shlex.split(line)
    flags, profile = run_flags(words)
    if not words:
        raise UsageError("%run needs a file name (or -m and a module name)")
    target, args = words[0], words[1:]
    if "-m" not in flags:
        if not os.path.exists(target) and os.path.exists(target + ".py"):
            target += ".py"
        if not os.path.exists(target):
            raise UsageError(f"File `{target}` not found.")
    # The script's own __main__ module (unless -i or -n), installed while it runs, so that
    # pickle and multiprocessing find the classes it defines, as IPython does.
    main = None
    if "-i" in flags or target.endswith(".ipynb"):
        names = api.namespace  # a notebook's cells run in the notebook's names, as IPython runs them
    else:
        import types

        main = types.ModuleType(os.path.splitext(os.path.basename(target))[0]
                                if "-n" in flags else "__main__")
        main.__file__, main.__builtins__ = target, __builtins__
        names = main.__dict__
        if "-n" in flags:
            main = None

    if "-m" in flags:
        def execute():
            names.update(runpy_module(target))
    elif target.endswith(".ipynb"):
        execute = notebook_program(target)
    else:
        with open(target, encoding="utf-8") as f:
            source = f.read()
        api.sources[target] = source
        parts = compiled(parse_at(source, target, 1), target)

        def execute():
            run_compiled(parts, names)

    def run():
        try:
            execute()
        except SystemExit as exc:
            if exc.code and "-e" not in flags:
                sys.stderr.write("An exception has occurred, use %tb to see the full traceback."
                                 f"\n\nSystemExit: {exc.code}\n")

    saved_argv, sys.argv = sys.argv, [target] + args
    saved_main = sys.modules.get("__main__")
    if main is not None:
        sys.modules["__main__"] = main
    try:
        if profile is not None:
            return _sandbox_timing.profiled(run, profile)
        if "-t" in flags:
            return _sandbox_timing.timed(run)
        return run()
    finally:
        sys.argv = saved_argv
        if main is not None and saved_main is not None:
            sys.modules["__main__"] = saved_main
        elif main is not None:
            sys.modules.pop("__main__", None)
        if names is not api.namespace:
            api.namespace.update({k: v for k, v in names.items() if not k.startswith("__")})


def run_flags(words):
    """%run's flags, taken from the front of `words`, and -p's profiler options (a dict
    as %prun's, or None without -p)."""
    flags, profile = set(), None
    while words and words[0].startswith("-"):
        flag = words.pop(0)
        if flag in ("-d", "-b"):
            raise UsageError("the debugger needs input, which the sandbox does not have; "
                             "run the script without -d, and print what you need")
        if flag == "-p":
            profile = {}
        elif profile is not None and flag in ("-s", "-l", "-T", "-D") and words:
            profile.setdefault(flag[1], []).append(words.pop(0))
        elif profile is not None and flag in ("-q", "-r"):
            profile[flag[1]] = [True]
        else:
            flags.add(flag)
    return flags, profile


def runpy_module(name):
    """The names module `name` defines when run as __main__ (%run -m)."""
    import runpy

    return runpy.run_module(name, run_name="__main__", alter_sys=True)


def notebook_program(path):
    """What runs the code cells of the notebook at `path` in order, each read as a cell
    is (magics and all) and run in the notebook's own names, as IPython runs them;
    tracebacks name the notebook and the line of its cells' text, one after another."""
    import json
    import linecache

    try:
        with open(path, encoding="utf-8") as f:
            notebook = json.load(f)
        cells = [cell.get("source", "") for cell in notebook.get("cells", [])
                 if isinstance(cell, dict) and cell.get("cell_type") == "code"]
    except (ValueError, AttributeError) as exc:
        raise UsageError(f"{path} is not a notebook that can be read ({exc})") from None
    cells = ["".join(map(str, source)) if isinstance(source, list) else str(source)
             for source in cells]
    text = "".join(cell if cell.endswith("\n") else cell + "\n" for cell in cells)
    api.sources[path] = text
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    starts, line = [], 1
    for cell in cells:
        starts.append(line)
        line += len(cell.splitlines()) or 1

    def execute():
        # Cell by cell, as IPython runs them: a later cell's syntax error comes after
        # the earlier cells ran. __file__ names the notebook meanwhile, and is put back.
        missing = object()
        earlier = api.namespace.get("__file__", missing)
        api.namespace["__file__"] = path
        try:
            for cell, start in zip(cells, starts):
                run_compiled(compiled(parse_at(cell, path, start), path), api.namespace)
        finally:
            if earlier is missing:
                api.namespace.pop("__file__", None)
            else:
                api.namespace["__file__"] = earlier

    return execute


# ---- plots, settings and extensions --------------------------------------------------------

@magic("line")
def matplotlib(line=""):
    """%matplotlib [inline]: figures come back as images, which is what inline means."""
    backend = line.strip()
    if backend in ("-l", "--list"):
        print("Available matplotlib backends: ['inline']")
    elif backend and backend not in ("inline", "agg"):
        print(f"[the '{backend}' backend is not available here: figures come back as images, as with inline]")


@magic("line")
def config(line=""):
    """%config Class.trait = value: InteractiveShell.ast_node_interactivity and
    InlineBackend.figure_format(s) are honoured (figures are inline PNG, 'retina' at twice
    the resolution); the rest is accepted."""
    if not line.strip():
        print("Available objects for config:\n    InteractiveShell\n    InlineBackend\n"
              "    IPCompleter\n    HistoryManager")
        return None
    setting, equals, value = line.partition("=")
    if setting.strip() == "InteractiveShell.ast_node_interactivity" and equals:
        import ast

        from _sandbox_shell import INTERACTIVITY_MODES, SandboxShell

        chosen = ast.literal_eval(value.strip())
        if chosen not in INTERACTIVITY_MODES:
            raise UsageError(f"ast_node_interactivity is one of {', '.join(INTERACTIVITY_MODES)}, "
                             f"not {chosen!r}")
        SandboxShell.ast_node_interactivity = chosen
    elif setting.strip() in ("InlineBackend.figure_format", "InlineBackend.figure_formats") and equals:
        import ast

        import _sandbox_display

        try:
            chosen = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise UsageError(f"{value.strip()} is not a value: name the format in quotes, "
                             "e.g. 'retina'") from None
        _sandbox_display.set_figure_formats(chosen)
    return None


BUILT_IN_EXTENSIONS = {"autoreload", "storemagic", "IPython.extensions.autoreload", "IPython.extensions.storemagic"}


def load_extension(name):
    """Loads an extension module (its load_ipython_extension runs); IPython's own
    extensions are accepted."""
    from _sandbox_shell import shell

    manager = shell().extension_manager
    if name in manager.loaded:
        return "already loaded"
    if name.rsplit(".", 1)[-1] in ("autoreload", "storemagic") and name in BUILT_IN_EXTENSIONS:
        if name.endswith("autoreload"):
            import _sandbox_autoreload

            _sandbox_autoreload.register_magics(shell())
        manager.loaded.add(name)
        return None
    import importlib

    module = importlib.import_module(name)
    hook = getattr(module, "load_ipython_extension", None)
    if hook is None:
        return "no load function"
    hook(shell())
    manager.loaded.add(name)
    return None


@magic("line")
def load_ext(line):
    """%load_ext name: loads an extension."""
    if not line.strip():
        raise UsageError("Missing module name.")
    result = load_extension(line.strip())
    if result == "already loaded":
        print(f"The {line.strip()} extension is already loaded. To reload it, use:\n  %reload_ext {line.strip()}")
    elif result == "no load function":
        print(f"The {line.strip()} module is not an IPython extension.")


@magic("line")
def reload_ext(line):
    from _sandbox_shell import shell

    shell().extension_manager.loaded.discard(line.strip())
    load_extension(line.strip())


@magic("line")
def unload_ext(line):
    from _sandbox_shell import shell

    shell().extension_manager.loaded.discard(line.strip())


def accepted(name, said=None):
    """A magic that changes nothing here (a terminal's colours, a pager...)."""
    def quiet(line=""):
        if said:
            print(said)

    quiet.__name__ = name
    quiet.__doc__ = f"%{name}: accepted; nothing to change in the sandbox."
    return magic("line", name)(quiet)


# ---- lists of magics ----------------------------------------------------------------------

@magic("line")
def autosave(line=""):
    """%autosave n: the notebook front end's autosave interval; nothing to save here."""
    seconds = line.strip()
    if not seconds.isdigit():
        raise UsageError("%autosave takes a number of seconds (0 to turn it off)")
    print("Autosave disabled" if int(seconds) == 0 else f"Autosaving every {int(seconds)} seconds")


class MagicsDisplay:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


@magic("line")
def lsmagic(line=""):
    """%lsmagic: the magics this sandbox knows."""
    from _sandbox_shell import shell

    magics = shell().magics_manager.magics
    return MagicsDisplay(
        "Available line magics:\n" + "  ".join("%" + n for n in sorted(magics["line"]))
        + "\n\nAvailable cell magics:\n" + "  ".join("%%" + n for n in sorted(magics["cell"]))
        + "\n\nAutomagic is ON, % prefix IS NOT needed for line magics.")


@magic("line")
def magic_(line=""):
    """%magic: how magics work here."""
    print("Magics are IPython's commands: %name for one line, %%name as a cell's first line for "
          "the whole cell. %lsmagic lists them, %name? describes one.")


@magic("line")
def debug(line="", cell=None):
    """%debug: not available (the debugger needs input)."""
    raise UsageError("the debugger needs input, which the sandbox does not have; print the "
                     "variables you need, or use the traceback")


@magic("line")
def load(line):
    """%load: cannot replace the cell here."""
    raise UsageError("%load replaces the cell's text, which cannot happen here; use "
                     f"%run {line.strip() or 'file.py'} or print(open(path).read())")


XMODES = ("Plain", "Context", "Verbose", "Minimal", "Docs", "Doctest")
_xmode = ["Context"]


@magic("line")
def xmode(line=""):
    """%xmode [mode]: the mode IPython would format tracebacks in (the result's error
    keeps the whole traceback whatever the mode); no mode: the next one, as IPython."""
    asked = line.strip().capitalize()
    if not asked:
        asked = XMODES[(XMODES.index(_xmode[0]) + 1) % len(XMODES)]
    if asked not in XMODES:
        sys.stderr.write(f"UserWarning: Error changing user exception modes.\nUnrecognized "
                         f"mode in FormattedTB: <{asked}>\nValid modes: {list(XMODES)}\n")
        return
    _xmode[0] = asked
    print(f"Exception reporting mode: {asked}")


@magic("line")
def tb(line=""):
    """%tb: the last error's traceback again, as IPython prints it."""
    import traceback

    exc = getattr(sys, "last_exc", None)
    if exc is None:
        sys.stderr.write("No traceback available to show.\n")
        return
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


@magic("line")
def pylab(line=""):
    """%pylab: numpy and matplotlib's pylab names in the namespace, as IPython's
    (deprecated) %pylab puts them; figures come back as images whatever the backend."""
    before = dict(api.namespace)
    exec("import numpy\nimport matplotlib\nfrom matplotlib import pylab, mlab, pyplot\n"
         "np = numpy\nplt = pyplot\n", api.namespace)
    if "--no-import-all" not in line.split():
        exec("from matplotlib.pylab import *\nfrom numpy import *\n", api.namespace)
    from IPython.display import display

    api.namespace["display"] = display
    if not [word for word in line.split() if not word.startswith("-")]:
        print("Using matplotlib backend: module://matplotlib_inline.backend_inline")
    print("%pylab is deprecated, use %matplotlib inline and import the required libraries.")
    print("Populating the interactive namespace from numpy and matplotlib")
    clobbered = sorted(name for name, value in before.items()
                       if not name.startswith("_") and api.namespace.get(name) is not value)
    if clobbered:
        sys.stderr.write(f"UserWarning: pylab import has clobbered these variables: {clobbered}\n"
                         "`%matplotlib` prevents importing * from pylab and numpy\n")


@magic("line")
def dhist(line=""):
    """%dhist: the directories %cd has visited, first the one the session started in
    (%cd -N goes back to number N)."""
    print("Directory history (kept in _dh)")
    for number, directory in enumerate(api.dir_history):
        print(f"{number}: {directory}")


@magic("line")
def quickref(line=""):
    """%quickref: a short reference of the notebook syntax that works here."""
    print(QUICKREF)


QUICKREF = """IPython -- quick reference (as it works in this sandbox)

obj?, obj??      : details about obj (?? with its source)
%magic args      : a line magic; %%magic as a cell's first line runs the whole cell
%lsmagic         : the magics there are; %name? describes one
!pip install x   : installs through the sandbox's installer (also %pip); other shell
                   commands get a line saying what to use instead (there is no shell)
_, __, ___       : the last three values shown; _N and Out[N] the value of cell N
_i, _ii, In[N]   : the code of earlier cells; %history lists them, %rerun runs them
%time, %timeit   : time a statement (%%time, %%timeit for a cell)
%who, %whos      : the names the code defined
%run file.py     : runs a file in this interpreter
%matplotlib      : accepted; figures come back as images"""

def register(shell, *functions):
    for fn in functions:
        kind, name = fn._sandbox_magic
        shell.magics_manager.register_function(fn, kind, name)


def register_all(shell):
    """Registers the built-in magics on the shell."""
    import _sandbox_display
    import _sandbox_help
    import _sandbox_history
    import _sandbox_pip
    import _sandbox_shell_magics
    import _sandbox_store
    import _sandbox_timing

    register(shell, _sandbox_timing.time_, _sandbox_timing.timeit, _sandbox_timing.prun)
    register(shell, capture, who, whos, who_ls, reset, xdel, precision, env, set_env, pwd, cd, pushd, popd, dirs, writefile, run_, matplotlib, config,
             load_ext, reload_ext, unload_ext, lsmagic, magic_,
             debug, load, xmode, reset_selective, autosave, tb, pylab, dhist, quickref)
    register(shell, _sandbox_history.history, _sandbox_history.save, _sandbox_history.rerun,
             _sandbox_history.recall, _sandbox_history.macro)
    register(shell, _sandbox_help.pinfo, _sandbox_help.pinfo2, _sandbox_help.psearch,
             _sandbox_help.pdoc, _sandbox_help.psource, _sandbox_help.pfile, _sandbox_help.pycat)
    shell.magics_manager.register_function(writefile, "cell", "file")
    shell.magics_manager.register_function(debug, "cell", "debug")
    _sandbox_shell_magics.register_magics(shell)
    for name, said in (("automagic", "Automagic is ON, % prefix IS NOT needed for line magics."),
                       ("autocall", None), ("autoawait", None), ("doctest_mode", None),
                       ("colors", None),
                       ("pprint", None), ("gui", None), ("unalias", None),
                       ("rehashx", None), ("killbgscripts", None), ("page", None),
                       ("pdb", "Automatic pdb calling has been turned OFF (there is no debugger here)"),
                       ("logstart", None), ("logstop", None),
                       ("notebook", None), ("qtconsole", None), ("connect_info", None)):
        register(shell, accepted(name, said))
    _sandbox_display.register_magics(shell)
    _sandbox_pip.register_magics(shell)
    _sandbox_store.register_magics(shell)
