# Values as a notebook shows them in text (IPython's pretty printer, text/plain): a list,
# tuple, dict or set too long for a line of 79 characters is broken over lines, one item
# per line, indented under its opening bracket (the outermost first, inner ones only when
# they still do not fit); at most 1000 items of one are shown, then `...`; a set's items
# are sorted when they can be; a function shows as `<function module.name(signature)>`, a
# class as `module.Name`, an object without a repr of its own as `<module.Name at 0x...>`;
# a repr over several lines keeps its lines under where it starts. `_repr_pretty_` methods
# and printers registered with the display formatter write to the same printer.

__sandbox_internal__ = True

import sys
import types
from collections import deque

MAX_WIDTH = 79
MAX_ITEMS = 1000
# Deeper nesting than this is shown by repr() (IPython would recurse until it failed).
MAX_DEPTH = 100


def pretty(obj, leaf=None):
    """`obj` as IPython's pretty printer shows it. `leaf(value)` may give the text of
    any value inside (a type printer, %precision for floats), or None."""
    printer = Printer(leaf)
    printer.pretty(obj)
    return printer.getvalue()


class Group:
    """A bracketed group: its breakables still undecided, and whether they break."""

    __slots__ = ("depth", "breakables", "want_break")

    def __init__(self, depth):
        self.depth, self.breakables, self.want_break = depth, deque(), False


class Text:
    __slots__ = ("parts", "width")

    def __init__(self):
        self.parts, self.width = [], 0

    def emit(self, printer):
        printer.out.extend(self.parts)
        printer.column += self.width


class Breakable:
    __slots__ = ("sep", "width", "group", "indentation")

    def __init__(self, sep, group, indentation):
        self.sep, self.width, self.group, self.indentation = sep, len(sep), group, indentation

    def emit(self, printer):
        self.group.breakables.popleft()  # they are emitted in the order written
        if self.group.want_break:
            printer.out.append("\n" + " " * self.indentation)
            printer.column = self.indentation
        else:
            printer.out.append(self.sep)
            printer.column += self.width


class Printer:
    """The `p` that printers write to: text, breakables and groups, laid out as IPython
    lays them out. What is written waits in a buffer until it is known whether the
    groups it belongs to fit on the line; when the line overflows, the outermost group
    with breakables waiting breaks them all, and every later one of its breakables."""

    def __init__(self, leaf=None, max_width=MAX_WIDTH):
        self.leaf, self.max_width = leaf, max_width
        self.out, self.column = [], 0
        self.buffer, self.buffer_width = deque(), 0
        self.indentation = 0
        root = Group(0)
        self.stack = [root]
        self.open_groups = [root]  # groups that may still break, in the order opened
        self.showing = set()  # ids of the containers being shown (a cycle shows `...`)

    # ---- the interface printers use ----------------------------------------------------

    def text(self, obj):
        text = str(obj)
        if not self.buffer:
            self.out.append(text)
            self.column += len(text)
            return
        last = self.buffer[-1]
        if not isinstance(last, Text):
            last = Text()
            self.buffer.append(last)
        last.parts.append(text)
        last.width += len(text)
        self.buffer_width += len(text)
        self.break_outer_groups()

    def breakable(self, sep=" "):
        group = self.stack[-1]
        if group.want_break:
            self.flush()
            self.out.append("\n" + " " * self.indentation)
            self.column = self.indentation
            self.buffer_width = 0
            return
        breakable = Breakable(sep, group, self.indentation)
        group.breakables.append(breakable)
        self.buffer.append(breakable)
        self.buffer_width += breakable.width
        self.break_outer_groups()

    def break_(self):
        """A line break, whatever fits."""
        group = self.outermost_breakable()
        if group is not None:
            self.break_group(group)
        self.flush()
        self.out.append("\n" + " " * self.indentation)
        self.column = self.indentation
        self.buffer_width = 0

    def begin_group(self, indent=0, open=""):
        if open:
            self.text(open)
        group = Group(self.stack[-1].depth + 1)
        self.stack.append(group)
        self.open_groups.append(group)
        self.indentation += indent

    def end_group(self, dedent=0, close=""):
        self.indentation -= dedent
        group = self.stack.pop()
        if not group.breakables and group in self.open_groups:
            self.open_groups.remove(group)
        if close:
            self.text(close)

    def group(self, indent=0, open="", close=""):
        import contextlib

        @contextlib.contextmanager
        def grouped():
            self.begin_group(indent, open)
            try:
                yield
            finally:
                self.end_group(indent, close)

        return grouped()

    def flush(self):
        for item in self.buffer:
            item.emit(self)
        self.buffer.clear()
        self.buffer_width = 0

    def getvalue(self):
        self.flush()
        return "".join(self.out)

    # ---- laying out ----------------------------------------------------------------------

    def break_outer_groups(self):
        while self.column + self.buffer_width > self.max_width:
            group = self.outermost_breakable()
            if group is None:
                return
            self.break_group(group)

    def break_group(self, group):
        """Writes out what is buffered up to the last of `group`'s breakables (which
        break), and the text after it."""
        while group.breakables:
            self.emit_first()
        while self.buffer and isinstance(self.buffer[0], Text):
            self.emit_first()

    def emit_first(self):
        item = self.buffer.popleft()
        item.emit(self)
        self.buffer_width -= item.width

    def outermost_breakable(self):
        """The shallowest group with breakables waiting, now set to break (shallower
        groups without any are set to break too, and forgotten)."""
        while self.open_groups:
            depth = min(group.depth for group in self.open_groups)
            at_depth = [group for group in self.open_groups if group.depth == depth]
            for group in at_depth:
                if group.breakables:
                    self.open_groups.remove(group)
                    group.want_break = True
                    return group
            for group in at_depth:
                group.want_break = True
                self.open_groups.remove(group)
        return None

    # ---- values --------------------------------------------------------------------------

    def pretty(self, obj):
        if self.leaf is not None:
            shown = self.leaf(obj)
            if shown is not None:
                self.text_lines(shown)
                return
        kind = type(obj)
        if kind in PLAIN:
            self.text(repr(obj))
            return
        if kind in CONTAINERS:
            if id(obj) in self.showing:
                self.text(CYCLES[kind])
                return
            if len(self.stack) > MAX_DEPTH:
                self.text_lines(repr(obj))
                return
            self.showing.add(id(obj))
            try:
                CONTAINERS[kind](self, obj)
            finally:
                self.showing.discard(id(obj))
            return
        method = own_pretty(obj)
        if method is not None:
            method(self, False)
        elif isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
            self.text(function_text(obj))
        elif isinstance(obj, type) and type(obj).__repr__ is type.__repr__:
            self.text(class_name(obj))
        elif type(obj).__repr__ is object.__repr__:
            self.text(f"<{class_name(type(obj))} at 0x{id(obj):x}>")
        else:
            self.text_lines(repr(obj))

    def text_lines(self, text):
        """Text over several lines keeps them under where it starts."""
        lines = text.split("\n")
        if len(lines) == 1:
            self.text(text)
            return
        with self.group():
            for index, line in enumerate(lines):
                if index:
                    self.break_()
                self.text(line)

    def items(self, values, show):
        for index, value in enumerate(values):
            if index:
                self.text(",")
                self.breakable()
            if index >= MAX_ITEMS:
                self.text("...")
                break
            show(value)


def own_pretty(obj):
    """`obj`'s _repr_pretty_ when IPython would call it: the first class of its MRO that
    defines _repr_pretty_ or __repr__ defines _repr_pretty_."""
    if isinstance(obj, type):
        return None
    for cls in type(obj).__mro__:
        if "_repr_pretty_" in cls.__dict__:
            return getattr(obj, "_repr_pretty_", None)
        if cls is not object and "__repr__" in cls.__dict__:
            return None
    return None


def class_name(cls):
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or cls.__name__
    if not module or module in ("builtins", "exceptions"):
        return name
    return f"{module}.{name}"


def function_text(function):
    import inspect

    name = getattr(function, "__qualname__", None) or function.__name__
    module = getattr(function, "__module__", None)
    if module and module not in ("builtins", "exceptions"):
        name = f"{module}.{name}"
    try:
        name += str(inspect.signature(function))
    except (ValueError, TypeError):
        pass
    return f"<function {name}>"


def show_sequence(open, close):
    def show(p, obj):
        p.begin_group(1, open)
        p.items(obj, p.pretty)
        if len(obj) == 1 and isinstance(obj, tuple):
            p.text(",")
        p.end_group(1, close)

    return show


def show_set(p, obj):
    if not obj:
        p.text(f"{type(obj).__name__}()")
        return
    open, close = ("frozenset({", "})") if isinstance(obj, frozenset) else ("{", "}")
    p.begin_group(len(open), open)
    values = obj
    if len(obj) < MAX_ITEMS:
        try:
            values = sorted(obj)
        except Exception:  # noqa: BLE001 - unorderable items keep the set's order
            pass
    p.items(values, p.pretty)
    p.end_group(len(open), close)


def show_dict(p, obj):
    def pair(key):
        p.pretty(key)
        p.text(": ")
        p.pretty(obj[key])

    p.begin_group(1, "{")
    p.items(list(obj), pair)
    p.end_group(1, "}")


CONTAINERS = {list: show_sequence("[", "]"), tuple: show_sequence("(", ")"), dict: show_dict,
              set: show_set, frozenset: show_set}
# Values shown by their repr, on one line.
PLAIN = frozenset((int, float, str, bool, type(None), bytes, complex))
CYCLES = {list: "[...]", tuple: "(...)", dict: "{...}", set: "{...}", frozenset: "frozenset({...})"}


if __name__ == "__main__":  # pragma: no cover - tried by hand against IPython
    print(pretty(eval(sys.argv[1])))
