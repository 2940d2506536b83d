# The magics that read the session's cells (In, kept by the driver): %history and %save
# list and write them, %rerun runs them again; %recall and %macro, which need a
# front end's next cell or IPython's macro objects, say what to use instead.

__sandbox_internal__ = True

import os

import _sandbox_api as api
import _sandbox_values as _values
from _sandbox_cell_code import magic
from _sandbox_shell import UsageError, magic_words


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

    args, options = magic_words(line), {}
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
            lines.append(_values.format_value(api.outputs[n]))
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
    args = magic_words(line)
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
def rerun(line=""):
    """%rerun [-l n] [-g pattern] [range ...]: runs earlier cells again, as IPython does
    (no range: the cell before this one), after printing their code."""
    if _rerunning:
        raise UsageError("%rerun inside a %rerun: a cell that reruns cells is not run again "
                         "(it would run itself over and over)")
    args = magic_words(line)
    current = len(api.inputs) - 1
    earlier = list(range(1, current))
    if "-l" in args:
        count = args[args.index("-l") + 1] if args.index("-l") + 1 < len(args) else ""
        if not count.lstrip("-").isdigit():
            print("Number of lines must be an integer")
            return
        if int(count) <= 0:
            print("Requested 0 last lines - nothing to run" if int(count) == 0
                  else "Number of lines to rerun cannot be negative")
            return
        numbers = earlier[-int(count):]
    elif "-g" in args:
        import fnmatch

        pattern = args[args.index("-g") + 1] if args.index("-g") + 1 < len(args) else ""
        found = [n for n in earlier if fnmatch.fnmatch(api.inputs[n], f"*{pattern}*")
                 and "rerun" not in api.inputs[n]]
        numbers = found[-1:]
    elif args:
        numbers = [n for n in chosen_cells(args, current) if n < current]
    else:
        numbers = earlier[-1:]
    code = "\n".join(api.inputs[n] for n in numbers)
    if not code:
        print("No lines in history match specification")
        return
    print("=== Executing: ===")
    print(code)
    print("=== Output: ===")
    from _sandbox_shell import shell

    _rerunning.append(True)
    try:
        shell().run_cell(code)
    finally:
        _rerunning.pop()


_rerunning = []  # a mark while %rerun runs cells


@magic("line")
def recall(line=""):
    """%recall: cannot put code into a next cell here."""
    raise UsageError("%recall puts code into the notebook's next cell, which cannot happen "
                     "here; %history -n shows the cells, %rerun N runs cell N again")


@magic("line")
def macro(line=""):
    """%macro: IPython's macros are not kept here."""
    raise UsageError("macros are not kept here: define a function with the code, or run "
                     "earlier cells again with %rerun (e.g. %rerun 1-3)")
