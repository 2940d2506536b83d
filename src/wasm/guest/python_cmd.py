# `!python script.py args`, `!python -c "code"`, `!python -m module` and `!python --version`
# as shell lines, and `%%python` / `%%script python` cells (the cell is the program python
# reads from its standard input): there are no processes here, so the program runs in this interpreter,
# as a fresh process's __main__ would: its own namespace, sys.argv and sys.path[0] as
# python sets them, its output where the line's goes, sys.exit() as its exit status, and an
# uncaught exception printed as python prints it (the line itself does not raise). Unlike
# a process, modules it imports stay imported.

__sandbox_internal__ = True

import sys

NAMES = ("python", "python3", f"python3.{sys.version_info[1]}")
# Flags python takes that change nothing here.
IGNORED = ("-u", "-B", "-q", "-s", "-S", "-E", "-I", "-O", "-OO", "-X", "-W")


def names_python(word):
    """Whether a command's first word names python: by name, or as sys.executable
    (`!{sys.executable} script.py`)."""
    return word.rsplit("/", 1)[-1] in NAMES or (bool(sys.executable) and word == sys.executable)


def program(argv):
    """What a python command line runs: ("file", path, args), ("code", code, args),
    ("module", name, args), ("stdin", None, args) or ("version",), or None for one it
    cannot run here."""
    if not argv or not names_python(argv[0]):
        return None
    words = argv[1:]
    while words and words[0] in IGNORED:
        flag = words.pop(0)
        if flag in ("-X", "-W") and words:
            words.pop(0)
    if not words:
        return None  # an interactive interpreter: nothing to read from here
    first, rest = words[0], words[1:]
    if first == "-":
        return ("stdin", None, rest)
    if first in ("-V", "--version"):
        return ("version",)
    if first == "-c" and rest:
        return ("code", rest[0], rest[1:])
    if first == "-m" and rest:
        return ("module", rest[0], rest[1:])
    if first.startswith("-"):
        return None
    return ("file", first, rest)


def run(cmd, stdout=None, stderr=None):
    """Runs `cmd` if it is a python command line this interpreter can run: its exit
    status; None for anything else."""
    import shlex

    import _sandbox_pip

    try:
        argv = shlex.split(cmd)
    except ValueError:
        return None
    what = program(argv)
    if what is None or _sandbox_pip.shell_operator(cmd) is not None:
        return None
    return run_redirected(what, stdout, stderr)


def run_redirected(what, stdout=None, stderr=None, cell=None):
    """Runs the program `what` (see `program`; a "stdin" one reads `cell` when given)
    with its output going to `stdout` and `stderr` when given: its exit status."""
    import contextlib

    with contextlib.ExitStack() as stack:
        if stdout is not None:
            stack.enter_context(contextlib.redirect_stdout(stdout))
        if stderr is not None:
            stack.enter_context(contextlib.redirect_stderr(stderr))
        if what[0] == "version":
            print(f"Python {sys.version.split()[0]}")
            return 0
        if what[0] == "stdin" and cell is not None:
            return run_program("stdin", cell, what[2], argv0="")
        return run_program(*what)


def run_program(kind, target, args, argv0=None):
    """Runs one program (see `program`; a "stdin" program's source is `target`, or what
    sys.stdin holds when it is None) as a process's __main__ would: its exit status."""
    import os
    import runpy

    with own_process_state():
        if kind == "file":
            sys.argv = [target, *args]
            sys.path[0:0] = [os.path.dirname(os.path.abspath(target))]
        else:
            first = {"code": "-c", "module": target, "stdin": "-"}[kind]
            sys.argv = [first if argv0 is None else argv0, *args]
            sys.path[0:0] = [""]
        try:
            if kind == "file":
                runpy.run_path(target, run_name="__main__")
            elif kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                source = target if target is not None else streams_source()
                filename = "<string>" if kind == "code" else "<stdin>"
                exec(compile(source, filename, "exec"), fresh_main().__dict__)
            return 0
        except SystemExit as exc:
            return exit_status(exc.code)
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - printed, as python does
            print_traceback(exc)
            return 130 if isinstance(exc, KeyboardInterrupt) else 1


def fresh_main():
    """A __main__ module of the program's own, in sys.modules while it runs (as a new
    process's is: pickle and multiprocessing find the classes it defines there);
    own_process_state puts the notebook's back."""
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    return main


def streams_source():
    """What the program reads as its source when it comes from standard input."""
    try:
        return sys.stdin.read() if sys.stdin is not None else ""
    except (OSError, ValueError):
        return ""


# Options IPython's %%script takes (after them, the command line).
SCRIPT_OPTIONS = ("--out", "--err", "--proc", "--bg", "--raise-error", "--no-raise-error")


def cell_program(line, cell, command="python"):
    """`%%python [options]` and `%%script [options] python ...`: the cell is the program
    python reads from its standard input, run here as any program is (`run_program`).
    As IPython does: --out NAME / --err NAME keep what it printed in a variable instead,
    and an exit status other than 0 raises CalledProcessError unless --no-raise-error.
    --bg runs it now (nothing runs in the background here). Anything but a python
    command line is None (for the caller to say there is no shell)."""
    import io
    import shlex
    import subprocess

    import _sandbox_api as api
    from _sandbox_shell import UsageError

    options, words = script_options(shlex.split(line), UsageError)
    words = words or shlex.split(command)
    what = program(words) or program([*words, "-"])  # no program named: the cell is read
    if what is None:
        return None
    if options.get("--bg") or options.get("--proc"):
        print("[no background processes here: the program ran now]")
    out = io.StringIO() if options.get("--out") else None
    err = io.StringIO() if options.get("--err") else None
    status = run_redirected(what, out, err, cell)
    for name, stream in (("--out", out), ("--err", err)):
        if stream is not None:
            api.namespace[options[name]] = stream.getvalue()
    if status and options.get("--raise-error", True):
        raise subprocess.CalledProcessError(status, cell.encode())
    return status


def script_options(words, usage_error):
    """%%script's options, wherever they stand among `words` (as IPython reads them), as
    a dict, and the words left: the command line."""
    options, command = {}, []
    words = list(words)
    while words:
        word = words.pop(0)
        name, _, value = word.partition("=")
        if name not in SCRIPT_OPTIONS:
            command.append(word)
        elif name in ("--out", "--err", "--proc"):
            if not value:
                if not words:
                    raise usage_error(f"argument {name}: expected one argument")
                value = words.pop(0)
            if name != "--proc" and not value.isidentifier():
                raise usage_error(f"argument {name}: {value!r} is not a variable name")
            options[name] = value
        elif name == "--no-raise-error":
            options["--raise-error"] = False
        else:
            options[name] = True
    return options, command


class KeptOpen:
    """A standard stream as a program sees it: closing it ends the program's use of it
    (as a process's end would), not the notebook's."""

    def __init__(self, stream):
        self._stream, self.closed = stream, False

    def write(self, text):
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return self._stream.write(text)

    def close(self):
        self.closed = True

    def __getattr__(self, name):
        return getattr(self._stream, name)


class ProgramExit(SystemExit):
    """os._exit() in a program: its process would end there; here the program does."""


programs_running = [0]  # how many programs (!python, %%python) run now, one inside another


def own_process_state():
    """What a process has of its own, put back when the program ends however it ends:
    sys.argv, sys.path (the list and what is in it), the standard streams and the
    working directory; os._exit() ends the program, not the interpreter."""
    import contextlib
    import os

    @contextlib.contextmanager
    def kept():
        argv, path = sys.argv, sys.path
        main = sys.modules.get("__main__")
        entries = list(path) if isinstance(path, list) else path
        streams = sys.stdout, sys.stderr, sys.stdin
        cwd = os.getcwd()
        real_exit = os._exit

        def program_exit(code):
            raise ProgramExit(code)

        os._exit = program_exit
        sys.path = list(entries) if isinstance(entries, list) else [""]
        sys.stdout, sys.stderr = KeptOpen(sys.stdout), KeptOpen(sys.stderr)
        programs_running[0] += 1
        try:
            yield
        finally:
            programs_running[0] -= 1
            os._exit = real_exit
            sys.argv = argv
            if main is not None:
                sys.modules["__main__"] = main
            if isinstance(path, list):
                path[:] = entries
            sys.path = path
            sys.stdout, sys.stderr, sys.stdin = streams
            try:
                os.chdir(cwd)
            except OSError:
                pass

    return kept()


def exit_status(code):
    """sys.exit(code) as a process's exit status (a message is printed, as python does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF  # as a shell reports it: sys.exit(-1) is 255
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001 - a message that cannot be printed still exits 1
        pass
    return 1


def print_traceback(exc):
    """The traceback python prints, without this module's frames or runpy's."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_globals.get("__sandbox_internal__")
                              or tb.tb_frame.f_globals.get("__name__") == "runpy"):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
