# The magics about commands: the shell aliases IPython defines (%ls, %cat...) and %alias,
# which say there is no shell and what to use; %alias_magic; %%script, %%bash and the
# other languages' cells; %system. (The common magics are in magics.py.)

__sandbox_internal__ = True

import sys

from _sandbox_cell_code import magic
from _sandbox_shell import UsageError, magic_words, no_shell_line


# Shells, whose cells are commands (%%script bash).
SHELLS = ("bash", "sh", "zsh", "dash", "ksh", "fish")

# The shell aliases IPython defines.
ALIASES = ("cat", "cp", "ldir", "lf", "lk", "ll", "ls", "lx", "mkdir", "mv", "rm", "rmdir")


@magic("line")
def alias(line=""):
    """%alias [name cmd]: no alias runs a command here (there is no shell); alone, the
    aliases IPython defines (each a line saying what to use instead)."""
    words = line.split(None, 1)
    if not words:
        print(f"Total number of aliases: {len(ALIASES)}")
        return [(name, name) for name in ALIASES]
    sys.stderr.write(no_shell_line(words[1] if len(words) > 1 else words[0]) + "\n")


@magic("line")
def alias_magic(line=""):
    """%alias_magic [-l|--line] [-c|--cell] [-p|--params params] name target: %name (and
    %%name) run %target with params before their own line, as in IPython."""
    from _sandbox_shell import shell

    kinds, params, names = alias_options(line)
    if len(names) != 2:
        raise UsageError("%alias_magic needs a new name and the magic it stands for "
                         "(e.g. %alias_magic t timeit)")
    name, target = names
    manager = shell().magics_manager
    made = 0
    for kind in kinds:
        fn = manager.find(kind, target)
        if fn is None:
            continue
        manager.register_function(aliased(fn, kind, params), kind, name)
        mark = "%" if kind == "line" else "%%"
        print(f"Created `{mark}{name}` as an alias for `{mark}{target}{' ' + params if params else ''}`.")
        made += 1
    if not made:
        raise UsageError(f"{target} is not a magic")


def alias_options(line):
    """(the kinds of magic asked for, the params, the other words) of %alias_magic's line."""
    words, kinds, params, names = magic_words(line), [], "", []
    while words:
        word = words.pop(0)
        if word in ("-l", "--line"):
            kinds.append("line")
        elif word in ("-c", "--cell"):
            kinds.append("cell")
        elif word in ("-p", "--params"):
            params = words.pop(0) if words else ""
        elif word.startswith("--params="):
            params = word.partition("=")[2]
        elif word.startswith("-"):
            raise UsageError(f"%alias_magic: unrecognized option {word}")
        else:
            names.append(word.lstrip("%"))
    return kinds or ["line", "cell"], params, names


def aliased(fn, kind, params):
    """`fn` with `params` put before the line it is given (the frame it asks for kept)."""
    import functools

    def join(line):
        return f"{params} {line}".strip() if params else line

    if kind == "line":
        @functools.wraps(fn)
        def stand_in(line="", **kwargs):
            return fn(join(line), **kwargs)
    else:
        @functools.wraps(fn)
        def stand_in(line, cell, **kwargs):
            return fn(join(line), cell, **kwargs)
    return stand_in


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
    """%%script python ...: as %%python; %%script false (or true), the way to keep a
    cell from running: nothing runs, and false fails as in IPython unless
    --no-raise-error; %%script with any other command: no shell."""
    import os

    import _sandbox_python_cmd

    options, command = _sandbox_python_cmd.script_options(magic_words(line), UsageError)
    name = os.path.basename(command[0]) if command else ""
    if name in ("false", "true"):
        # Nothing runs; false's status fails the cell unless told not to (or in the
        # background, where IPython does not wait for it).
        if name == "false" and options.get("--raise-error", True) and not options.get("--bg"):
            import subprocess

            raise subprocess.CalledProcessError(1, cell.encode())
        return
    if _sandbox_python_cmd.cell_program(line, cell, command="") is None:
        if command and name not in SHELLS:
            # Another language's interpreter: it is what cannot run.
            sys.stderr.write(no_shell_line(" ".join(command)) + "\n")
        else:
            # A shell: the cell's first command is what the line names.
            no_shell(line, cell)


@magic("line")
def system(line):
    """%system cmd (also %sx): what cmd prints, as a list of lines."""
    from _sandbox_shell import shell

    return shell().getoutput(line)


def shell_alias(name):
    """A shell alias IPython defines (ls, cat, mkdir...): a shell line."""
    def alias(line=""):
        from _sandbox_shell import shell

        shell().system(f"{name} {line}".strip())

    alias.__name__ = name
    alias.__doc__ = f"%{name}: a shell command (there is no shell here: a line says what to use)."
    return magic("line", name)(alias)


def register_magics(shell):
    """Registers these magics on the shell."""
    manager = shell.magics_manager
    for fn in (alias, alias_magic, system, *(shell_alias(name) for name in ALIASES)):
        kind, name = fn._sandbox_magic
        manager.register_function(fn, kind, name)
    manager.register_function(system, "line", "sx")
    manager.register_function(script, "cell", "script")
    for name in ("bash", "sh", "system", "sx", "perl", "ruby", "!"):
        manager.register_function(no_shell, "cell", name)
    for name in ("python", "python3", "pypy"):
        manager.register_function(python, "cell", name)
