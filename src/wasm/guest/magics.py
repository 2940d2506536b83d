# IPython's common magics, as they behave in IPython (the output a notebook shows), for
# the sandbox's shell (shell.py). Code the magics run (%time's statement, %%time's body,
# %%capture's cell, %run's script) is read with IPython's syntax too and compiled at the
# line of the cell it stands on, so a traceback names the line the user wrote.

__sandbox_internal__ = True

import os
import sys
import time

import _sandbox_api as api
from _sandbox_shell import UsageError, no_shell_line


def magic(kind, name=None, expand=True, frame=False):
    """Marks a function as a magic of `kind` ('line', 'cell' or 'line_cell')."""
    def mark(fn):
        fn._sandbox_magic = (kind, name or fn.__name__.rstrip("_"))
        fn._sandbox_no_var_expand = not expand
        fn._sandbox_wants_frame = frame
        return fn

    return mark


# ---- running code the way a cell runs -----------------------------------------------------

def parse_at(code, filename, line, col=0):
    """The AST of `code` (IPython's syntax read) placed at `line` (1-based) and, for its
    first line, column `col` of `filename`."""
    import ast

    import _sandbox_notebook

    python = _sandbox_notebook.transform(code)
    tree = compile(python, filename, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    for node in ast.walk(tree):
        if col and getattr(node, "lineno", None) == 1:
            node.col_offset += col
            if getattr(node, "end_lineno", None) == 1:
                node.end_col_offset += col
    return ast.increment_lineno(tree, line - 1)


def run_tree(tree, filename, namespace, local_ns=None):
    """Runs a module's statements; the value of its last expression (or None)."""
    import ast

    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    run(compile(tree, filename, "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace, local_ns)
    if last is not None:
        return run(compile(last, filename, "eval", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace, local_ns)
    return None


def run(code, namespace, local_ns=None):
    if code.co_flags & 0x80:  # a coroutine: it awaits at the top level
        return api.run_awaitable(eval(code, namespace, local_ns))
    return eval(code, namespace, local_ns)


def run_source(code, filename, line, display_last=False, namespace=None):
    """Runs `code` as a cell body placed after `line` of `filename`; displays its last
    value when asked (as a cell does), else returns it."""
    tree = parse_at(code, filename, line + 1)
    value = run_tree(tree, filename, api.namespace if namespace is None else namespace)
    if display_last and value is not None:
        import _sandbox_display

        _sandbox_display.display(value)
        return None
    return value


def where(frame):
    """The file name and line of the cell line a magic stands on."""
    return frame.f_code.co_filename, frame.f_lineno


def column_of(text, frame):
    """Where `text` starts on the caller's line of the cell (0 when it is not found)."""
    source = api.sources.get(frame.f_code.co_filename, "")
    lines = source.splitlines()
    if 0 < frame.f_lineno <= len(lines):
        at = lines[frame.f_lineno - 1].find(text.strip()[:40])
        return max(at, 0)
    return 0


# ---- timing -------------------------------------------------------------------------------

def format_time(timespan, precision=3):
    """A duration as IPython writes it: `1.23 ms`, `45.6 μs`, `2min 3s`."""
    import math

    if timespan >= 60.0:
        parts, leftover = [], timespan
        for suffix, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            value = int(leftover / length)
            if value > 0:
                leftover = leftover % length
                parts.append(f"{value}{suffix}")
            if leftover < 1:
                break
        return " ".join(parts)
    units, scaling = ["s", "ms", "μs", "ns"], [1, 1e3, 1e6, 1e9]
    order = min(-int(math.floor(math.log10(timespan)) // 3), 3) if timespan > 0 else 3
    return "%.*g %s" % (precision, timespan * scaling[order], units[order])


def cpu_time():
    """The guest's CPU time: its wall time (it runs on one thread of its own, and WASI's
    process clock counts the whole host process)."""
    return time.perf_counter()


@magic("line_cell", expand=False, frame=True)
def time_(line="", cell=None, frame=None):
    """%time stmt / %%time: runs once and prints the CPU and wall time, as IPython does;
    the value of a last expression is handed back."""
    if line.strip() and cell is not None:
        raise UsageError("Can't use statement directly after '%%time'!")
    filename, at = where(frame)
    if cell is None:
        tree = parse_at(line, filename, at, column_of(line, frame))
    else:
        tree = parse_at(cell, filename, at + 1)
    local_ns = frame.f_locals if frame.f_locals is not frame.f_globals else None
    wall, cpu = time.perf_counter(), cpu_time()
    try:
        value = run_tree(tree, filename, api.namespace, local_ns)
    finally:
        cpu, wall = cpu_time() - cpu, time.perf_counter() - wall
        print(f"CPU times: user {format_time(cpu)}, sys: {format_time(0.0)}, total: {format_time(cpu)}")
        print(f"Wall time: {format_time(wall)}")
    return value


class TimeitResult:
    """What %timeit -o hands back: loops, repeat, best, worst, all_runs, average, stdev."""

    def __init__(self, loops, repeat, best, worst, all_runs, compile_time, precision):
        self.loops, self.repeat, self.best, self.worst = loops, repeat, best, worst
        self.all_runs, self.compile_time, self._precision = all_runs, compile_time, precision
        self.timings = [dt / loops for dt in all_runs]

    @property
    def average(self):
        import math

        return math.fsum(self.timings) / len(self.timings)

    @property
    def stdev(self):
        import math

        mean = self.average
        return (math.fsum((x - mean) ** 2 for x in self.timings) / len(self.timings)) ** 0.5

    def __str__(self):
        return "{} ± {} per loop (mean ± std. dev. of {} run{}, {:,} loop{} each)".format(
            format_time(self.average, self._precision), format_time(self.stdev, self._precision),
            self.repeat, "" if self.repeat == 1 else "s", self.loops, "" if self.loops == 1 else "s")

    def __repr__(self):
        return f"<TimeitResult : {self}>"


def timeit_options(line):
    """%timeit's options (-n N -r R -p P -q -o -t -c -v V) and the statement after them."""
    options, rest = {}, line.lstrip()
    while rest.startswith("-") and len(rest) > 1 and rest[1] in "nrpqotcv":
        flag, rest = rest[1], rest[2:]
        if flag in "nrpv":
            rest = rest.lstrip()
            value, _, rest = rest.partition(" ")
            options[flag] = value
        else:
            options[flag] = True
        rest = rest.lstrip()
    return options, rest


@magic("line_cell", expand=False, frame=True)
def timeit(line="", cell=None, frame=None):
    """%timeit stmt / %%timeit setup: times many runs, as IPython does (enough loops for
    0.2 s, 7 repeats unless -n and -r say otherwise)."""
    import ast
    import gc

    options, stmt = timeit_options(line)
    if not stmt.strip() and cell is None:
        return None
    number, repeat = int(options.get("n", 0)), int(options.get("r", 7))
    precision = int(options.get("p", 3))
    filename, at = where(frame)
    if cell is None:
        setup, body = ast.parse("pass"), parse_at(stmt, filename, at, column_of(stmt, frame))
    else:
        setup, body = parse_at(stmt or "pass", filename, at), parse_at(cell, filename, at + 1)
    template = ast.parse("def inner(_it, _timer):\n    pass\n    _t0 = _timer()\n    for _i in _it:\n        pass\n    _t1 = _timer()\n    return _t1 - _t0\n")
    inner = template.body[0]
    inner.body[0:1] = setup.body or [ast.Pass()]
    loop = next(node for node in inner.body if isinstance(node, ast.For))
    loop.body = body.body or [ast.Pass()]
    ast.fix_missing_locations(template)
    started = time.perf_counter()
    code = compile(template, filename, "exec")
    compile_time = time.perf_counter() - started
    scope = {}
    exec(code, api.namespace, scope)
    inner = scope["inner"]
    timer = time.perf_counter

    def measure(n):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return inner(iter(range(n)), timer)
        finally:
            if enabled:
                gc.enable()

    if number == 0:
        for index in range(10):
            number = 10 ** index
            if measure(number) >= 0.2:
                break
    runs = [measure(number) for _ in range(repeat)]
    result = TimeitResult(number, repeat, min(runs) / number, max(runs) / number, runs, compile_time, precision)
    if "q" not in options:
        if result.worst > 4 * result.best > 0 and result.worst > 1e-6:
            print("The slowest run took %0.2f times longer than the fastest. This could mean that "
                  "an intermediate result is being cached." % (result.worst / result.best))
        print(result)
        if compile_time > 0.1:
            print("Compiler time: %.2f s" % compile_time)
    if "v" in options:
        api.namespace[options["v"]] = result
    return result if "o" in options else None


@magic("line_cell", expand=False, frame=True)
def prun(line="", cell=None, frame=None):
    """%prun stmt / %%prun: runs under the profiler and prints its report."""
    import cProfile
    import pstats

    filename, at = where(frame)
    code = cell if cell is not None else line
    tree = parse_at(code, filename, at + (cell is not None))
    profile = cProfile.Profile()
    profile.enable()
    try:
        run_tree(tree, filename, api.namespace)
    finally:
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(30)


# ---- output capture -----------------------------------------------------------------------

@magic("cell", frame=True)
def capture(line, cell, frame=None):
    """%%capture [--no-stdout] [--no-stderr] [--no-display] [name]: runs the cell and keeps
    what it printed and displayed in `name` (an IPython CapturedIO), showing nothing."""
    import _sandbox_display

    words = line.split()
    name = next((w for w in words if not w.startswith("--")), None)
    filename, at = where(frame)
    with _sandbox_display.capture_output("--no-stdout" not in words, "--no-stderr" not in words,
                                         "--no-display" not in words) as captured:
        run_source(cell, filename, at, display_last=True)
    if name and not cell.rstrip().endswith(";"):
        api.namespace[name] = captured


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
    namespace.update({"In": api.inputs, "_ih": api.inputs, "Out": api.outputs, "_oh": api.outputs})


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
    numpy = sys.modules.get("numpy")
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

    target = line.strip().strip("'\"")
    dir_stack = shell().dir_stack
    if target == "-":
        target = dir_stack[-1] if dir_stack else "/"
    previous = os.getcwd()
    try:
        os.chdir(os.path.expanduser(target) if target else "/")
    except OSError as exc:
        print(exc)
        return
    dir_stack.append(previous)
    if "-q" not in line.split():
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
    """%run [-i] [-m] script.py [args]: runs a script (or module) and keeps its names."""
    import runpy
    import shlex

    words = shlex.split(line)
    flags = set()
    while words and words[0].startswith("-"):
        flags.add(words.pop(0))
    if not words:
        raise UsageError("%run needs a file name (or -m and a module name)")
    target, args = words[0], words[1:]
    saved_argv = sys.argv
    sys.argv = [target] + args
    try:
        if "-m" in flags:
            names = runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            if not os.path.exists(target) and os.path.exists(target + ".py"):
                target += ".py"
            if not os.path.exists(target):
                raise UsageError(f"File `{target}` not found.")
            with open(target, encoding="utf-8") as f:
                source = f.read()
            names = api.namespace if "-i" in flags else {"__name__": "__main__" if "-n" not in flags else os.path.splitext(os.path.basename(target))[0], "__file__": target, "__builtins__": __builtins__}
            api.sources[target] = source
            run_tree(parse_at(source, target, 1), target, names)
    finally:
        sys.argv = saved_argv
    if names is not api.namespace:
        api.namespace.update({k: v for k, v in names.items() if not k.startswith("__")})


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
    """%config Class.trait = value: InteractiveShell.ast_node_interactivity is honoured;
    the rest is accepted (the sandbox's plots are always inline PNG)."""
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
            register(shell(), autoreload, aimport)
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


@magic("line")
def autoreload(line=""):
    """%autoreload [mode]: accepted (modules are imported afresh when %run or reloaded)."""


@magic("line")
def aimport(line=""):
    """%aimport module: imports it."""
    import importlib

    for name in line.replace(",", " ").split():
        api.namespace[name.split(".")[0]] = importlib.import_module(name.lstrip("-"))


def accepted(name, said=None):
    """A magic that changes nothing here (a terminal's colours, a pager...)."""
    def quiet(line=""):
        if said:
            print(said)

    quiet.__name__ = name
    quiet.__doc__ = f"%{name}: accepted; nothing to change in the sandbox."
    return magic("line", name)(quiet)


# ---- help ---------------------------------------------------------------------------------

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
def psearch(line):
    """%psearch pattern (or np.*sum*?): the names matching a wildcard pattern."""
    import fnmatch

    pattern = line.split()[0] if line.split() else "*"
    base, _, leaf = pattern.rpartition(".")
    scope = vars(resolve(base)) if base else {**vars(sys.modules["builtins"]), **api.namespace}
    for name in sorted(fnmatch.filter([n for n in scope if not n.startswith("_")], leaf)):
        print(f"{base + '.' if base else ''}{name}")


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


def cell_range(text, newest):
    """The cell numbers a range names: 4, 1-3 (both ends), 2:5 (the end left out)."""
    first, dash, last = text.partition("-")
    if not dash:
        first, dash, last = text.partition(":")
        if dash:
            last = str(int(last) - 1) if last else str(newest)
    try:
        low, high = int(first or 1), int(last) if dash else int(first)
    except ValueError:
        raise UsageError(f"{text!r} is not a range of cells (4, 1-3 or 2:5; only this "
                         "session's cells are kept)") from None
    return list(range(max(low, 1), min(high, newest) + 1))


def chosen_cells(ranges, newest):
    if not ranges:
        return list(range(1, newest + 1))
    return [n for text in ranges for n in cell_range(text, newest)]


@magic("line")
def history(line=""):
    """%history [-n] [-o] [-p] [-l [n]] [-g pattern] [-f file] [range ...]: the cells this
    session ran (In), as IPython lists them; ranges are 4, 1-3 or 2:5."""
    import fnmatch
    import shlex

    args, options = shlex.split(line), {}
    ranges = []
    while args:
        arg = args.pop(0)
        if arg in ("-n", "-o", "-p", "-r", "-t", "-u"):
            options[arg] = True
        elif arg in ("-l", "-g", "-f"):
            options[arg] = args.pop(0) if args and not args[0].startswith("-") else None
        else:
            ranges.append(arg)
    inputs = api.inputs
    numbers = chosen_cells(ranges, len(inputs) - 1)
    if "-g" in options:
        pattern = f"*{options['-g'] or ''}*"
        numbers = [n for n in numbers if fnmatch.fnmatch(inputs[n], pattern)]
    if "-l" in options:
        numbers = numbers[-int(options["-l"] or 10):]
    lines = []
    for n in numbers:
        code = inputs[n]
        if "-p" in options:
            code = ">>> " + code.replace("\n", "\n... ")
        if "-n" in options:
            code = f"{n:>4}:" + ("\n" if "\n" in code else " ") + code
        lines.append(code)
        if "-o" in options and n in api.outputs:
            lines.append(api.format_value(api.outputs[n]))
    text = "\n".join(lines)
    if options.get("-f"):
        with open(options["-f"], "w") as file:
            file.write(text + "\n")
    elif text:
        print(text)


@magic("line")
def save(line=""):
    """%save [-a] file range ...: writes those cells' code to file (.py added if it has no
    extension), as IPython does."""
    import shlex

    args = shlex.split(line)
    append = "-a" in args
    args = [a for a in args if a not in ("-a", "-f", "-r")]
    if len(args) < 2:
        raise UsageError("%save needs a file name and the cells to write (e.g. %save analysis.py 1-4)")
    path = args[0] if os.path.splitext(args[0])[1] else args[0] + ".py"
    code = "\n".join(api.inputs[n] for n in chosen_cells(args[1:], len(api.inputs) - 1))
    with open(path, "a" if append else "w") as file:
        file.write(code + "\n")
    print(f"The following commands were written to file `{path}`:\n{code}")


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


# ---- shells and other languages ------------------------------------------------------------

@magic("cell")
def no_shell(line, cell):
    sys.stderr.write(no_shell_line(cell.strip().splitlines()[0] if cell.strip() else line) + "\n")


@magic("cell")
def python(line, cell):
    """%%python (also %%python3): the cell as a python program, run in this interpreter
    as a fresh process's __main__ (see python_cmd.py)."""
    import _sandbox_python_cmd

    _sandbox_python_cmd.cell_program(line, cell)


@magic("cell")
def script(line, cell):
    """%%script python ...: as %%python; %%script with any other command: no shell."""
    import _sandbox_python_cmd

    if _sandbox_python_cmd.cell_program(line, cell, command="") is None:
        no_shell(line, cell)


@magic("line")
def system(line):
    """%system cmd (also %sx): what cmd prints, as a list of lines."""
    from _sandbox_shell import shell

    return shell().getoutput(line)


def alias_magic(name):
    """A shell alias IPython defines (ls, cat, mkdir...): a shell line."""
    def alias(line=""):
        from _sandbox_shell import shell

        shell().system(f"{name} {line}".strip())

    alias.__name__ = name
    alias.__doc__ = f"%{name}: a shell command (there is no shell here: a line says what to use)."
    return magic("line", name)(alias)


def register(shell, *functions):
    for fn in functions:
        kind, name = fn._sandbox_magic
        shell.magics_manager.register_function(fn, kind, name)


def register_all(shell):
    """Registers the built-in magics on the shell."""
    import _sandbox_display
    import _sandbox_pip
    import _sandbox_store

    register(shell, time_, timeit, prun, capture, who, whos, who_ls, reset, xdel, precision,
             env, set_env, pwd, cd, pushd, popd, dirs, writefile, run_, matplotlib, config,
             load_ext, reload_ext, unload_ext, pinfo, pinfo2, psearch, lsmagic, magic_,
             history, save, debug, load, system, xmode)
    shell.magics_manager.register_function(system, "line", "sx")
    shell.magics_manager.register_function(writefile, "cell", "file")
    shell.magics_manager.register_function(script, "cell", "script")
    for name in ("bash", "sh", "system", "sx", "perl", "ruby", "!"):
        shell.magics_manager.register_function(no_shell, "cell", name)
    for name in ("python", "python3", "pypy"):
        shell.magics_manager.register_function(python, "cell", name)
    shell.magics_manager.register_function(debug, "cell", "debug")
    for name in ("ls", "ll", "cat", "mkdir", "rmdir", "mv", "rm", "cp", "ldir", "lf", "lk", "lx"):
        register(shell, alias_magic(name))
    for name, said in (("automagic", "Automagic is ON, % prefix IS NOT needed for line magics."),
                       ("autocall", None), ("autoawait", None), ("doctest_mode", None),
                       ("colors", None),
                       ("pprint", None), ("gui", None), ("alias", None), ("unalias", None),
                       ("rehashx", None), ("killbgscripts", None), ("page", None),
                       ("pdb", "Automatic pdb calling has been turned OFF (there is no debugger here)"),
                       ("tb", None), ("logstart", None), ("logstop", None),
                       ("notebook", None), ("qtconsole", None), ("connect_info", None)):
        register(shell, accepted(name, said))
    _sandbox_display.register_magics(shell)
    _sandbox_pip.register_magics(shell)
    _sandbox_store.register_magics(shell)
