# IPython's input syntax, read the way IPython's input transformers read it, into plain
# Python that calls the sandbox's shell (see shell.py):
#
#   %name args           -> get_ipython().run_line_magic('name', 'args')  (a closing `;` kept after it)
#   %%name args (line 1) -> get_ipython().run_cell_magic('name', 'args', body)
#   !cmd / !!cmd         -> get_ipython().system('cmd') / get_ipython().getoutput('cmd')
#   x = %name args       -> x = get_ipython().run_line_magic('name', 'args')
#   x = !cmd             -> x = get_ipython().getoutput('cmd')
#   obj? / ?obj / obj??  -> get_ipython().run_line_magic('pinfo', 'obj') (pinfo2 for ??)
#   /f a b, ,f a b, ;f a b -> f(a, b), f("a", "b"), f("a b")
#
# plus what IPython cleans up first (console prompts `>>> `, `In [1]: `, and a cell
# indented as a whole) and, for a cell of one line, automagic (`pip install six`, `ls`).
# Special syntax is found in the tokens (never inside a string or a comment), one piece
# at a time, re-reading the tokens after each change. Unlike IPython, a transformation
# never changes the number of lines (a piece continued with backslashes, or a cell magic's
# body, leaves blank lines behind), so tracebacks name the lines the user wrote.

__sandbox_internal__ = True

import keyword
import re
import tokenize

SINGLE_ESCAPES = frozenset("!?%,;/")
_PROMPT_CLASSIC = re.compile(r"^(>>>|\.\.\.)( |$)")
_PROMPT_CLASSIC_FIRST = re.compile(r"^>>>( |$)")
_PROMPT_IPYTHON = re.compile(r"^(In \[\d+\]: |\s*\.{3,}: ?)")
_HELP_TARGET = re.compile(r"(%{0,2}(?!\d)[\w*]+(\.(?!\d)[\w*]+|\[-?[0-9]+\])*)(\?\??)$")
_AUTOMAGIC_LINE = re.compile(r"^(\s*)([A-Za-z_][\w.]*)(\s.*|)$")


def transform_cell(cell, automagic=frozenset(), shadowed=lambda name: False):
    """The cell as plain Python, with as many lines as it had.

    `automagic`: the magic and alias names a one-line cell may use without `%`;
    `shadowed(name)`: whether the user's namespace has `name` (then it stays Python)."""
    lines = cell.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    lines = strip_prompts(lines)
    lines = dedent(lines)
    magic = cell_magic(lines)
    if magic is not None:
        return "".join(magic)
    for _ in range(1000):
        changed = transform_once(lines)
        if changed is None:
            break
        lines = changed
    else:
        raise SyntaxError("the cell's special syntax did not settle after 1000 changes")
    lines = automagic_line(lines, automagic, shadowed)
    return "".join(lines)


def strip_prompts(lines):
    """Lines pasted from a console lose their prompts (`>>> `, `... `, `In [3]: `)."""
    if not lines:
        return lines
    if _PROMPT_CLASSIC_FIRST.match(lines[0]) or (len(lines) > 1 and _PROMPT_CLASSIC_FIRST.match(lines[1])):
        return [_PROMPT_CLASSIC.sub("", line, count=1) for line in lines]
    if _PROMPT_IPYTHON.match(lines[0]) or (len(lines) > 1 and _PROMPT_IPYTHON.match(lines[1])):
        return [_PROMPT_IPYTHON.sub("", line, count=1) for line in lines]
    return lines


def dedent(lines):
    """A cell indented as a whole is moved left, as IPython does."""
    indents = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
    cut = min(indents, default=0)
    if not cut:
        return lines
    return [line[cut:] if line.strip() else line.lstrip(" \t") for line in lines]


def cell_magic(lines):
    """`%%name args` as the first line that is not blank: the whole cell is one call,
    its body handed over as written (the lines after it stay, blank)."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or not lines[first].startswith("%%"):
        return None
    head = lines[first][2:].rstrip()
    if re.match(r"\w+\?", head):
        return None  # %%name? asks for help: a help line
    name, _, args = head.partition(" ")
    body = "".join(lines[first + 1:])
    call = f"get_ipython().run_cell_magic({name!r}, {args!r}, {body!r})\n"
    return lines[:first] + [call] + ["\n"] * (len(lines) - first - 1)


def tokens_by_line(lines):
    """The cell's tokens grouped by logical line (a bracketed expression over several
    lines is one); reading stops quietly where the tokens stop making sense (special
    syntax further down, an unfinished string)."""
    groups = [[]]
    depth = 0
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            groups[-1].append(token)
            if token.type == tokenize.NEWLINE or (token.type == tokenize.NL and depth <= 0):
                groups.append([])
            elif token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}" and depth > 0:
                depth -= 1
    except (tokenize.TokenError, SyntaxError, StopIteration):
        pass
    return [group for group in groups if group]


def first_code_token(line):
    """Index of a logical line's first token that is not INDENT or DEDENT."""
    at = 0
    while at < len(line) and line[at].type in (tokenize.INDENT, tokenize.DEDENT):
        at += 1
    return at


def assignment_at(line):
    """Index of the first `=` outside brackets in a logical line."""
    depth = 0
    for at, token in enumerate(line):
        if token.string == "=" and depth == 0:
            return at
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}" and depth > 0:
            depth -= 1
    return None


def find_candidates(groups):
    """Every piece of special syntax the tokens show: (line, column, priority, kind, extra)."""
    found = []
    for line in groups:
        at = first_code_token(line)
        if at >= len(line):
            continue
        first = line[at]
        assign = assignment_at(line)
        if assign is not None and assign + 1 < len(line) and not first.line.lstrip().startswith("="):
            after = line[assign + 1]
            if after.string == "%" and assign + 2 < len(line) and line[assign + 2].type == tokenize.NAME:
                found.append((after.start[0] - 1, after.start[1], 10, "magic_assign", None))
            elif after.string == "!":
                found.append((after.start[0] - 1, after.start[1], 10, "system_assign", None))
        if first.string in SINGLE_ESCAPES:
            found.append((first.start[0] - 1, first.start[1], 10, "escaped", None))
        if len(line) > 2 and line[-2].string == "?":
            found.append((first.start[0] - 1, first.start[1], 5, "help_end", line[-2].start))
    return found


def continued_end(lines, start):
    """The last physical line of a line continued with backslashes."""
    end = start
    while end < len(lines) - 1 and lines[end].endswith("\\\n"):
        end += 1
    return end


def joined(lines, start, col, end):
    """The pieces of a continued line as one line, from column `col` of line `start`."""
    parts = [lines[start][col:]] + lines[start + 1:end + 1]
    return " ".join([p.rstrip()[:-1] for p in parts[:-1]] + [parts[-1].rstrip()])


def replace(lines, start, end, new_line):
    """`lines` with lines start..end (inclusive) replaced by one line and blank lines."""
    return lines[:start] + [new_line] + ["\n"] * (end - start) + lines[end + 1:]


def help_call(target, escape):
    method = "pinfo2" if escape == "??" else "psearch" if "*" in target else "pinfo"
    return f"get_ipython().run_line_magic({method!r}, {target.lstrip('%')!r})" if target else "get_ipython().show_usage()"


def escaped_call(text):
    """The call for a line starting with an escape character."""
    if text[:2] in ("!!", "??"):
        escape, content = text[:2], text[2:]
    else:
        escape, content = text[:1], text[1:]
    if escape == "!":
        return f"get_ipython().system({content!r})"
    if escape == "!!":
        return f"get_ipython().getoutput({content!r})"
    if escape in ("?", "??"):
        return help_call(content.strip(), escape)
    name, _, args = content.partition(" ")
    if escape == "%":
        # A closing `;` hides the magic's value (`%time f();`), as after any last expression.
        quiet = ";" if args.rstrip().endswith(";") else ""
        return f"get_ipython().run_line_magic({name!r}, {args!r}){quiet}"
    if escape == ",":
        return "{}({})".format(name, ", ".join(repr(a) for a in args.split()))
    if escape == ";":
        return f"{name}({args!r})"
    if not name:
        raise SyntaxError('"/" must be followed by a callable name')
    return "{}({})".format(name, ", ".join(args.split()))


def apply(lines, candidate):
    """Rewrites one piece of special syntax; SyntaxError when it does not fit."""
    start, col, _, kind, extra = candidate
    if kind == "help_end":
        q_line = extra[0] - 1
        piece = "".join(lines[start:q_line + 1])
        indent, content = piece[:col], piece[col:]
        match = _HELP_TARGET.search(content.rstrip())
        if not match:
            raise SyntaxError(content)
        return replace(lines, start, q_line, indent + help_call(match.group(1), match.group(3)) + "\n")
    end = continued_end(lines, start)
    text = joined(lines, start, col, end)
    head = lines[start][:col]
    if kind == "magic_assign":
        name, _, args = text[1:].partition(" ")
        call = f"get_ipython().run_line_magic({name!r}, {args!r})"
    elif kind == "system_assign":
        call = f"get_ipython().getoutput({text[1:]!r})"
    else:
        call = escaped_call(text)
    return replace(lines, start, end, head + call + "\n")


def transform_once(lines):
    """The first piece of special syntax rewritten, or None when there is none."""
    candidates = sorted(find_candidates(tokens_by_line(lines)), key=lambda c: c[:3])
    for candidate in candidates:
        try:
            return apply(lines, candidate)
        except SyntaxError:
            continue
    return None


def automagic_line(lines, automagic, shadowed):
    """A cell of one line that starts with a magic's (or alias's) name, not one the
    user's namespace defines, used as a command: `pip install six`, `ls`, `pwd`."""
    code = [i for i, line in enumerate(lines) if line.strip()]
    if len(code) != 1:
        return lines
    at = code[0]
    match = _AUTOMAGIC_LINE.match(lines[at].rstrip("\r\n"))
    if not match:
        return lines
    indent, name, rest = match.groups()
    head = name.split(".", 1)[0]
    if name not in automagic or keyword.iskeyword(head) or shadowed(head):
        return lines
    stripped = rest.strip()
    if stripped[:1] and stripped[0] in "=,!()<>+*/%^&|:[.@":
        return lines  # an assignment or an operator: Python, as IPython reads it
    call = f"get_ipython().run_line_magic({name!r}, {stripped!r})"
    return lines[:at] + [indent + call + "\n"] + lines[at + 1:]

