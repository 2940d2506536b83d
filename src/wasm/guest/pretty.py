# Values as a notebook shows them in text (IPython's pretty printer, text/plain): a list,
# tuple, dict or set too long for a line of 79 characters is broken over lines, one item
# per line, indented under its opening bracket (the outermost first, inner ones only when
# they still do not fit); at most 1000 items of one are shown, then `...`; a set's items
# are sorted when they can be; a function shows as `<function module.name(signature)>`, a
# class as `module.Name`, an object without a repr of its own as `<module.Name at 0x...>`,
# Counter, OrderedDict, defaultdict, deque, UserList, SimpleNamespace, exceptions, regular
# expressions, os.environ, mappingproxies and super() as IPython shows them; a repr over
# several lines keeps its lines under where it starts. `_repr_pretty_` methods, printers
# registered with the display formatter and with IPython.lib.pretty.for_type write to the
# same printer. A value too large to lay out within MAX_OBJECTS objects or MAX_CHARS
# characters is shown by its repr() (its text is cut to the result's limit anyway).

__sandbox_internal__ = True

import io
import os
import re
import sys
import types
from collections import deque

MAX_WIDTH = 79
MAX_ITEMS = 1000
# Deeper nesting than this is shown by repr() (IPython would recurse until it failed).
MAX_DEPTH = 100
MAX_OBJECTS = 50_000
MAX_CHARS = 4 << 20


class TooLarge(Exception):
    """The value is too large to lay out: its repr() stands instead."""


def pretty(obj, leaf=None):
    """`obj` as IPython's pretty printer shows it. `leaf(value)` may give the text of
    any value inside (a type printer, %precision for floats), or None."""
    printer = Printer(leaf=leaf, budget=True)
    try:
        printer.pretty(obj)
    except TooLarge:
        return repr(obj)
    return printer.getvalue()


class Group:
    """A bracketed group: its breakables still undecided, and whether they break."""

    __slots__ = ("depth", "breakables", "want_break", "closed")

    def __init__(self, depth):
        self.depth, self.breakables, self.want_break, self.closed = depth, deque(), False, False


class Text:
    __slots__ = ("parts", "width")

    def __init__(self):
        self.parts, self.width = [], 0

    def emit(self, printer):
        printer.write("".join(self.parts))
        printer.column += self.width


class Breakable:
    __slots__ = ("sep", "width", "group", "indentation")

    def __init__(self, sep, group, indentation):
        self.sep, self.width, self.group, self.indentation = sep, len(sep), group, indentation

    def emit(self, printer):
        group = self.group
        group.breakables.popleft()  # they are emitted in the order written
        if group.want_break:
            printer.write(printer.newline + " " * self.indentation)
            printer.column = self.indentation
        else:
            printer.write(self.sep)
            printer.column += self.width
        if group.closed and not group.breakables:
            printer.forget(group)


class Printer:
    """The `p` that printers write to (IPython's RepresentationPrinter): text, breakables
    and groups, laid out as IPython lays them out. What is written waits in a buffer
    until it is known whether the groups it belongs to fit on the line; when the line
    overflows, the outermost group with breakables waiting breaks them all, and every
    later one of its breakables."""

    def __init__(self, output=None, verbose=False, max_width=MAX_WIDTH, newline="\n",
                 max_seq_length=MAX_ITEMS, *, leaf=None, budget=False):
        self.output, self.verbose, self.max_width = output, verbose, max_width
        self.newline, self.max_seq_length, self.leaf = newline, max_seq_length, leaf
        self.out = io.StringIO()
        self.column = 0
        self.buffer, self.buffer_width = deque(), 0
        self.indentation = 0
        root = Group(0)
        self.stack = [root]
        self.queue = {0: {root: None}}  # groups that may still break, by depth, in order
        self.showing = set()  # ids of the objects being shown (a cycle shows `...`)
        self.objects = 0
        self.budget = budget

    @property
    def output_width(self):
        return self.column

    # ---- the interface printers use ----------------------------------------------------

    def text(self, obj):
        text = str(obj)
        if not self.buffer:
            self.write(text)
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
            self.write(self.newline + " " * self.indentation)
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
        self.write(self.newline + " " * self.indentation)
        self.column = self.indentation
        self.buffer_width = 0

    def begin_group(self, indent=0, open=""):
        if open:
            self.text(open)
        group = Group(self.stack[-1].depth + 1)
        self.stack.append(group)
        self.queue.setdefault(group.depth, {})[group] = None
        self.indentation += indent

    def end_group(self, dedent=0, close=""):
        self.indentation -= dedent
        group = self.stack.pop()
        group.closed = True
        if not group.breakables:
            self.forget(group)
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

    def indent(self, indent):
        import contextlib

        @contextlib.contextmanager
        def indented():
            self.indentation += indent
            try:
                yield
            finally:
                self.indentation -= indent

        return indented()

    def _enumerate(self, seq):
        """enumerate(), up to max_seq_length items, then `...`."""
        for index, value in enumerate(seq):
            if self.max_seq_length and index >= self.max_seq_length:
                self.text(",")
                self.breakable()
                self.text("...")
                return
            yield index, value

    def flush(self):
        while self.buffer:
            self.buffer.popleft().emit(self)
        self.buffer_width = 0
        if self.output is not None:
            self.output.write(self.out.getvalue())
            self.out = io.StringIO()

    def getvalue(self):
        self.flush()
        return self.out.getvalue()

    def write(self, text):
        self.out.write(text)
        if self.budget and self.out.tell() > MAX_CHARS:
            raise TooLarge

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
        self.buffer_width -= item.width
        item.emit(self)

    def outermost_breakable(self):
        """The shallowest group with breakables waiting (the latest of its depth), now
        set to break; groups shallower than it have none and are set to break too."""
        for depth in sorted(self.queue):
            groups = self.queue[depth]
            for group in reversed(groups):
                if group.breakables:
                    del groups[group]
                    group.want_break = True
                    return group
            for group in groups:
                group.want_break = True
            del self.queue[depth]
        return None

    def forget(self, group):
        """`group` can break no more: it is closed, with no breakables waiting."""
        groups = self.queue.get(group.depth)
        if groups is not None:
            groups.pop(group, None)
            if not groups:
                del self.queue[group.depth]

    # ---- values --------------------------------------------------------------------------

    def pretty(self, obj):
        if self.budget:
            self.objects += 1
            if self.objects > MAX_OBJECTS:
                raise TooLarge
        if obj is None or obj is True or obj is False or obj is ... or obj is NotImplemented:
            self.text(repr(obj))  # as IPython: before any printer
            return
        if self.leaf is not None:
            shown = self.leaf(obj)
            if shown is not None:
                self.text_lines(shown)
                return
        if type(obj) in PLAIN:
            self.text(repr(obj))
            return
        if len(self.stack) > MAX_DEPTH:
            self.text_lines(repr(obj))
            return
        cycle = id(obj) in self.showing
        self.showing.add(id(obj))
        try:
            self.dispatch(obj, cycle)
        finally:
            if not cycle:
                self.showing.discard(id(obj))

    def dispatch(self, obj, cycle):
        """Shows `obj` by the first class of its MRO with a printer here, a
        _repr_pretty_ or a __repr__ of its own, as IPython looks them up."""
        for cls in getattr(type(obj), "__mro__", (type(obj), object)):
            printer = PRINTERS.get(cls)
            if printer is None and cls.__module__ in DEFERRED_MODULES:
                printer = DEFERRED.get((cls.__module__, cls.__name__))
            if printer is not None:
                printer(self, obj, cycle)
                return
            if "_repr_pretty_" in cls.__dict__:
                obj._repr_pretty_(self, cycle)
                return
            if cls is not object and "__repr__" in cls.__dict__:
                self.text_lines(repr(obj))
                return
        self.text(f"<{class_name(type(obj))} at 0x{id(obj):x}>")

    def text_lines(self, text):
        """Text over several lines keeps them under where it starts."""
        lines = text.splitlines()
        if len(lines) <= 1:
            self.text(lines[0] if lines else "")
            return
        with self.group():
            for index, line in enumerate(lines):
                if index:
                    self.break_()
                self.text(line)

    def items(self, values, show):
        for index, value in self._enumerate(values):
            if index:
                self.text(",")
                self.breakable()
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


# ---- the printers, by class ----------------------------------------------------------------

def show_function(p, function, cycle):
    import inspect

    name = getattr(function, "__qualname__", None) or function.__name__
    module = getattr(function, "__module__", None)
    if module and module not in ("builtins", "exceptions"):
        name = f"{module}.{name}"
    try:
        name += str(inspect.signature(function))
    except (ValueError, TypeError):
        pass
    p.text(f"<function {name}>")


def show_class(p, cls, cycle):
    if type(cls).__repr__ is not type.__repr__:
        p.text_lines(repr(cls))
    else:
        p.text(class_name(cls))


def show_sequence(open, close):
    def show(p, obj, cycle):
        if cycle:
            p.text(f"{open}...{close}")
            return
        p.begin_group(1, open)
        p.items(obj, p.pretty)
        if len(obj) == 1 and isinstance(obj, tuple):
            p.text(",")
        p.end_group(1, close)

    return show


def sorted_for_display(values):
    values = list(values)
    for key in (None, str):
        try:
            return sorted(values, key=key)
        except Exception:  # noqa: BLE001 - unorderable items: by their text, else as they are
            pass
    return values


def show_set(p, obj, cycle):
    if not obj:
        p.text(f"{type(obj).__name__}()")
        return
    open, close = ("frozenset({", "})") if isinstance(obj, frozenset) else ("{", "}")
    if cycle:
        p.text(f"{open}...{close}")
        return
    p.begin_group(len(open), open)
    values = obj if p.max_seq_length and len(obj) >= p.max_seq_length else sorted_for_display(obj)
    p.items(values, p.pretty)
    p.end_group(len(open), close)


def show_mapping(open, close):
    """A dict-like value as `open` key: value, ... `close` (a dict, os.environ,
    a mappingproxy)."""

    def show(p, obj, cycle):
        if cycle:
            p.text("{...}")
            return

        def pair(key):
            p.pretty(key)
            p.text(": ")
            p.pretty(obj[key])

        p.begin_group(len(open), open)
        p.items(list(obj.keys()), pair)
        p.end_group(len(open), close)

    return show


def show_call(p, name, cycle, body):
    """`name(...)` around what `body` shows."""
    with p.group(len(name) + 1, name + "(", ")"):
        if cycle:
            p.text("...")
        else:
            body()


def show_exception(p, obj, cycle):
    name = class_name(type(obj))

    def arguments():
        for index, argument in enumerate(getattr(obj, "args", ())):
            if index:
                p.text(",")
                p.breakable()
            p.pretty(argument)

    show_call(p, name, cycle, arguments)


def show_namespace(p, obj, cycle):
    def attributes():
        for index, (key, value) in enumerate(obj.__dict__.items()):
            if index:
                p.text(",")
                p.breakable()
            with p.group(len(key) + 1, key + "="):
                p.pretty(value)

    show_call(p, "namespace", cycle, attributes)


def show_rebuilt(argument):
    """A printer showing a collection as the call that makes it again, `Name(argument)`
    (`Name()` when empty)."""

    def show(p, obj, cycle):
        name = type(obj).__name__
        if not obj and not cycle:
            p.text(name + "()")
            return
        show_call(p, name, cycle, lambda: p.pretty(argument(obj)))

    return show


show_counter = show_rebuilt(lambda counter: dict(counter.most_common()))
show_ordered_dict = show_rebuilt(lambda ordered: list(ordered.items()))


def show_default_dict(p, obj, cycle):
    def body():
        p.pretty(obj.default_factory)
        p.text(",")
        p.breakable()
        p.pretty(dict(obj))

    show_call(p, type(obj).__name__, cycle, body)


def show_deque(p, obj, cycle):
    def body():
        p.pretty(list(obj))
        if obj.maxlen is not None:
            p.text(",")
            p.breakable()
            p.text(f"maxlen={obj.maxlen}")

    show_call(p, type(obj).__name__, cycle, body)


def show_pattern(p, obj, cycle):
    """A compiled regular expression as IPython shows it: re.compile(r'...', re.FLAG|...)."""
    pattern = raw_string(obj.pattern)
    flags = "|".join(f"re.{name}" for name in REGEX_FLAGS if obj.flags & getattr(re, name))

    def arguments():
        p.text(pattern)
        if flags:
            p.text(",")
            p.breakable()
            p.text(flags)

    show_call(p, "re.compile", False, arguments)


def raw_string(value):
    """`value` written as a raw string literal, as IPython's RawStringLiteral writes it."""
    return "r" + repr(value).replace("\\\\", "\\")


REGEX_FLAGS = ("IGNORECASE", "LOCALE", "MULTILINE", "DOTALL", "UNICODE", "VERBOSE", "DEBUG")


def show_super(p, obj, cycle):
    p.begin_group(8, "<super: ")
    p.pretty(obj.__thisclass__)
    p.text(",")
    p.breakable()
    p.pretty(obj.__self__)
    p.end_group(8, ">")


def show_user_list(p, obj, cycle):
    show_call(p, type(obj).__name__, cycle, lambda: p.pretty(obj.data))


# Values shown by their repr, on one line (unless a printer is registered for their class).
PLAIN = {int, float, str, bool, type(None), bytes, complex}
PRINTERS = {list: show_sequence("[", "]"), tuple: show_sequence("(", ")"),
            dict: show_mapping("{", "}"), set: show_set, frozenset: show_set, type: show_class,
            types.FunctionType: show_function, types.BuiltinFunctionType: show_function,
            BaseException: show_exception, types.SimpleNamespace: show_namespace,
            re.Pattern: show_pattern, super: show_super,
            type(os.environ): show_mapping("environ{", "}"),
            types.MappingProxyType: show_mapping("mappingproxy({", "})")}
# Printers for classes of modules a value may come from, looked up by name (so the
# modules are never imported to print a value).
DEFERRED = {("collections", "Counter"): show_counter, ("collections", "OrderedDict"): show_ordered_dict,
            ("collections", "defaultdict"): show_default_dict, ("collections", "deque"): show_deque,
            ("collections", "UserList"): show_user_list}
DEFERRED_MODULES = {module for module, _ in DEFERRED}


# ---- IPython.lib.pretty's for_type and for_type_by_name --------------------------------------

class Theirs:
    """A printer registered through IPython's interface, called `func(obj, p, cycle)`."""

    def __init__(self, func):
        self.func = func

    def __call__(self, p, obj, cycle):
        self.func(obj, p, cycle)


def repr_printer(obj, p, cycle):
    """IPython's _repr_pprint: the value's repr, its lines kept under where it starts."""
    p.text_lines(repr(obj))


# The classes IPython shows by repr with a printer of its own, which for_type hands back.
REPR_CLASSES = {int, float, str, bytes, range, slice, types.MethodType}
REPR_CLASSES_BY_NAME = {("datetime", "datetime"), ("datetime", "timedelta")}
THEIR_FORMS = {}


def in_their_form(printer, cls=None):
    """What IPython's interface hands back for `printer`, the printer of `cls` here (None:
    none)."""
    if isinstance(printer, Theirs):
        return printer.func
    if printer is None:
        named = (getattr(cls, "__module__", None), getattr(cls, "__name__", None))
        shown_by_repr = cls is not None and (cls in REPR_CLASSES or named in REPR_CLASSES_BY_NAME)
        return repr_printer if shown_by_repr else None
    if printer not in THEIR_FORMS:
        THEIR_FORMS[printer] = lambda obj, p, cycle: printer(p, obj, cycle)
    return THEIR_FORMS[printer]


def for_type(cls, func):
    """Values of `cls` are shown by `func(obj, p, cycle)` (None: left as they are); the
    printer it replaces."""
    old = in_their_form(PRINTERS.get(cls), cls)
    if func is not None:
        PRINTERS[cls] = Theirs(func)
        PLAIN.discard(cls)
    return old


def for_type_by_name(module, name, func):
    """for_type for a class named by its module and name (the module is not imported)."""
    old = in_their_form(DEFERRED.get((module, name)))
    if func is not None:
        DEFERRED[(module, name)] = Theirs(func)
        DEFERRED_MODULES.add(module)
    return old


if __name__ == "__main__":  # pragma: no cover - tried by hand against IPython
    print(pretty(eval(sys.argv[1])))
