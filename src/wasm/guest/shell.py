# The sandbox's IPython-like shell: what get_ipython() returns, and what the code
# syntax.py writes for magics and shell lines calls into. Magics are looked up in a
# registry (magics.py fills it with IPython's common ones; code adds its own with
# register_magic_function or IPython.core.magic's decorators), their arguments expanded
# the way IPython expands them ({expr} and $name from the caller's namespace). There is no
# shell behind `!`: pip runs through the host's installer, and any other command gets one
# line saying there is no shell and what to use instead.

__sandbox_internal__ = True

import string
import sys

import _sandbox_api as api


class UsageError(Exception):
    """A magic was used wrongly (IPython's UsageError): reported in one line."""

    _sandbox_short_traceback = True


UsageError.__module__ = "IPython.core.error"


def magic_words(line):
    """A magic's line split as a shell splits it; a UsageError for an unclosed quote."""
    import shlex

    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc} in {line!r}") from None


# What to use instead of a shell command, for the commands notebooks run most.
INSTEAD = {
    "ls": "os.listdir('.') or pathlib.Path('.').iterdir() (or the list_files tool)",
    "ll": "os.listdir('.') or pathlib.Path('.').iterdir() (or the list_files tool)",
    "dir": "os.listdir('.') (or the list_files tool)",
    "cat": "open(path).read() (or the read_file tool)",
    "head": "open(path).readlines()[:10] (or the read_file tool)",
    "tail": "open(path).readlines()[-10:] (or the read_file tool)",
    "less": "open(path).read() (or the read_file tool)",
    "more": "open(path).read() (or the read_file tool)",
    "wc": "len(open(path).readlines())",
    "grep": "a loop over open(path) with `if pattern in line` (or re)",
    "find": "pathlib.Path('.').rglob('*')",
    "pwd": "os.getcwd() (or %pwd)",
    "cd": "os.chdir(path) (or %cd)",
    "mkdir": "os.makedirs(path, exist_ok=True)",
    "rm": "os.remove(path) or shutil.rmtree(path)",
    "rmdir": "os.rmdir(path)",
    "cp": "shutil.copy(src, dst) or shutil.copytree(src, dst)",
    "mv": "shutil.move(src, dst)",
    "touch": "pathlib.Path(path).touch()",
    "echo": "print(...)",
    "wget": "urllib.request.urlretrieve(url, path) or requests.get(url) (hosts the server allows)",
    "curl": "urllib.request.urlopen(url).read() or requests.get(url) (hosts the server allows)",
    "unzip": "zipfile.ZipFile(path).extractall()",
    "zip": "shutil.make_archive(name, 'zip', folder)",
    "tar": "tarfile.open(path).extractall()",
    "gunzip": "gzip.open(path).read()",
    "du": "os.path.getsize(path) or os.stat(path).st_size",
    "df": "shutil.disk_usage('/')",
    "env": "os.environ (or %env)",
    "which": "shutil.which (there are no programs to find here)",
    "python": "%run script.py (`!python script.py`, `-c` and `-m` run here, alone on a line)",
    "python3": "%run script.py (`!python script.py`, `-c` and `-m` run here, alone on a line)",
    "git": "nothing here: there is no git; fetch files over HTTP from allowed hosts",
    "nvidia-smi": "nothing: the sandbox has no GPU",
    "apt": "nothing: only pure-Python packages can be installed, with %pip install",
    "apt-get": "nothing: only pure-Python packages can be installed, with %pip install",
    "sudo": "nothing: there is no root and no shell here",
    "conda": "%pip install (pure-Python packages)",
}
NO_SHELL = "there is no shell in this sandbox, so `{cmd}` cannot run; use {instead}"
GENERIC = "Python's os, pathlib and shutil, or the list_files, read_file and write_file tools"


class NoShellError(OSError):
    """A shell command's output was asked for (`x = !cmd`, getoutput, %sx), and there
    is no shell: an error, so that the message is not taken for the command's output."""


def no_shell_line(cmd):
    """The one line a shell command gets."""
    words = cmd.split()
    first = words[0].rsplit("/", 1)[-1] if words else ""
    return NO_SHELL.format(cmd=cmd.strip(), instead=INSTEAD.get(first, GENERIC))


class SList(list):
    """The lines a command printed (IPython's SList): .s, .n, .l, .p, grep(), fields()."""

    @property
    def s(self):
        return " ".join(self)

    @property
    def n(self):
        return "\n".join(self)

    @property
    def l(self):  # noqa: E743 - IPython's name
        return list(self)

    @property
    def p(self):
        import pathlib

        return [pathlib.Path(line) for line in self]

    def grep(self, pattern, prune=False, field=None):
        import re

        match = (lambda line: re.search(pattern, line)) if isinstance(pattern, str) else pattern
        return SList(line for line in self if bool(match(line)) != prune)

    def fields(self, *indexes):
        rows = [line.split() for line in self]
        if not indexes:
            return SList(" ".join(row) for row in rows)
        return SList(" ".join(row[i] for i in indexes if -len(row) <= i < len(row)) for row in rows)


class Expander(string.Formatter):
    """IPython's expansion of magic and shell arguments: {expression} is evaluated,
    $name (and $name.attr) replaced, $$ is a dollar sign."""

    def __init__(self, namespace):
        self.namespace = namespace

    def get_field(self, field_name, args, kwargs):
        return eval(field_name, self.namespace), field_name

    def parse(self, text):
        for literal, field, spec, conversion in super().parse(text):
            yield from dollars(literal, self.namespace)
            if field is not None:
                yield "", field, spec, conversion


def dollars(literal, namespace):
    """`$name` pieces of a literal: (text, field) pairs as Formatter.parse gives them."""
    import re

    at = 0
    text = ""
    for match in re.finditer(r"\$(\$?[\w.]+)", literal):
        text += literal[at:match.start()]
        name = match.group(1)
        if name.startswith("$"):
            text += name
        else:
            yield text, name.rstrip("."), "", None
            text = ""
            if name.endswith("."):
                text = "."
        at = match.end()
    yield text + literal[at:], None, None, None


class Formatter:
    """One MIME type's printers registered by type (what display_formatter.formatters[m]
    is in IPython: for_type(), for_type_by_name(), lookup())."""

    def __init__(self, mime):
        self.format_type = mime
        self.enabled = True
        self.type_printers = {}
        self.deferred_printers = {}

    def for_type(self, typ, func=None):
        if isinstance(typ, str):
            module, _, name = typ.rpartition(".")
            return self.for_type_by_name(module, name, func)
        old = self.type_printers.get(typ)
        if func is not None:
            self.type_printers[typ] = func
        return old

    def for_type_by_name(self, type_module, type_name, func=None):
        key = (type_module, type_name)
        old = self.deferred_printers.get(key)
        if func is not None:
            self.deferred_printers[key] = func
        return old

    def lookup(self, obj):
        for cls in type(obj).__mro__:
            if cls in self.type_printers:
                return self.type_printers[cls]
            key = (cls.__module__, cls.__name__)
            if key in self.deferred_printers:
                self.type_printers[cls] = self.deferred_printers.pop(key)
                return self.type_printers[cls]
        return None

    def pop(self, typ, default=None):
        return self.type_printers.pop(typ, default)

    def __contains__(self, typ):
        return typ in self.type_printers


class DisplayFormatter:
    MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
             "image/svg+xml", "application/json", "application/javascript", "application/pdf")

    def __init__(self):
        self.formatters = {mime: Formatter(mime) for mime in self.MIMES}
        self.active_types = list(self.MIMES)

    def format(self, obj, include=None, exclude=None):
        import _sandbox_display

        return _sandbox_display.mime_bundle(obj), {}


class Events:
    """IPython's event callbacks: pre_execute and pre_run_cell(info) before each cell,
    post_execute and post_run_cell(result) after it (see cell_started, cell_ended). A
    callback that raises is reported, as IPython reports it, and the cell goes on."""

    NAMES = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized")

    def __init__(self):
        self.callbacks = {}

    def register(self, event, function):
        if event not in self.NAMES:
            raise KeyError(f"Unknown event {event}")
        if not callable(function):
            raise TypeError(f"Need a callable, got {function!r}")
        if function not in self.callbacks.setdefault(event, []):
            self.callbacks[event].append(function)

    def unregister(self, event, function):
        if function not in self.callbacks.get(event, []):
            raise ValueError(f"Function {function!r} is not registered as a {event} callback")
        self.callbacks[event].remove(function)

    def trigger(self, event, *args, **kwargs):
        import traceback

        for function in list(self.callbacks.get(event, [])):
            try:
                function(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - reported, and the cell goes on (even
                # a SystemExit or KeyboardInterrupt: outside a cell, nothing would catch it)
                print(f"Error in callback {function} (for {event}), with arguments args "
                      f"{args},kwargs {kwargs}:")
                traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)


class ExecutionInfo:
    """What pre_run_cell callbacks get (IPython's ExecutionInfo)."""

    def __init__(self, raw_cell):
        self.raw_cell = self.transformed_cell = raw_cell
        self.store_history, self.silent, self.shell_futures, self.cell_id = True, False, True, None

    def __repr__(self):
        return f"<ExecutionInfo object at {id(self):x}, raw_cell=\"{self.raw_cell[:50]}\">"


def cell_started(code, number):
    """Before cell `number` runs (the driver calls this): the shell's count, and the
    pre_execute and pre_run_cell events. What cell_ended needs."""
    if not _shell:
        return None
    shell = _shell[0]
    shell.execution_count = number
    info = ExecutionInfo(code)
    if shell.events.callbacks:
        shell.events.trigger("pre_execute")
        shell.events.trigger("pre_run_cell", info)
    return info


def cell_ended(info, error=None, value=None):
    """After the cell `info` describes ran (failing with `error`, if it did, or showing
    `value`): the post_execute and post_run_cell events."""
    if not _shell or info is None or not _shell[0].events.callbacks:
        return
    result = ExecutionResult(result=value, error=error)
    result.info, result.execution_count = info, _shell[0].execution_count
    _shell[0].events.trigger("post_execute")
    _shell[0].events.trigger("post_run_cell", result)


class MagicsManager:
    """The registry of magics: magics['line'][name] and magics['cell'][name]."""

    def __init__(self):
        self.magics = {"line": {}, "cell": {}}

    def register_function(self, func, magic_kind="line", magic_name=None):
        name = magic_name or func.__name__
        kinds = ("line", "cell") if magic_kind == "line_cell" else (magic_kind,)
        for kind in kinds:
            self.magics[kind][name] = func
        if "line" in kinds:
            api.automagic.add(name)

    def register(self, *objects):
        for obj in objects:
            instance = obj(shell()) if isinstance(obj, type) else obj
            for kind, names in getattr(type(instance), "magics", {}).items():
                for name, method in names.items():
                    self.magics[kind][name] = getattr(instance, method)
                    if kind == "line":
                        api.automagic.add(name)

    def find(self, kind, name):
        return self.magics[kind].get(name)

    def lsmagic(self):
        return self.magics


class ExtensionManager:
    def __init__(self):
        self.loaded = set()

    def load_extension(self, name):
        import _sandbox_magics

        return _sandbox_magics.load_extension(name)


class Kernel:
    """get_ipython().kernel, as far as code reaches for it: to restart the interpreter
    after installing packages, which nothing here needs."""

    def do_shutdown(self, restart=False):
        if restart:
            print("[the sandbox's interpreter was not restarted: packages %pip installs import "
                  "at once, without a restart; variables are kept (%reset forgets them)]")
        else:
            print("[the sandbox's interpreter keeps running: the close_sandbox tool ends it]")
        return {"status": "ok", "restart": restart}


def run_redirected_line(cmd, stdout=None, stderr=None):
    """Runs the command line `cmd` if it is pip or python, its output and errors going
    where its closing redirections send them (see redirects.py), else to `stdout` and
    `stderr`: its exit status; None for any other command."""
    import _sandbox_redirects as redirects

    command, sent = redirects.split(cmd)
    if not sent or not runs_here(command):
        return run_line(cmd, stdout=stdout, stderr=stderr)
    try:
        with redirects.Streams(sent, stdout, stderr) as streams:
            return run_line(command, stdout=streams.stdout, stderr=streams.stderr)
    except OSError as error:
        (stderr or sys.stderr).write(f"{error}\n")
        return 1


def runs_here(cmd):
    """Whether the command line `cmd` is one this interpreter runs (pip, python; not one
    that joins commands with a shell operator, which is refused before any file opens)."""
    import shlex

    import _sandbox_pip
    import _sandbox_python_cmd

    try:
        argv = shlex.split(cmd)
    except ValueError:
        return False
    if _sandbox_pip.shell_operator(cmd) is not None:
        return False
    return _sandbox_pip.pip_args(argv) is not None or _sandbox_python_cmd.program(argv) is not None


def run_line(cmd, stdout=None, stderr=None):
    """Runs `cmd` if it is pip or python: its exit status, else None."""
    import _sandbox_pip
    import _sandbox_python_cmd

    status = _sandbox_pip.run_command(cmd, stdout=stdout, stderr=stderr)
    if status is None:
        status = _sandbox_python_cmd.run(cmd, stdout=stdout, stderr=stderr)
    return status


class ExecutionResult:
    def __init__(self, result=None, error=None):
        self.result, self.error_in_exec, self.error_before_exec = result, error, None
        self.success = error is None

    def raise_error(self):
        if self.error_in_exec is not None:
            raise self.error_in_exec


# IPython's values of InteractiveShell.ast_node_interactivity.
INTERACTIVITY_MODES = ("all", "last", "last_expr", "none", "last_expr_or_assign")


class SandboxShell:
    """The sandbox's IPython-like shell (see `%lsmagic` for its magics)."""

    # Which of a cell's expressions show their values (the driver reads it each cell).
    ast_node_interactivity = "last_expr"

    def __init__(self):
        self.config = {}
        self.kernel = Kernel()
        self.events = Events()
        self.display_formatter = DisplayFormatter()
        self.magics_manager = MagicsManager()
        self.extension_manager = ExtensionManager()
        self.user_ns_hidden = {}
        self.automagic = True
        self.autocall = 0
        self.execution_count = 0
        self.dir_stack = []
        self.home_dir = "/"
        self.custom_exceptions = ()
        # IPython's colour scheme, which libraries read to pick their own colours
        # (sympy's init_printing does).
        self.colors = "neutral"

    @property
    def user_ns(self):
        return api.namespace

    user_global_ns = user_ns

    # ---- magics -------------------------------------------------------------------------
    def find_line_magic(self, name):
        return self.magics_manager.find("line", name)

    def find_cell_magic(self, name):
        return self.magics_manager.find("cell", name)

    def find_magic(self, name, magic_kind="line"):
        return self.magics_manager.find(magic_kind, name)

    def register_magic_function(self, func, magic_kind="line", magic_name=None):
        self.magics_manager.register_function(func, magic_kind, magic_name)

    def register_magics(self, *objects):
        self.magics_manager.register(*objects)

    def run_line_magic(self, magic_name, line, _stack_depth=1):
        """Runs the line magic `%magic_name line`."""
        fn = self.find_line_magic(magic_name)
        if fn is None:
            if magic_name.startswith("%"):
                raise UsageError(
                    f"%%{magic_name.lstrip('%')} is a cell magic: it must be the first line of the "
                    "cell, and the rest of the cell is what it runs"
                )
            also = " (but cell magic `%%{}` exists, did you mean that instead?)".format(magic_name) if self.find_cell_magic(magic_name) else ""
            raise UsageError(f"Line magic function `%{magic_name}` not found{also}.")
        frame = sys._getframe(_stack_depth)
        if not getattr(fn, "_sandbox_no_var_expand", False):
            line = self.var_expand(line, frame)
        if getattr(fn, "_sandbox_wants_frame", False):
            return fn(line, frame=frame)
        if getattr(fn, "needs_local_scope", False):
            return fn(line, local_ns=frame.f_locals)
        return fn(line)

    def run_cell_magic(self, magic_name, line, cell):
        """Runs the cell magic `%%magic_name line` on the body `cell`."""
        fn = self.find_cell_magic(magic_name)
        if fn is None:
            also = " (but line magic `%{}` exists, did you mean that instead?)".format(magic_name) if self.find_line_magic(magic_name) else ""
            raise UsageError(f"Cell magic `%%{magic_name}` not found{also}.")
        if cell == "":
            also = f" Did you mean the line magic %{magic_name} (single %)?" if self.find_line_magic(magic_name) else ""
            raise UsageError(f"%%{magic_name} is a cell magic, but the cell body is empty.{also}")
        frame = sys._getframe(1)
        if not getattr(fn, "_sandbox_no_var_expand", False):
            line = self.var_expand(line, frame)
        if getattr(fn, "_sandbox_wants_frame", False):
            return fn(line, cell, frame=frame)
        return fn(line, cell)

    def magic(self, arg_s):
        """Runs a line magic given as `name args` (or `%name args`): the old spelling."""
        name, _, args = arg_s.lstrip().lstrip("%").partition(" ")
        return self.run_line_magic(name, args, _stack_depth=2)

    def var_expand(self, cmd, frame=None):
        """`cmd` with {expressions} and $names taken from the caller's namespace."""
        namespace = dict(self.user_ns)
        if frame is not None and frame.f_locals is not frame.f_globals:
            namespace.update(frame.f_locals)
        try:
            return Expander(namespace).vformat(cmd, args=[], kwargs={})
        except Exception:  # noqa: BLE001 - left as written when it cannot be expanded
            return cmd

    # ---- commands -----------------------------------------------------------------------
    def system(self, cmd):
        """Runs `!cmd`: pip through the host's installer, python in this interpreter
        (see python_cmd.py); anything else says there is no shell. The exit status is kept in `_exit_code`, as IPython keeps it.
        Their output goes to a file named after a closing `> file` or `>> file`, as a shell
        would send it (`!pip freeze > requirements.txt`)."""
        cmd = self.var_expand(cmd, sys._getframe(1))
        status = run_redirected_line(cmd)
        if status is None:
            sys.stderr.write(no_shell_line(cmd) + "\n")
            status = 127
        self.user_ns["_exit_code"] = status

    system_piped = system_raw = system

    def getoutput(self, cmd, split=True, depth=0):
        """What `cmd` prints, as the lines of an SList (`x = !cmd`); NoShellError for a
        command other than pip (its output would be a file list, say, and the message
        taken for one). A closing `> file` sends the output there instead."""
        import io

        cmd = self.var_expand(cmd, sys._getframe(depth + 1))
        out = io.StringIO()
        # What a `> file` sends to the file is not among the lines, as in a shell.
        status = run_redirected_line(cmd, stdout=out, stderr=out)
        if status is None:
            raise NoShellError(no_shell_line(cmd))
        text = out.getvalue()
        return SList(text.splitlines()) if split else text

    # ---- running code -------------------------------------------------------------------
    def run_cell(self, raw_cell, store_history=False, silent=False, shell_futures=True, cell_id=None):
        """Runs a cell in the user's namespace, magics and all; its last expression is
        displayed (unless silent). Errors are kept in the result, and shown."""
        import linecache
        import traceback

        import _sandbox_cell_code

        # Its own name, with its lines where tracebacks look (as a cell's are).
        filename = f"<run_cell-{len(api.sources)}>"
        api.sources[filename] = raw_cell
        linecache.cache[filename] = (len(raw_cell), None, raw_cell.splitlines(True), filename)
        try:
            value = _sandbox_cell_code.run_source(raw_cell, filename, 0, display_last=not silent)
        except Exception as exc:  # noqa: BLE001 - IPython shows it and carries on
            exc.__traceback__ = api.user_traceback(exc.__traceback__)
            sys.last_exc, sys.last_type, sys.last_value, sys.last_traceback = \
                exc, type(exc), exc, exc.__traceback__
            if not silent:
                traceback.print_exception(type(exc), exc, exc.__traceback__)
            return ExecutionResult(error=exc)
        return ExecutionResult(result=value)

    def ex(self, cmd):
        exec(cmd, self.user_ns)

    def ev(self, expr):
        return eval(expr, self.user_ns)

    def push(self, variables, interactive=True):
        if isinstance(variables, str):
            frame = sys._getframe(1)
            variables = {name: eval(name, frame.f_globals, frame.f_locals) for name in variables.replace(",", " ").split()}
        self.user_ns.update(variables)

    def drop_by_id(self, variables):
        for name, value in variables.items():
            if self.user_ns.get(name) is value:
                del self.user_ns[name]

    def transform_cell(self, raw_cell):
        import _sandbox_notebook

        return _sandbox_notebook.transform(raw_cell)

    def showtraceback(self, exc_tuple=None, *args, **kwargs):
        import traceback

        kind, value, tb = exc_tuple or sys.exc_info()
        if value is not None:
            traceback.print_exception(kind, value, tb)

    showsyntaxerror = showtraceback

    def show_usage(self):
        print("This sandbox reads IPython's syntax: %magics (see %lsmagic), %%cell magics, "
              "obj? for help, and !pip install for packages; there is no shell behind other ! lines.")

    def set_next_input(self, text, replace=False):
        pass

    def set_custom_exc(self, exc_tuple, handler):
        self.custom_exceptions = exc_tuple

    def ask_yes_no(self, prompt, default=None, interrupt=None):
        raise OSError("there is no input here: the sandbox's code cannot be asked questions (stdin is empty)")

    def has_trait(self, name):
        return hasattr(self, name)

    def getoutput_split(self, cmd):
        return self.getoutput(cmd)

    def enable_matplotlib(self, gui=None):
        return ("inline", "module://_sandbox_plots")

    def enable_gui(self, gui=None):
        pass

    def __repr__(self):
        return f"<ipykernel.zmqshell.ZMQInteractiveShell at {id(self):#x}>"


# Named as a Jupyter kernel's shell, which is what code asks when it checks for a
# notebook (`type(get_ipython()).__name__ == "ZMQInteractiveShell"`, or "zmq" in its
# type, as pandas' in_ipython_frontend() does).
SandboxShell.__name__ = SandboxShell.__qualname__ = "ZMQInteractiveShell"
SandboxShell.__module__ = "ipykernel.zmqshell"

_shell = []


def shell():
    """The one shell, made (with the built-in magics registered) on first use."""
    if not _shell:
        _shell.append(SandboxShell())
        import _sandbox_magics

        _sandbox_magics.register_all(_shell[0])
    return _shell[0]
