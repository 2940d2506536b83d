# The read-eval loop that runs inside every sandbox's CPython (passed with `python -c`).
#
# Protocol with the host (src/wasm/guest_io.rs):
# - requests arrive on stdin as a 4-byte big-endian length followed by that much JSON;
# - the first request is {"op": "hello", "token": T, "site_packages": P};
# - every reply is written to stdout in one write: the token (ASCII), a 4-byte
#   big-endian length, then JSON. Everything else written to stdout or stderr is
#   the program's output and the host captures it as such.
# The driver keeps its own names out of the user's namespace and never lets an
# exception from user code end the loop.


def _sandbox_driver():
    import ast
    import builtins
    import io
    import json
    import linecache
    import os
    import sys
    import traceback
    import types

    def read_exact(n):
        chunks = []
        while n:
            chunk = os.read(0, n)
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
        return json.loads(body)

    hello = read_request()
    if hello is None or hello.get("op") != "hello":
        return
    token = hello["token"].encode("ascii")
    site_packages = hello.get("site_packages")

    def reply(message):
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass
        body = json.dumps(message, ensure_ascii=False, default=str).encode("utf-8", "replace")
        data = token + len(body).to_bytes(4, "big") + body
        while data:
            data = data[os.write(1, data):]

    def refresh_packages():
        if site_packages and os.path.isdir(site_packages):
            import site

            site.addsitedir(site_packages)
        # Like importlib.invalidate_caches(), but only for what an install
        # changes: the standard library's zipimporters re-read the whole
        # archive when invalidated (about 20 ms each under WASI).
        for path, finder in list(sys.path_importer_cache.items()):
            if finder is None:
                del sys.path_importer_cache[path]
            elif site_packages and path.startswith(site_packages) and hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()
        try:
            import importlib._bootstrap_external as bootstrap

            bootstrap._NamespacePath._epoch += 1
        except Exception:
            pass
        metadata = sys.modules.get("importlib.metadata")
        if metadata is not None:
            metadata.MetadataPathFinder.invalidate_caches()

    # The user's code runs in a fresh __main__ module, as in a notebook.
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    namespace = main.__dict__
    sys.argv = [""]
    sys.stdin = io.StringIO("")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, errors="backslashreplace")
        except Exception:
            pass
    refresh_packages()

    def describe(exc, skip_frames):
        tb = exc.__traceback__
        for _ in range(skip_frames):
            if tb is not None:
                tb = tb.tb_next
        lines = traceback.format_exception(type(exc), exc, tb)
        return {
            "name": type(exc).__name__,
            "value": str(exc),
            "traceback": "".join(lines),
        }

    def run_cell(code, filename):
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename=filename, mode="exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            return {"value": None, "error": describe(exc, 99)}
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        try:
            exec(compile(tree, filename, "exec"), namespace)
            value = None
            if last is not None:
                result = eval(compile(last, filename, "eval"), namespace)
                if result is not None:
                    namespace["_"] = result
                    value = repr(result)
            return {"value": value, "error": None}
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything
            return {"value": None, "error": describe(exc, 1)}

    reply({"ready": True, "version": sys.version})
    while True:
        request = read_request()
        if request is None:
            return
        op = request.get("op")
        try:
            if op == "exec":
                answer = run_cell(request["code"], request.get("filename", "<cell>"))
            elif op == "refresh_packages":
                refresh_packages()
                answer = {"value": None, "error": None}
            else:
                answer = {"value": None, "error": {"name": "DriverError", "value": f"unknown op {op!r}", "traceback": ""}}
        except BaseException as exc:  # noqa: BLE001 - the loop must survive anything
            try:
                answer = {"value": None, "error": describe(exc, 0)}
            except BaseException:
                answer = {"value": None, "error": {"name": "DriverError", "value": "could not describe the error", "traceback": ""}}
        try:
            reply(answer)
        except BaseException as exc:  # noqa: BLE001 - e.g. a repr that cannot be encoded
            reply({"value": None, "error": {"name": type(exc).__name__, "value": str(exc), "traceback": ""}})


_sandbox_driver()
del _sandbox_driver
