# Code the magics run, read and run as a cell's is: %time's statement, %%time's body,
# %%capture's cell, %run's script are read with IPython's syntax too and compiled at the
# line of the cell they stand on, so a traceback names the line the user wrote; and the
# mark that makes a function a magic.

__sandbox_internal__ = True

import _sandbox_api as api


def magic(kind, name=None, expand=True, frame=False):
    """Marks a function as a magic of `kind` ('line', 'cell' or 'line_cell')."""
    def mark(fn):
        fn._sandbox_magic = (kind, name or fn.__name__.rstrip("_"))
        fn._sandbox_no_var_expand = not expand
        fn._sandbox_wants_frame = frame
        return fn

    return mark


def parse_at(code, filename, line, col=0):
    """The AST of `code` (IPython's syntax read) placed at `line` (1-based) and, for its
    first line, column `col` of `filename`."""
    import ast

    import _sandbox_notebook

    python = _sandbox_notebook.transform(code)
    try:
        tree = compile(python, filename, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        # The bad line as the code has it (CPython reads it from the file named, which
        # may hold something else: a notebook's JSON), and where it stands in the file
        # or cell the code is part of.
        lines = code.splitlines()
        if isinstance(exc.lineno, int) and 0 < exc.lineno <= len(lines):
            exc.text = lines[exc.lineno - 1] + "\n"
        for attr in ("lineno", "end_lineno"):
            if isinstance(getattr(exc, attr, None), int):
                setattr(exc, attr, getattr(exc, attr) + line - 1)
        raise
    for node in ast.walk(tree):
        if col and getattr(node, "lineno", None) == 1:
            node.col_offset += col
            if getattr(node, "end_lineno", None) == 1:
                node.end_col_offset += col
    return ast.increment_lineno(tree, line - 1)


def run_tree(tree, filename, namespace, local_ns=None):
    """Runs a module's statements; the value of its last expression (or None)."""
    return run_compiled(compiled(tree, filename), namespace, local_ns)


def compiled(tree, filename):
    """A module's statements compiled, as a pair: the code of all but a last expression,
    and that expression's (or None)."""
    import ast

    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return (compile(tree, filename, "exec", flags),
            None if last is None else compile(last, filename, "eval", flags))


def run_compiled(parts, namespace, local_ns=None):
    """Runs what `compiled` made; the value of the last expression (or None)."""
    body, last = parts
    run(body, namespace, local_ns)
    return None if last is None else run(last, namespace, local_ns)


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
