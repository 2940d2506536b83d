# The read-eval loop that runs inside every sandbox's CPython (passed with `python -S -c`).
#
# Protocol with the host (src/wasm/guest_io.rs and src/wasm/protocol.rs):
# - a request is a 4-byte big-endian length, then that many bytes: one op byte and its fields;
# - a field is a 4-byte big-endian length and that many bytes;
# - the first request is hello: b"H", the reply token, the site-packages directory, and
#   b"1" when the host wants this program's compiled code (marshal) back in the reply; a
#   hello to an interpreter started from a snapshot (see below) gives it its own token and
#   fresh random numbers;
# - preload is b"P" and module names: imports them without binding any name;
# - exec is b"E", the cell's file name, the code, the byte budget of one image, the most
#   images to return, the path prefix of saved figures, and the most bytes of a value, an
#   exception message or a traceback (longer ones lose their middle); refresh is b"R";
# - a reply is one stdout write: the token, a 4-byte length, then fields, each a kind byte
#   and a length-prefixed value (v: the value, as a notebook shows it; n, m, t: an
#   exception's name, message and traceback; i: an image, the guest path of its full-size
#   file (empty when none was saved), a newline, then its bytes (PNG for figures; PNG,
#   JPEG or SVG displayed with IPython.display); r: ready; c: this
#   program's code, marshalled);
# - in the middle of a call, a frame of that form whose one field is C, W or A asks the host
#   about the output shown so far (clear_output): clear it now; clear it when the program
#   next writes (W's value: how many images the cell holds, which the reply then leaves
#   out); output the host does not see written (an image, the value) arrives now.
# Everything else written to stdout or stderr is the program's own output.
#
# Plots: MPLBACKEND names `_sandbox_plots`, a matplotlib backend this driver provides
# (the non-interactive Agg renderer, whose show() hands the open figures back). After
# every cell, the figures still open are handed back too and closed, as in a notebook.
#
# Two ways to run: as `python -c` (the loop below reads requests until stdin ends), or
# driven turn by turn by a runtime that returns to the host between executions (its `turn`
# export runs `__import__('_sandbox_serve').serve()`, which answers one request). Only the
# second can be snapshotted: between turns no guest code is on the stack.
#
# Start-up time matters (it is part of creating a sandbox), so the driver imports only
# built-in modules up front; anything else (matplotlib, pandas) only once the program
# has imported it.


def _sandbox_driver(turns, guest_sources, guest_compiled):
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
    token = [request[1][0]]
    site_packages = request[1][1].decode() if len(request[1]) > 1 else ""
    # As in a notebook, the working directory comes first on sys.path: a module the
    # code writes there (%%writefile helpers.py) imports.
    if "" not in sys.path:
        sys.path.insert(0, "")
    # The host keeps this program compiled, so that later interpreters of the
    # runtime skip compiling it (a tenth of a cold start): the module-level code
    # that called this function is the whole program; the guest modules go with
    # it, each compiled and marshalled on its own (loaded only when imported).
    program = None
    if len(request[1]) > 2 and request[1][2] == b"1":
        import marshal

        compiled = {name: marshal.dumps(compile(source, f"<sandbox {name}>", "exec"))
                    for name, source in guest_sources.items()}
        program = marshal.dumps((sys._getframe(1).f_code, compiled))

    def flush():
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass

    def reply(fields):
        flush()
        parts = []
        for kind, value in fields:
            if value is None:
                continue
            data = value.encode("utf-8", "backslashreplace") if isinstance(value, str) else value
            parts.append(kind.encode() + len(data).to_bytes(4, "big") + data)
        body = b"".join(parts)
        data = token[0] + len(body).to_bytes(4, "big") + body
        while data:
            data = data[posix.write(1, data):]

    def output_control(kind, value=b""):
        """Asks the host about the output the call has shown (IPython's clear_output): a
        frame in a reply's form, one field of kind C (clear now), W (clear at the next
        output; the value is how many images the cell holds) or A (output the host does
        not see arrives now), written after the text still buffered."""
        reply([(kind, value)])

    def refresh_packages():
        if not site_packages:
            return
        try:
            posix.stat(site_packages)
        except OSError:
            return
        import site

        site.addsitedir(site_packages)
        # Installed versions of pure-Python built-ins are imported in their place.
        guest("_sandbox_built_ins").refresh(site_packages)
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
    # Line-buffered, so that what a cell printed before a time limit stopped it is
    # kept; each line is one cheap call to the host (see quota_gate.rs's shortcut).
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, errors="backslashreplace")
        except BaseException:
            pass
    import io

    sys.stdin = io.StringIO("")

    sources = {}

    # ---- guest modules -------------------------------------------------------------------
    # The sandbox's own Python (src/wasm/guest/*.py, handed in by the host as sources):
    # IPython's syntax, shell, magics and display; pip through the host's installer; the
    # HTTP clients, ssl and http.client through the door; threads on one core; POSIX user
    # facts; the asyncio loop. Each is compiled when first needed (a runtime with a
    # snapshot compiles them all into it), and reaches the driver through the
    # `_sandbox_api` module made below.
    class GuestModules:
        """Finds the guest modules, and the modules they stand in for: `IPython` and
        `pip` first (before anything installed); `_ssl`, `pwd`, `grp` last (only when
        the runtime has none of its own)."""

        stand_ins = {}

        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name in guest_sources:
                return type(sys.__spec__)(name, cls)
            maker = cls.stand_ins.get(name.partition(".")[0])
            if maker is None:
                return None
            spec = type(sys.__spec__)(name, cls, is_package=True)
            spec.submodule_search_locations = []
            return spec

        @staticmethod
        def create_module(spec):
            return None

        @classmethod
        def exec_module(cls, module):
            name = module.__name__
            if name in guest_compiled:
                import marshal

                exec(marshal.loads(guest_compiled[name]), module.__dict__)
                return
            if name in guest_sources:
                exec(compile(guest_sources[name], f"<sandbox {name}>", "exec"), module.__dict__)
                return
            guest(cls.stand_ins[name.partition(".")[0]]).fill(module)

    class LastResort(GuestModules):
        stand_ins = {"_ssl": "_sandbox_ssl", "pwd": "_sandbox_posix", "grp": "_sandbox_posix",
                     "matplotlib_inline": "_sandbox_ipython"}

    GuestModules.stand_ins = {"IPython": "_sandbox_ipython", "pip": "_sandbox_pip"}
    sys.meta_path.insert(0, GuestModules)
    sys.meta_path.append(LastResort)

    def guest(name):
        module = sys.modules.get(name)
        return module if module is not None else __import__(name)

    refresh_packages()

    # ---- plots -------------------------------------------------------------------------
    # One execution's settings (from the exec request) and the images it produced
    # (guest/images.py draws and hands them back).
    plots = {"budget": 1 << 20, "max": 8, "prefix": "/.outputs/exec", "images": [], "count": 0, "scale": 1}
    text_limit = [1 << 20]

    class PlotsBackend:
        """Finds `_sandbox_plots`, the matplotlib backend MPLBACKEND names, and has
        guest/images.py fill it."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "_sandbox_plots":
                return None
            return type(sys.__spec__)(name, PlotsBackend)

        @staticmethod
        def create_module(spec):
            return None

        @staticmethod
        def exec_module(module):
            guest("_sandbox_images").fill_backend(module)

    sys.meta_path.append(PlotsBackend)

    def clip(text):
        """The text cut to text_limit bytes by leaving out its middle, exactly as the
        host's cap_value_text does (src/sandbox/types.rs)."""
        limit = text_limit[0]
        data = text.encode("utf-8", "backslashreplace")
        if len(data) <= limit:
            return text
        half = max(0, limit - 80) // 2
        head_end = half
        while head_end > 0 and data[head_end] & 0xC0 == 0x80:
            head_end -= 1
        newline = data.rfind(b"\n", 0, head_end)
        if newline >= 0 and newline >= head_end // 2:
            head_end = newline + 1
        tail_start = len(data) - half
        while tail_start < len(data) and data[tail_start] & 0xC0 == 0x80:
            tail_start += 1
        newline = data.find(b"\n", tail_start)
        if newline >= 0 and newline - tail_start < (len(data) - tail_start) // 2:
            tail_start = newline + 1
        head = data[:head_end]
        gap = b"" if not head or head.endswith(b"\n") else b"\n"
        marker = f"… [{tail_start - head_end} of {len(data)} bytes left out] …\n".encode()
        return (head + gap + marker + data[tail_start:]).decode("utf-8", "backslashreplace")

    def note(text):
        try:
            sys.stderr.write(f"[{text}]\n")
        except BaseException:
            pass


    # ---- values --------------------------------------------------------------------------
    # How a value reads (guest/values.py): what %precision set, a format for floats shown
    # as values ("%.3f"), or None for repr.
    float_format = [None]

    def display(*values, **options):
        """Shows values as a notebook's display() does: figures and images as images,
        the rest as text where the call is (IPython.display's options are taken)."""
        return guest("_sandbox_values").display(*values, **options)

    builtins.display = display

    driver_globals = globals()

    def without_driver_frames(tb):
        """The traceback without the frames of this driver's own code and of its guest
        modules (what user code calls into: display, show, the event loop, magics)."""
        kept = []
        while tb is not None:
            frame_globals = tb.tb_frame.f_globals
            if frame_globals is not driver_globals and not frame_globals.get("__sandbox_internal__"):
                kept.append(tb)
            tb = tb.tb_next
        for earlier, later in zip(kept, kept[1:] + [None]):
            earlier.tb_next = later
        return kept[0] if kept else None

    def describe(exc):
        import linecache
        import traceback

        for filename, source in sources.items():
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        seen = set()
        chained = exc
        while chained is not None and id(chained) not in seen:
            seen.add(id(chained))
            chained.__traceback__ = without_driver_frames(chained.__traceback__)
            chained = chained.__cause__ or chained.__context__
        # What post-mortem tools read (traceback.print_last(), pdb.pm()), as IPython sets it.
        sys.last_exc, sys.last_type, sys.last_value, sys.last_traceback = \
            exc, type(exc), exc, exc.__traceback__
        last_error[0] = exc
        if getattr(exc, "_sandbox_short_traceback", False):
            # A magic's usage error reads as IPython shows it: one line, no frames.
            lines = [f"{type(exc).__name__}: {exc}\n"]
        elif isinstance(exc, SystemExit):
            # sys.exit() in a cell, as IPython shows it (the interpreter goes on).
            lines = ["An exception has occurred, use %tb to see the full traceback.\n\n",
                     f"SystemExit: {exc}\n" if str(exc) else "SystemExit\n"]
        else:
            lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return {"n": clip(type(exc).__name__), "m": clip(str(exc)), "t": clip("".join(lines))}

    # ---- asyncio -------------------------------------------------------------------------
    # WASI has no sockets, so asyncio's default loop cannot even start (it makes a socket
    # pair to wake itself): guest/asyncio_loop.py's loop runs coroutines, tasks and timers
    # without I/O. It is asyncio's default once asyncio is imported, so asyncio.run()
    # works, and cells may use await at the top level, as in a notebook.
    async_state = {"loop": None}

    def use_sandbox_loop(asyncio):
        guest("_sandbox_asyncio").use_sandbox_loop(asyncio, cell_loop)

    def cell_loop():
        """The interpreter's own loop, on which cells await and their tasks run."""
        import asyncio

        if async_state["loop"] is None or async_state["loop"].is_closed():
            async_state["loop"] = asyncio.new_event_loop()
        return async_state["loop"]

    def settle_tasks():
        """Lets the tasks cells started run as far as they can without waiting (between
        cells, as a notebook's loop runs them while the kernel is idle)."""
        loop = async_state["loop"]
        if loop is not None and "_sandbox_asyncio" in sys.modules:
            guest("_sandbox_asyncio").settle(loop)

    def patch_on_import(name, patch):
        """Calls `patch(module)` on module `name` now if it is imported, else as
        soon as it is (an import hook wrapping the real loader)."""
        if name in sys.modules:
            patch(sys.modules[name])
            return

        class Hook:
            @classmethod
            def find_spec(cls, wanted, path=None, target=None):
                if wanted != name:
                    return None
                for finder in sys.meta_path:
                    find = getattr(finder, "find_spec", None)
                    spec = None if finder is cls or find is None else find(wanted, path, target)
                    if spec is not None:
                        break
                else:
                    return None
                real = spec.loader

                class Loader:
                    @staticmethod
                    def create_module(spec):
                        return real.create_module(spec)

                    @staticmethod
                    def exec_module(module):
                        real.exec_module(module)
                        patch(module)

                spec.loader = Loader
                return spec

        sys.meta_path.insert(0, Hook)

    # Makes the sandbox's loop asyncio's default as asyncio is imported.
    patch_on_import("asyncio", use_sandbox_loop)

    # ---- HTTP through the host's door --------------------------------------------------
    # No sockets here: urllib's http and https go to the host as `http_request` calls of
    # the tool protocol (src/door/), which checks them against the server's allowed hosts
    # and networks. pandas.read_csv(url) and friends use urllib, so they follow.

    # Routes urllib.request through the door as it is imported (guest/http_door.py,
    # which routes requests, httpx, urllib3 and aiohttp the same way).
    patch_on_import("urllib.request", lambda module: guest("_sandbox_http").patch_urllib(module))

    class NoDoor:
        """Last on sys.meta_path: asked for `host` only when no other finder has it (a
        runtime with no door to the host), it says why instead of a bare 'No module'."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "host" or name.startswith("host."):
                raise ModuleNotFoundError(
                    f"No module named {name!r}: this sandbox's runtime has no door to the host, "
                    "so its code cannot call tools; create the sandbox with runtime 'scientific' "
                    "(the server offers upstream MCP tools with SANDBOX_UPSTREAMS)",
                    name=name,
                )
            return None

    sys.meta_path.append(NoDoor)

    def run_awaitable(awaitable):
        """Runs a cell's top-level awaits on the interpreter's own loop."""
        return cell_loop().run_until_complete(awaitable)

    only_ast = 0x400  # ast.PyCF_ONLY_AST, without importing the ast module
    top_level_await = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    co_coroutine = 0x80  # inspect.CO_COROUTINE

    # The __future__ features earlier cells imported: later cells are compiled with them,
    # as IPython compiles them (`from __future__ import annotations` holds for the session).
    future_flags = [0]

    def note_futures(tree):
        """Keeps the features of the __future__ imports at the start of a cell that
        compiled (anywhere else they are a SyntaxError, and hold nothing)."""
        body = tree.body
        if body and isinstance(body[0], _ast.Expr) and isinstance(body[0].value, _ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # a docstring may come first
        for node in body:
            if not (isinstance(node, _ast.ImportFrom) and node.module == "__future__"):
                break
            import __future__

            for alias in node.names:
                feature = getattr(__future__, alias.name, None)
                future_flags[0] |= getattr(feature, "compiler_flag", 0)

    def run_code(tree, filename, mode):
        """Compiles and runs a cell's statements or its last expression; a cell that
        awaits at the top level runs on the sandbox's event loop."""
        code = compile(tree, filename, mode, top_level_await | future_flags[0])
        if code.co_flags & co_coroutine:
            return run_awaitable(eval(code, namespace))
        return eval(code, namespace)

    # IPython's history names: In[n] and _i, _ii, _iii, _i<n> for the cells' code, Out[n]
    # and _, __, ___, _<n> for the values they showed (Out holds them, as in IPython).
    inputs, outputs = [""], {}
    # The directories %cd visited, first the one the session started in (IPython's _dh).
    dir_history = [posix.getcwd()]

    def cell_number(filename):
        digits = filename[len("<cell-"):-1] if filename.startswith("<cell-") else ""
        return int(digits) if digits.isdigit() else None

    def record_input(number, code):
        while len(inputs) < number:
            inputs.append("")
        inputs.append(code)
        namespace.update({"In": inputs, "_ih": inputs, "Out": outputs, "_oh": outputs, "_dh": dir_history,
                          "_iii": inputs[-4] if len(inputs) > 3 else "",
                          "_ii": inputs[-3] if len(inputs) > 2 else "",
                          "_i": inputs[-2], f"_i{number}": code})

    def record_output(number, value):
        if number is not None:
            outputs[number] = value
            namespace[f"_{number}"] = value
        namespace["___"], namespace["__"] = namespace.get("__", ""), namespace.get("_", "")
        namespace["_"] = value

    def run_cell(code, filename):
        """Runs a cell between IPython's events (pre_run_cell, post_run_cell...), when the
        notebook shell is there to have them."""
        number = cell_number(filename)
        shell = sys.modules.get("_sandbox_shell") if number is not None else None
        info = shell.cell_started(code, number) if shell is not None else None
        answer = run_cell_body(code, filename)
        if info is not None:
            shell.cell_ended(info, last_error[0] if "n" in answer else None, outputs.get(number))
        return answer

    # The exception the last failing cell raised (what post_run_cell's result holds).
    last_error = [None]

    def run_cell_body(code, filename):
        sources[filename] = code
        # As IPython: the cell's lines for tracebacks, inspect.getsource and warnings,
        # and a warning shown again in a later cell (the registry is per cell).
        import linecache

        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        namespace.pop("__warningregistry__", None)
        current["cell"] = filename
        number = cell_number(filename)
        if number is not None:
            record_input(number, code.rstrip("\n"))
        settle_tasks()
        try:
            python = guest("_sandbox_notebook").transform(code) if notebook_syntax(code) else code
            tree = compile(python, filename, "exec", only_ast | top_level_await | future_flags[0])
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
            exc.__traceback__ = None
            return describe(exc)
        note_futures(tree)
        shown = interactivity()
        last = None
        if shown != "none" and tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = tree.body.pop().value
        elif shown == "last_expr_or_assign" and tree.body:
            last = assigned_name(tree.body[-1])
        try:
            if shown == "all":
                run_showing_each(tree.body, filename, python, number)
            else:
                run_code(tree, filename, "exec")
            if last is not None:
                result = run_code(_ast.Expression(last), filename, "eval")
                if result is not None and not silenced(python, last):
                    record_output(number, result)
                    return {"v": clip(guest("_sandbox_values").present(result))}
            return {}
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything
            return describe(exc)
        finally:
            end_of_cell_threads()

    def interactivity():
        """Which of a cell's expressions show their values: IPython's
        InteractiveShell.ast_node_interactivity ("last_expr", "all", "last",
        "last_expr_or_assign" or "none"), as the code set it."""
        shell = sys.modules.get("_sandbox_shell")
        if shell is None:
            return "last_expr"
        chosen = getattr(shell._shell[0] if shell._shell else shell.SandboxShell,
                         "ast_node_interactivity", "last_expr")
        # Anything but one of IPython's words (a number, an array, an object
        # whose comparisons raise) is the default, so no cell is kept from running.
        if type(chosen) is str and chosen in shell.INTERACTIVITY_MODES:
            return chosen
        return "last_expr"

    def assigned_name(node):
        """The name a cell's last statement assigns to (`x = ...`, `x += ...`), as an
        expression that reads it, or None."""
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        if isinstance(node, (_ast.Assign, _ast.AugAssign, _ast.AnnAssign)) and \
                len(targets) == 1 and isinstance(targets[0], _ast.Name) and \
                getattr(node, "value", None) is not None:
            name = targets[0]
            return _ast.copy_location(_ast.Name(name.id, _ast.Load()), name)
        return None

    def run_showing_each(body, filename, python, number):
        """Runs a cell's statements, showing the value of each expression statement
        (ast_node_interactivity = "all"), as separate outputs in order."""
        pending = []
        for node in body:
            if not isinstance(node, _ast.Expr) or silenced(python, node.value):
                pending.append(node)
                continue
            if pending:
                run_code(_ast.Module(pending, []), filename, "exec")
                pending = []
            value = run_code(_ast.Expression(node.value), filename, "eval")
            if value is not None:
                record_output(number, value)
                display(value)
        if pending:
            run_code(_ast.Module(pending, []), filename, "exec")

    def silenced(python, last):
        """Whether the cell's last expression ends with `;`, which in a notebook
        keeps its value from being shown (`plt.plot(x);`)."""
        lines = python.splitlines()
        if last.end_lineno is None or last.end_lineno > len(lines):
            return False
        rest = lines[last.end_lineno - 1].encode("utf-8", "surrogatepass")[last.end_col_offset:]
        return rest.lstrip().startswith(b";")

    def notebook_syntax(code):
        """Whether the cell may hold IPython's syntax (magics, shell lines, help,
        prompts, a command like `pip install x` alone): only then is it read by
        guest/syntax.py. A cheap look, wrong only towards looking closer."""
        lines = code.splitlines()
        if code[:1] in (" ", "\t"):
            return True
        for line in lines:
            text = line.lstrip()
            if text[:1] in escapes or text.rstrip().endswith("?") or text.startswith((">>>", "In [")):
                return True
            if ("=" in text) and ("!" in text or "%" in text):
                return True
        code_lines = [line for line in lines if line.strip()]
        if len(code_lines) == 1:
            word = code_lines[0].split(None, 1)[0].split(".")[0]
            return word in automagic and word not in namespace
        return False

    escapes = frozenset("%!?/,;")
    # Names a cell of one line may use as a command without `%` (IPython's automagic
    # and aliases); guest/shell.py adds the magics code registers.
    automagic = set(
        "pip conda mamba micromamba uv time timeit who whos who_ls env set_env pwd cd ls ll "
        "cat mkdir rmdir mv rm cp lsmagic magic matplotlib load_ext reload_ext unload_ext "
        "config precision history reset xdel run autoreload aimport alias automagic pdb "
        "debug prun store sx system pinfo pinfo2 psearch dirs pushd popd bookmark "
        "autoawait xmode colors page pprint doctest_mode reset_selective pdoc psource pfile "
        "pycat autosave".split()
    )

    # ---- the driver's side of the guest modules -------------------------------------------
    current = {"cell": "<cell>"}

    def end_of_cell_threads():
        settle_tasks()
        threads = sys.modules.get("_sandbox_threads")
        if threads is not None:
            threads.at_cell_end()

    def waiting_clear_settles(answer):
        """A clear_output(wait=True) still waiting at the end of a cell clears when the
        cell shows a value or an error (output, in a notebook), else nothing."""
        display_module = sys.modules.get("_sandbox_display")
        if display_module is not None:
            display_module.cell_ends(shows_more="v" in answer or "n" in answer)

    api = type(sys)("_sandbox_api")
    api.__doc__ = "What the sandbox's driver offers its guest modules."
    api.namespace, api.sources, api.current, api.turns = namespace, sources, current, turns
    api.automagic, api.site_packages = automagic, site_packages
    api.note, api.clip, api.plots = note, clip, plots
    api.output_control, api.user_traceback = output_control, without_driver_frames
    api.refresh_packages, api.patch_on_import, api.run_awaitable = refresh_packages, patch_on_import, run_awaitable
    api.float_format, api.inputs, api.outputs = float_format, inputs, outputs
    api.dir_history = dir_history
    sys.modules["_sandbox_api"] = api

    def get_ipython():
        """The sandbox's IPython-like shell: run_line_magic, run_cell_magic, system,
        getoutput, user_ns, register_magic_function... (see `%lsmagic`)."""
        return guest("_sandbox_shell").shell()

    builtins.get_ipython = get_ipython
    guest("_sandbox_notebook").install(api)

    # One-time costs (the AST types, the compiler's first use) are paid now,
    # while the interpreter starts, not by the first cell.
    run_cell("None", "<warm-up>")
    sources.clear()
    namespace.pop("_", None)

    def refresh_randomness():
        """Fresh random numbers for an interpreter started from a snapshot, which
        would otherwise draw the numbers every sibling draws."""
        random = sys.modules.get("random")
        if random is not None:
            random.seed()
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:
            try:
                numpy_random.seed()
            except BaseException:
                pass
        tempfile = sys.modules.get("tempfile")
        if tempfile is not None:
            tempfile._name_sequence = None

    def preload(names):
        """Imports modules ahead of the user's code, binding no name; then moves every
        object alive out of the cyclic collector's way (gc.freeze): they are the
        snapshot's, shared by every sandbox, and a full collection would otherwise
        visit, and write to, each of them (about 100 ms with pandas imported, and the
        pages it writes would be kept after the execution)."""
        import gc
        import importlib

        for name in names:
            importlib.import_module(name.decode())
        gc.collect()
        gc.freeze()
        return {}

    def serve_one():
        """Reads one request and answers it; False at the end of stdin."""
        request = read_request()
        if request is None:
            return False
        op, fields = request
        plots["images"] = []
        plots["count"] = 0
        try:
            if op == b"E":
                if len(fields) >= 6:
                    plots["budget"] = int(fields[2])
                    plots["max"] = int(fields[3])
                    plots["prefix"] = fields[4].decode()
                    text_limit[0] = int(fields[5])
                plots["during_cell"] = True
                try:
                    answer = run_cell(fields[1].decode("utf-8", "surrogateescape"), fields[0].decode())
                finally:
                    plots["during_cell"] = False
                if "matplotlib.pyplot" in sys.modules:
                    try:
                        guest("_sandbox_images").show_figures()
                    except BaseException as exc:  # noqa: BLE001 - never lose the cell's answer
                        note(f"the figures could not be drawn: {type(exc).__name__}: {exc}")
            elif op == b"R":
                refresh_packages()
                answer = {}
            elif op == b"H":
                token[0] = fields[0]
                refresh_randomness()
                refresh_packages()
                answer = {"r": "ready"}
            elif op == b"P":
                answer = preload(fields)
            else:
                answer = {"n": "DriverError", "m": f"unknown op {op!r}"}
        except BaseException as exc:  # noqa: BLE001 - the loop must survive anything
            try:
                answer = describe(exc)
            except BaseException:
                answer = {"n": "DriverError", "m": "could not describe the error"}
        if op == b"E":
            try:
                waiting_clear_settles(answer)
            except BaseException as exc:  # noqa: BLE001 - never lose the cell's answer
                note(f"the output could not be cleared: {type(exc).__name__}: {exc}")
        fields = list(answer.items())
        fields += [("i", saved.encode() + b"\n" + data) for saved, data in plots["images"]]
        plots["images"] = []
        try:
            reply(fields)
        except BaseException as exc:  # noqa: BLE001 - e.g. a value that cannot be encoded
            reply([("n", type(exc).__name__), ("m", clip(str(exc)))])
        return True

    reply([("r", "ready"), ("c", program)])
    if turns:
        module = type(sys)("_sandbox_serve")
        module.serve = lambda: None if serve_one() else None
        sys.modules["_sandbox_serve"] = module
        return
    while serve_one():
        pass


_sandbox_driver(
    globals().pop("_sandbox_turns", False),
    globals().pop("_sandbox_sources", {}),
    globals().pop("_sandbox_compiled", {}),
)
del _sandbox_driver
