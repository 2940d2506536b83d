# pip, as notebook code runs it: `%pip install`, `!pip install`, `pip install` alone in a
# cell, subprocess running `python -m pip install`, os.system("pip install ..."), and
# `pip.main([...])` all install through the host's installer (the `install_package` tool
# through the door: the same rules, refusals and messages as the MCP tool), into this
# sandbox, importable on the next line. The output reads like pip's. `pip list`, `freeze`
# and `show` answer from the installed distributions. A runtime with no door (python-3.12)
# refuses, naming the install_package tool.
#
# subprocess and os.system run nothing else: there are no processes here, and the error
# (or, for a shell command line, the exit status 127 and a line on stderr) says so.

__sandbox_internal__ = True

import os
import sys

import _sandbox_api as api

PIP_VERSION = "25.0"
NO_PROCESSES = "there are no processes or shell in this sandbox, so `{cmd}` cannot run; {instead}"


class PipUnavailable(Exception):
    """pip cannot install anything in this sandbox (its runtime has no door to the host)."""

    _sandbox_short_traceback = True


def no_door_message(requirements):
    names = " ".join(requirements) or "NAME"
    return (f"pip cannot install packages in this sandbox: its runtime has no door to the host; "
            f'call the install_package tool instead (package_name="{names}"): it installs into '
            "this sandbox, and the packages import at once")


# ---- which command lines are pip ---------------------------------------------------------

def pip_args(argv):
    """pip's arguments when `argv` runs pip (pip, pip3, python -m pip, uv pip), else None."""
    argv = [a for a in argv if a != ""]
    if not argv:
        return None
    first = os.path.basename(argv[0])
    if first in ("pip", "pip3") or (first.startswith("pip3.") and first[5:].isdigit()):
        return argv[1:]
    if first == "uv" and argv[1:2] == ["pip"]:
        return argv[2:]
    pythonish = argv[0] == sys.executable or first.startswith("python") or argv[0] == "-m"
    rest = argv[1:] if argv[0] != "-m" else argv
    if pythonish and rest[:2] == ["-m", "pip"]:
        return rest[2:]
    if pythonish and rest[:1] == ["-mpip"]:
        return rest[1:]
    return None


def run_command(cmd, stdout=None, stderr=None):
    """Runs a shell command line if it is pip: its exit status; None for anything else."""
    import shlex

    try:
        argv = shlex.split(cmd)
    except ValueError:
        return None
    args = pip_args(argv)
    if args is None:
        return None
    operator = shell_operator(cmd)
    if operator is not None:
        print(f"ERROR: `{cmd}` is a shell command line (`{operator}`), and there is no shell here, so "
              "none of it ran; run the pip command alone (and the rest with Python's os, pathlib, "
              "shutil)", file=stderr or sys.stderr)
        return 1
    return main(args, stdout=stdout, stderr=stderr, magic=stdout is None)


def shell_operator(cmd):
    """The first shell operator (`;`, `&&`, `||`, `|`, `&`, `$(`, a backquote) outside
    quotes in a command line, or None (`>` is left alone: `pip install x>=1` means a
    version, whatever a shell would make of it)."""
    import shlex

    if "$(" in cmd or "`" in cmd:
        return "$(" if "$(" in cmd else "`"
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return next((token for token in lexer if token and set(token) <= set("();|&")), None)
    except ValueError:
        return None


# ---- pip ----------------------------------------------------------------------------------

def main(args=None, stdout=None, stderr=None, magic=False):
    """Runs pip with `args` (as pip.main does); its exit status."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = list(sys.argv[1:] if args is None else args)
    command = next((a for a in args if not a.startswith("-")), None)
    flags = [a for a in args if a.startswith("-")]
    if command is None:
        if "--version" in flags or "-V" in flags:
            print(f"pip {PIP_VERSION} from the sandbox's installer (python {sys.version_info[0]}.{sys.version_info[1]})", file=out)
            return 0
        print("Usage: pip <command> [options]  (here: install, list, freeze, show; installs go through "
              "the sandbox's installer)", file=out)
        return 0
    rest = args[args.index(command) + 1:]
    quiet = any(f in ("-q", "--quiet", "-qq", "-qqq") for f in args)
    if command == "install":
        return install(rest, out, err, quiet, magic)
    if command == "list":
        return list_(rest, out)
    if command == "freeze":
        return freeze(out)
    if command == "show":
        return show(rest, out, err)
    if command == "check":
        print("No broken requirements found.", file=out)
        return 0
    if command == "uninstall":
        print("ERROR: pip uninstall is not available in this sandbox: installed packages stay (the "
              "install_package tool and %pip install add packages; a fresh sandbox has none)", file=err)
        return 1
    print(f"ERROR: pip {command} is not available in this sandbox (install, list, freeze and show are)", file=err)
    return 1


# Options of `pip install` that take a value, and those that change nothing here.
VALUED = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host", "-c",
          "--constraint", "--upgrade-strategy", "--progress-bar", "--root-user-action", "--python-version",
          "--platform", "--implementation", "--abi", "--target", "-t", "--prefix", "--root", "--src",
          "--cache-dir", "--timeout", "--retries", "--proxy", "--log", "--exists-action", "--only-binary",
          "--no-binary", "--config-settings", "-C", "--global-option", "--report"}


# Options of `pip install` that change nothing here, and what happens instead.
IGNORED = {
    "--target": "packages go into the sandbox's own site-packages",
    "-t": "packages go into the sandbox's own site-packages",
    "--prefix": "packages go into the sandbox's own site-packages",
    "--root": "packages go into the sandbox's own site-packages",
    "--no-deps": "dependencies are installed too",
    "-U": "an installed version that fits the requirement is kept",
    "--upgrade": "an installed version that fits the requirement is kept",
    "--force-reinstall": "an installed version that fits the requirement is kept",
    "-I": "an installed version that fits the requirement is kept",
    "--ignore-installed": "an installed version that fits the requirement is kept",
}

# Projects the sandbox provides itself: asking for them (`pip install -U pip setuptools
# wheel`, a notebook's first line) installs nothing, and the rest of the line goes on.
PROVIDED = {
    "pip": "pip here is the sandbox's installer",
    "ipython": "the sandbox provides IPython's notebook parts itself",
}
# Build tools, skipped when upgraded (a habit: nothing is built here, only wheels are
# installed) or when already there; asked for plainly, they install as any package.
BUILD_TOOLS = {"setuptools": "setuptools", "wheel": "wheel"}


def requirements_of(args, err, reading=()):
    """The requirement strings in `pip install`'s arguments (and -r files); None, with the
    reason on `err`, when something here cannot be installed this way. Locations (paths,
    URLs, -e) are passed on: the host's installer refuses them in the install_package
    tool's own words."""
    found, notes = [], []
    at = 0
    while at < len(args):
        arg = args[at]
        at += 1
        name, has_value, value = arg.partition("=")
        if arg in ("-r", "--requirement") or arg.startswith(("-r", "--requirement=")):
            path = args[at] if arg in ("-r", "--requirement") else (value if has_value else arg[2:])
            at += arg in ("-r", "--requirement")
            lines = requirement_file(path, err, reading)
            if lines is None:
                return None
            found.extend(lines)
        elif arg in ("-e", "--editable"):
            found.append(arg)
        elif name in VALUED or arg in VALUED:
            if arg in VALUED:
                at += 1
            if name in ("-i", "--index-url", "--extra-index-url", "-f", "--find-links"):
                notes.append(f"note: {name} is not used here: packages come from the server's configured index or wheelhouse")
            elif name in IGNORED:
                notes.append(f"note: {name} is not used here: {IGNORED[name]}")
        elif arg in IGNORED:
            notes.append(f"note: {arg} is not used here: {IGNORED[arg]}")
        elif arg.startswith("-"):
            continue
        else:
            found.append(arg)
    for note in dict.fromkeys(notes):
        print(note, file=err)
    return found


def provided(requirements, err, upgrade):
    """`requirements` without the projects the sandbox provides (and, with `upgrade`, the
    build tools), each skipped with a note."""
    import importlib.util
    import re

    kept = []
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([<>=!~;]|$)", requirement)
        project = re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None
        if project in PROVIDED:
            print(f"note: {requirement.strip()} skipped: {PROVIDED[project]}, so there is nothing to install "
                  "or upgrade", file=err)
        elif project in BUILD_TOOLS and (upgrade or importlib.util.find_spec(BUILD_TOOLS[project])):
            print(f"note: {requirement.strip()} skipped: nothing is built here (only wheels are installed), "
                  "so there is nothing to upgrade", file=err)
        else:
            kept.append(requirement)
    return kept


def requirement_file(path, err, reading=()):
    try:
        real = os.path.realpath(path)
        if real in reading:
            print(f"ERROR: requirements file {path} includes itself (through -r): nothing was installed", file=err)
            return None
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        print(f"ERROR: Could not open requirements file: {exc}", file=err)
        return None
    found = []
    for line in lines:
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            nested = requirements_of(line.split(), err, (*reading, real))
            if nested is None:
                return None
            found.extend(nested)
        else:
            found.append(line)
    return found


def install(args, out, err, quiet, magic):
    """`pip install`: through the host's installer; the new packages import at once."""
    import _sandbox_http

    requirements = requirements_of(args, err)
    if requirements is None:
        return 1
    if not requirements:
        print("ERROR: You must give at least one requirement to install (see \"pip help install\")", file=err)
        return 1
    requirements = provided(requirements, err, any(a in ("-U", "--upgrade") for a in args))
    if not requirements:
        return 0
    try:
        value, _ = _sandbox_http.call("install_package", {"requirements": requirements})
    except _sandbox_http.DoorFailure as failure:
        if failure.kind in ("no_door", "closed"):
            if magic:
                raise PipUnavailable(no_door_message(requirements)) from None
            print("ERROR: " + no_door_message(requirements), file=err)
            return 1
        print(f"ERROR: {failure}", file=err)
        return 1
    report = (value or {}).get("report") or {}
    installed = report.get("installed") or []
    if installed:
        note = api.refresh_packages()
        if note:
            print(note, file=err)
    if not quiet:
        site = api.site_packages
        for package in report.get("already_present") or []:
            where = "the runtime" if package.get("source") == "runtime" else site
            print(f"Requirement already satisfied: {package.get('name')} in {where} ({package.get('version')})", file=out)
        if installed:
            print("Successfully installed " + " ".join(f"{p.get('name')}-{p.get('version')}" for p in installed), file=out)
        if report.get("output"):
            print(report["output"], file=out)
    return 0


def distributions():
    import importlib.metadata

    seen = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in seen:
            seen[name.lower()] = dist
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def list_(args, out):
    rows = [(d.metadata["Name"], d.version) for d in distributions()]
    if "--format=freeze" in args:
        for name, version in rows:
            print(f"{name}=={version}", file=out)
        return 0
    width = max([len("Package")] + [len(n) for n, _ in rows])
    vwidth = max([len("Version")] + [len(v) for _, v in rows])
    print(f"{'Package':<{width}} {'Version':<{vwidth}}", file=out)
    print(f"{'-' * width} {'-' * vwidth}", file=out)
    for name, version in rows:
        print(f"{name:<{width}} {version}", file=out)
    return 0


def freeze(out):
    for dist in distributions():
        print(f"{dist.metadata['Name']}=={dist.version}", file=out)
    return 0


def show(args, out, err):
    import importlib.metadata

    names = [a for a in args if not a.startswith("-")]
    everything = distributions()
    missing = 0
    for index, name in enumerate(names):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            print(f"WARNING: Package(s) not found: {name}", file=err)
            missing += 1
            continue
        meta = dist.metadata
        requires = sorted({r.split(";")[0].split("[")[0].split(" ")[0].split("=")[0].split(">")[0].split("<")[0].split("~")[0].split("!")[0]
                           for r in (dist.requires or []) if "extra ==" not in r})
        own = meta["Name"].lower().replace("_", "-")
        required_by = sorted(d.metadata["Name"] for d in everything
                             if any(r.split(";")[0].lower().replace("_", "-").startswith(own) for r in (d.requires or []) if "extra ==" not in r))
        if index:
            print("---", file=out)
        for label, text in (("Name", meta["Name"]), ("Version", dist.version), ("Summary", meta.get("Summary", "")),
                            ("Home-page", meta.get("Home-page", "")), ("Author", meta.get("Author", "")),
                            ("Author-email", meta.get("Author-email", "")), ("License", meta.get("License", "")),
                            ("Location", os.path.dirname(str(dist.locate_file("")).rstrip("/")) or str(dist.locate_file(""))),
                            ("Requires", ", ".join(requires)), ("Required-by", ", ".join(required_by))):
            print(f"{label}: {text or ''}", file=out)
    return 1 if missing == len(names) and names else 0


# ---- magics -------------------------------------------------------------------------------

def register_magics(shell):
    """%pip (and %uv pip); %conda and its cousins say to use %pip."""
    def pip(line):
        """%pip install NAME...: installs through the sandbox's installer (as install_package);
        the line is read as `!pip` reads it (`> /dev/null 2>&1` and the like)."""
        import _sandbox_shell

        status = _sandbox_shell.run_redirected_line(f"pip {line}")
        if status is None:
            raise _sandbox_shell.UsageError(f"%pip cannot read {line!r} (an unclosed quote?)")
        shell.user_ns["_exit_code"] = status

    def uv(line):
        """%uv pip install NAME...: as %pip (the rest of the line read as %pip reads it)."""
        first, _, rest = line.strip().partition(" ")
        if first != "pip":
            print("ERROR: only `%uv pip ...` is available here", file=sys.stderr)
            return
        pip(rest)

    def conda(line):
        from _sandbox_shell import UsageError

        raise UsageError("The python kernel does not appear to be a conda environment.  "
                         "Please use ``%pip install`` instead.")

    shell.register_magic_function(pip, "line", "pip")
    shell.register_magic_function(uv, "line", "uv")
    for name in ("conda", "mamba", "micromamba"):
        shell.register_magic_function(conda, "line", name)


# ---- pip the module -----------------------------------------------------------------------

def fill(module):
    """The stand-in `pip` package (pip.main, pip._internal.main, python -m pip)."""
    name = module.__name__
    if name == "pip":
        module.__version__ = PIP_VERSION
        module.main = main
        module.__doc__ = "pip, as this sandbox runs it: installs go through its installer (install_package)."
    elif name in ("pip._internal", "pip._internal.cli", "pip._internal.cli.main"):
        module.main = main
    elif name == "pip.__main__":
        raise SystemExit(main(sys.argv[1:]))
    else:
        raise ModuleNotFoundError(f"No module named {name!r}: pip here is the sandbox's installer "
                                  "(pip.main and python -m pip work)", name=name)


# ---- subprocess and os.system -------------------------------------------------------------

def instead_of(argv):
    first = os.path.basename(argv[0]) if argv else ""
    if first.startswith("python"):
        return "run a script with %run script.py (or runpy), and install packages with %pip install"
    import _sandbox_shell

    return "use " + _sandbox_shell.INSTEAD.get(first, _sandbox_shell.GENERIC)


def patch_subprocess(subprocess):
    """subprocess runs pip (through the host's installer) and says nothing else can run."""
    import io
    import shlex

    class Popen(subprocess.Popen):
        __doc__ = subprocess.Popen.__doc__

        def __init__(self, args, bufsize=-1, executable=None, stdin=None, stdout=None, stderr=None,
                     preexec_fn=None, close_fds=True, shell=False, cwd=None, env=None,
                     universal_newlines=None, startupinfo=None, creationflags=0, restore_signals=True,
                     start_new_session=False, pass_fds=(), *, user=None, group=None, extra_groups=None,
                     encoding=None, errors=None, text=None, umask=-1, pipesize=-1, process_group=None):
            self.args, self.pid, self._child_created = args, 0, False
            self.stdin = None
            self.text_mode = bool(encoding or errors or text or universal_newlines)
            self.encoding, self.errors = encoding, errors
            self._input = None
            self._communication_started = False
            argv = shlex.split(args) if isinstance(args, str) else [os.fspath(a) for a in ([args] if isinstance(args, (bytes, os.PathLike)) else args)]
            argv = [a.decode() if isinstance(a, bytes) else a for a in argv]
            out, err = io.StringIO(), io.StringIO()
            pip = pip_args(argv)
            if pip is not None:
                status = main(pip, stdout=out, stderr=err)
            elif shell:
                err.write(NO_PROCESSES.format(cmd=" ".join(argv), instead=instead_of(argv)) + "\n")
                status = 127
            else:
                import errno

                raise FileNotFoundError(errno.ENOENT, NO_PROCESSES.format(cmd=" ".join(argv), instead=instead_of(argv)), argv[0] if argv else "")
            self.returncode = status
            merged = stderr == subprocess.STDOUT
            self._out = self._route(out.getvalue() + (err.getvalue() if merged else ""), stdout, sys.stdout)
            self._err = None if merged else self._route(err.getvalue(), stderr, sys.stderr)
            self.stdout = self._pipe(self._out) if stdout == subprocess.PIPE else None
            self.stderr = self._pipe(self._err) if stderr == subprocess.PIPE else None

        def _route(self, text, target, default):
            """What the pipe holds (for PIPE); otherwise the text is written where it goes."""
            if target == subprocess.PIPE:
                return text
            if target in (subprocess.DEVNULL,) or not text:
                return None
            if target is None:
                default.write(text)
            elif hasattr(target, "write"):
                try:
                    target.write(text)
                except TypeError:
                    target.write(text.encode())
            return None

        def _pipe(self, text):
            return io.StringIO(text or "") if self.text_mode else io.BytesIO((text or "").encode())

        def _value(self, text):
            if text is None:
                return None
            return text if self.text_mode else text.encode()

        def communicate(self, input=None, timeout=None):
            out = self.stdout.read() if self.stdout is not None else None
            err = self.stderr.read() if self.stderr is not None else None
            return out, err

        def poll(self):
            return self.returncode

        def wait(self, timeout=None):
            return self.returncode

        def send_signal(self, sig):
            pass

        def terminate(self):
            pass

        def kill(self):
            pass

        def __del__(self):
            pass

    subprocess.Popen = Popen


def system(command):
    """os.system: runs pip through the sandbox's installer; anything else cannot run here
    (exit status 127, and a line on stderr saying what to use instead)."""
    import shlex

    argv = shlex.split(command)
    pip = pip_args(argv)
    if pip is None:
        sys.stderr.write(NO_PROCESSES.format(cmd=command, instead=instead_of(argv)) + "\n")
        return 127 << 8
    return main(pip) << 8
