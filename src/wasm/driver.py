# The read-eval loop that runs inside every sandbox's CPython (passed with `python -S -c`).
#
# Protocol with the host (src/wasm/guest_io.rs and src/wasm/protocol.rs):
# - a request is a 4-byte big-endian length, then that many bytes: one op byte and its fields;
# - a field is a 4-byte big-endian length and that many bytes;
# - the first request is hello: b"H", the reply token, the site-packages directory;
# - exec is b"E", the cell's file name, the code; refresh is b"R";
# - a reply is one stdout write: the token, a 4-byte length, then fields, each a kind byte
#   and a length-prefixed value (v: repr of the value; n, m, t: an exception's name,
#   message and traceback; r: ready).
# Everything else written to stdout or stderr is the program's own output.
#
# Start-up time matters (it is part of creating a sandbox), so the driver imports only
# built-in modules up front; anything else is imported when first needed.


def _sandbox_driver():
    import _ast
    import builtins
    import posix
    import sys

    def read_exact(n):
        chunks = []
        while n:
            chunk = posix.read(0, n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def read_request():
        header = read_exact(4)
        if header is None:
            return None
        body = read_exact(int.from_bytes(header, "big"))
        if body is None:
            return None
        fields = []
        at = 1
        while at + 4 <= len(body):
            size = int.from_bytes(body[at:at + 4], "big")
            fields.append(body[at + 4:at + 4 + size])
            at += 4 + size
        return body[:1], fields

    request = read_request()
    if request is None or request[0] != b"H":
        return
    token = request[1][0]
    site_packages = request[1][1].decode() if len(request[1]) > 1 else ""

    def flush():
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass

    def reply(**fields):
        flush()
        parts = []
        for kind, value in fields.items():
            if value is None:
                continue
            data = value.encode("utf-8", "backslashreplace") if isinstance(value, str) else value
            parts.append(kind.encode() + len(data).to_bytes(4, "big") + data)
        body = b"".join(parts)
        data = token + len(body).to_bytes(4, "big") + body
        while data:
            data = data[posix.write(1, data):]

    def refresh_packages():
        if not site_packages:
            return
        try:
            posix.stat(site_packages)
        except OSError:
            return
        import site

        site.addsitedir(site_packages)
        # Like importlib.invalidate_caches(), but only for what an install
        # changes: the standard library's zipimporters re-read the whole
        # archive when invalidated (about 20 ms each under WASI).
        for path, finder in list(sys.path_importer_cache.items()):
            if finder is None:
                del sys.path_importer_cache[path]
            elif path.startswith(site_packages) and hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()
        try:
            import importlib._bootstrap_external as bootstrap

            bootstrap._NamespacePath._epoch += 1
        except Exception:
            pass
        metadata = sys.modules.get("importlib.metadata")
        if metadata is not None:
            metadata.MetadataPathFinder.invalidate_caches()

    class Quitter:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"Use {self.name}() to end the interpreter; its state will be lost"

        def __call__(self, code=None):
            raise SystemExit(code)

    # The user's code runs in a fresh __main__ module, as in a notebook.
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    namespace = main.__dict__
    sys.argv = [""]
    builtins.exit = Quitter("exit")
    builtins.quit = Quitter("quit")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, errors="backslashreplace")
        except BaseException:
            pass
    import io

    sys.stdin = io.StringIO("")
    refresh_packages()

    sources = {}

    def describe(exc, skip_frames):
        import linecache
        import traceback

        for filename, source in sources.items():
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        tb = exc.__traceback__
        for _ in range(skip_frames):
            if tb is not None:
                tb = tb.tb_next
        lines = traceback.format_exception(type(exc), exc, tb)
        return {"n": type(exc).__name__, "m": str(exc), "t": "".join(lines)}

    only_ast = 0x400  # ast.PyCF_ONLY_AST, without importing the ast module

    def run_cell(code, filename):
        sources[filename] = code
        try:
            tree = compile(code, filename, "exec", only_ast)
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
            return describe(exc, 99)
        last = None
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        try:
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                result = eval(compile(last, filename, "eval"), namespace)
                if result is not None:
                    namespace["_"] = result
                    return {"v": repr(result)}
            return {}
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything
            return describe(exc, 1)

    # One-time costs (the AST types, the compiler's first use) are paid now,
    # while the interpreter starts, not by the first cell.
    run_cell("None", "<warm-up>")
    sources.clear()
    namespace.pop("_", None)

    reply(r="ready")
    while True:
        request = read_request()
        if request is None:
            return
        op, fields = request
        try:
            if op == b"E":
                answer = run_cell(fields[1].decode("utf-8", "surrogateescape"), fields[0].decode())
            elif op == b"R":
                refresh_packages()
                answer = {}
            else:
                answer = {"n": "DriverError", "m": f"unknown op {op!r}"}
        except BaseException as exc:  # noqa: BLE001 - the loop must survive anything
            try:
                answer = describe(exc, 0)
            except BaseException:
                answer = {"n": "DriverError", "m": "could not describe the error"}
        try:
            reply(**answer)
        except BaseException as exc:  # noqa: BLE001 - e.g. a value that cannot be encoded
            reply(n=type(exc).__name__, m=str(exc))


_sandbox_driver()
del _sandbox_driver
