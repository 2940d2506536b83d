# A stand-in for the parts of IPython that notebook code imports: IPython.display (display,
# Markdown, HTML, Image, SVG, JSON, Latex, Math, Code, clear_output...), get_ipython(),
# IPython.core.magic's decorators for magics of one's own, IPython.utils.capture. The
# display classes keep IPython's behaviour (what they hold, how they read a file or a
# URL, their _repr_*_ methods); what reaches the result is decided by display.py.

__sandbox_internal__ = True

import os

import _sandbox_display as _display

VERSION = (8, 30, 0, "")


class DisplayObject:
    """An object displayed by one of its representations (IPython's DisplayObject)."""

    _read_flags = "r"
    _show_mem_addr = False

    def __init__(self, data=None, url=None, filename=None, metadata=None):
        if isinstance(data, (os.PathLike, str)) and not isinstance(data, bytes):
            text = os.fspath(data)
            if text.startswith(("http://", "https://")) and url is None:
                url, data = text, None
            elif len(text) < 4096 and "\n" not in text and os.path.exists(text) and filename is None:
                filename, data = text, None
        self.data, self.url, self.filename = data, url, None if filename is None else os.fspath(filename)
        self.metadata = {} if metadata is None else dict(metadata)
        self.reload()
        self._check_data()

    def _check_data(self):
        pass

    def reload(self):
        """Reads the data from the file or URL it came from."""
        if self.filename is not None:
            with open(self.filename, self._read_flags, **({} if "b" in self._read_flags else {"encoding": "utf-8"})) as f:
                self.data = f.read()
        elif self.url is not None and getattr(self, "embed", True):
            import urllib.request

            with urllib.request.urlopen(self.url) as response:
                data = response.read()
                self.data = data if "b" in self._read_flags else data.decode("utf-8", "replace")

    def __repr__(self):
        return f"<{type(self).__module__}.{type(self).__name__} object>"


class TextDisplayObject(DisplayObject):
    def _check_data(self):
        if self.data is not None and not isinstance(self.data, str):
            raise TypeError(f"{type(self).__name__} expects text, not {self.data!r}")


class Pretty(TextDisplayObject):
    def _repr_pretty_(self, p, cycle):
        p.text(self.data)


class HTML(TextDisplayObject):
    def __init__(self, data=None, url=None, filename=None, metadata=None):
        if isinstance(data, str) and data.startswith(("http://", "https://")) and " " not in data:
            url, data = data, None
        super().__init__(data, url, filename, metadata)

    def _repr_html_(self):
        return self.data

    def __html__(self):
        return self.data


class Markdown(TextDisplayObject):
    def _repr_markdown_(self):
        return self.data


class Math(TextDisplayObject):
    def _repr_latex_(self):
        text = (self.data or "").strip("$")
        return f"$\\displaystyle {text}$"


class Latex(TextDisplayObject):
    def _repr_latex_(self):
        return self.data


class SVG(DisplayObject):
    """An SVG image (its <svg> element)."""

    _read_flags = "rb"

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, svg):
        if isinstance(svg, bytes):
            svg = svg.decode("utf-8", "replace")
        if isinstance(svg, str):
            start = svg.find("<svg")
            svg = svg[start:] if start >= 0 else svg
        self._data = svg

    def _repr_svg_(self):
        return self.data


class JSON(DisplayObject):
    """JSON data, shown indented."""

    def __init__(self, data=None, url=None, filename=None, expanded=False, metadata=None, root="root", **kwargs):
        self.expanded, self.root = expanded, root
        super().__init__(data, url, filename, metadata)

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        if isinstance(value, (os.PathLike, str)) and not isinstance(value, dict):
            import json

            try:
                value = json.loads(value)
            except (TypeError, ValueError):
                pass
        self._data = value

    def _repr_json_(self):
        return self.data, self.metadata


class Javascript(TextDisplayObject):
    def __init__(self, data=None, url=None, filename=None, lib=None, css=None):
        self.lib, self.css = lib, css
        super().__init__(data, url, filename)

    def _repr_javascript_(self):
        return self.data


def image_format(data, filename):
    if isinstance(data, bytes):
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            return "png"
        if data[:3] == b"\xff\xd8\xff":
            return "jpeg"
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return "gif"
    if filename:
        ext = filename.rsplit(".", 1)[-1].lower()
        return {"jpg": "jpeg", "jpe": "jpeg"}.get(ext, ext)
    return "png"


class Image(DisplayObject):
    """A PNG, JPEG or GIF image from bytes, a file or a URL (embedded unless only a URL
    is given, as IPython does)."""

    _read_flags = "rb"

    def __init__(self, data=None, url=None, filename=None, format=None, embed=None, width=None,
                 height=None, retina=False, unconfined=False, metadata=None, alt=None):
        if isinstance(data, str) and data.startswith(("http://", "https://")):
            url, data = data, None
        elif isinstance(data, (str, os.PathLike)) and os.path.exists(os.fspath(data)):
            filename, data = os.fspath(data), None
        self.embed = (data is not None or filename is not None) if embed is None else embed
        self.format = (format or image_format(data, filename or url)).lower()
        if self.format == "jpg":
            self.format = "jpeg"
        self.width, self.height, self.retina, self.unconfined, self.alt = width, height, retina, unconfined, alt
        super().__init__(data=data, url=url, filename=filename, metadata=metadata)

    def _repr_png_(self):
        return self.data if self.embed and self.format == "png" else None

    def _repr_jpeg_(self):
        return self.data if self.embed and self.format == "jpeg" else None

    def _repr_html_(self):
        if not self.embed:
            return f'<img src="{self.url}"/>'
        return None

    def _repr_mimebundle_(self, include=None, exclude=None):
        if self.embed and self.format == "gif":
            return {"text/plain": f"<IPython.core.display.Image object: a GIF of {len(self.data or b'')} bytes, which is not returned (PNG and JPEG are)>"}
        return {}


class Code(TextDisplayObject):
    def __init__(self, data=None, url=None, filename=None, language=None):
        self.language = language
        super().__init__(data, url, filename)

    def _repr_pretty_(self, p, cycle):
        p.text(self.data)

    def __repr__(self):
        return self.data or ""


class IFrame:
    def __init__(self, src, width, height, extras=None, **kwargs):
        self.src, self.width, self.height, self.extras, self.params = src, width, height, extras or [], kwargs

    def _repr_html_(self):
        return f'<iframe width="{self.width}" height="{self.height}" src="{self.src}" frameborder="0" allowfullscreen></iframe>'


class YouTubeVideo(IFrame):
    def __init__(self, id, width=400, height=300, allow_autoplay=False, **kwargs):
        self.id = id
        super().__init__(f"https://www.youtube.com/embed/{id}", width, height, **kwargs)


class FileLink:
    def __init__(self, path, url_prefix="", result_html_prefix="", result_html_suffix="<br>"):
        if os.path.isdir(path):
            raise ValueError(f"Cannot display a directory using FileLink. Use FileLinks to display '{path}'.")
        self.path, self.url_prefix = os.fsdecode(path), url_prefix

    def _repr_html_(self):
        return f"<a href='{self.url_prefix}{self.path}' target='_blank'>{self.path}</a><br>"

    def __repr__(self):
        return os.path.abspath(self.path)


class FileLinks(FileLink):
    def __init__(self, path, url_prefix="", included_suffixes=None, recursive=True, **kwargs):
        if not os.path.isdir(path):
            raise ValueError(f"Cannot display a file using FileLinks. Use FileLink to display '{path}'.")
        self.path, self.url_prefix, self.recursive = path, url_prefix, recursive
        self.included_suffixes = included_suffixes

    def __repr__(self):
        lines = []
        for root, dirs, files in os.walk(self.path):
            lines.append(f"{root}/")
            lines.extend(f"  {name}" for name in sorted(files)
                         if not self.included_suffixes or os.path.splitext(name)[1] in self.included_suffixes)
            if not self.recursive:
                break
        return "\n".join(lines)


class ProgressBar:
    def __init__(self, total):
        self.total, self._progress = total, 0

    @property
    def progress(self):
        return self._progress

    @progress.setter
    def progress(self, value):
        self._progress = value

    def __iter__(self):
        for self._progress in range(self.total):
            yield self._progress

    def __repr__(self):
        return f"[{self._progress}/{self.total}]"


class Audio(DisplayObject):
    _read_flags = "rb"

    def __init__(self, data=None, filename=None, url=None, embed=None, rate=None, autoplay=False,
                 normalize=True, *, element_id=None):
        self.embed, self.rate = embed, rate
        super().__init__(data=data, url=url, filename=filename)

    def reload(self):
        if self.filename is not None:
            super().reload()

    def __repr__(self):
        return "<IPython.lib.display.Audio object: audio is not played here>"


class Video(DisplayObject):
    def reload(self):
        pass

    def __repr__(self):
        return "<IPython.core.display.Video object: video is not played here>"


for _cls in (DisplayObject, TextDisplayObject, Pretty, HTML, Markdown, Math, Latex, SVG, JSON,
             Javascript, Image, Video, ProgressBar):
    _cls.__module__ = "IPython.core.display"
for _cls in (Code, IFrame, YouTubeVideo, FileLink, FileLinks, Audio):
    _cls.__module__ = "IPython.lib.display"


def display_raw(mime):
    def show(*objs, raw=False, metadata=None):
        for obj in objs:
            if raw:
                _display.publish({mime: obj})
            else:
                _display.display(obj)

    show.__name__ = "display_" + mime.split("/")[1].split("+")[0]
    return show


def publish_display_data(data, metadata=None, source=None, *, transient=None, **kwargs):
    _display.publish(dict(data))


def set_matplotlib_formats(*formats, **kwargs):
    """Figures in these formats: 'retina' draws them at twice their resolution; they come
    back as PNG whatever is asked."""
    _display.set_figure_formats(formats)


def inline_backend_module():
    """matplotlib_inline.backend_inline, as far as notebooks call it (figures come back
    as PNG images, at twice the resolution for 'retina')."""
    def accepted(*args, **kwargs):
        return None

    return {"set_matplotlib_formats": set_matplotlib_formats, "set_matplotlib_close": accepted,
            "configure_inline_support": accepted, "flush_figures": accepted}


# ---- IPython.core.magic -----------------------------------------------------------------

class Magics:
    """A class whose methods are magics (decorate it with @magics_class)."""

    magics = {"line": {}, "cell": {}}

    def __init__(self, shell=None, **kwargs):
        self.shell = shell


def _marker(kind):
    def decorator(arg=None):
        def mark(fn, name=None):
            fn._sandbox_magic_kind = (kind, name or fn.__name__)
            return fn

        if callable(arg):
            return mark(arg)
        return lambda fn: mark(fn, arg)

    return decorator


line_magic, cell_magic, line_cell_magic = _marker("line"), _marker("cell"), _marker("line_cell")


def magics_class(cls):
    """Collects the methods marked @line_magic / @cell_magic into cls.magics."""
    found = {"line": {}, "cell": {}}
    for attr, fn in vars(cls).items():
        kind, name = getattr(fn, "_sandbox_magic_kind", (None, None))
        for each in (("line", "cell") if kind == "line_cell" else (kind,) if kind else ()):
            found[each][name] = attr
    cls.magics = found
    return cls


def _registrar(kind):
    def register(arg=None):
        from _sandbox_shell import shell

        def add(fn, name=None):
            shell().register_magic_function(fn, kind, name or fn.__name__)
            return fn

        if callable(arg):
            return add(arg)
        return lambda fn: add(fn, arg)

    return register


register_line_magic, register_cell_magic = _registrar("line"), _registrar("cell")
register_line_cell_magic = _registrar("line_cell")


def needs_local_scope(fn):
    fn.needs_local_scope = True
    return fn


def no_var_expand(fn):
    fn._sandbox_no_var_expand = True
    return fn


def output_can_be_silenced(fn):
    return fn


# ---- the modules ------------------------------------------------------------------------

def get_ipython():
    """The sandbox's IPython-like shell."""
    from _sandbox_shell import shell

    return shell()


DISPLAY_NAMES = ("DisplayObject", "TextDisplayObject", "Pretty", "HTML", "Markdown", "Math", "Latex",
                 "SVG", "JSON", "Javascript", "Image", "Code", "IFrame", "YouTubeVideo", "FileLink",
                 "FileLinks", "ProgressBar", "Audio", "Video", "publish_display_data",
                 "set_matplotlib_formats")


def fill(module):
    """Fills the stand-in module the driver made for `module.__name__`."""
    name = module.__name__
    builder = BUILDERS.get(name)
    if builder is None and name.startswith("matplotlib_inline"):
        raise ModuleNotFoundError(
            f"No module named {name!r}: the sandbox's matplotlib_inline is a stand-in with "
            "backend_inline.set_matplotlib_formats (figures come back as PNG)", name=name)
    if builder is None:
        raise ModuleNotFoundError(
            f"No module named {name!r}: the sandbox's IPython is a stand-in that has "
            "IPython.display, IPython.core.magic (and .magic_arguments), IPython.lib.pretty, "
            "IPython.utils.capture (and .io), IPython.core.debugger.set_trace "
            "and get_ipython()", name=name)
    module.__dict__.update(builder())
    if name == "IPython":
        import importlib

        importlib.import_module("IPython.display")  # `import IPython` gives IPython.display too


def functions():
    return {"display": _display.display, "clear_output": _display.clear_output,
            "update_display": _display.update_display, "DisplayHandle": _display.DisplayHandle}


def display_module():
    names = {n: globals()[n] for n in DISPLAY_NAMES}
    names.update(functions())
    for mime in ("text/plain", "text/html", "text/markdown", "image/svg+xml", "image/png",
                 "image/jpeg", "text/latex", "application/json", "application/javascript"):
        show = display_raw(mime)
        names[show.__name__] = show
    names["display_pretty"] = names.pop("display_plain")
    return names


def top_module():
    import _sandbox_shell

    class Application:
        """IPython.Application.instance().kernel, for code that restarts the kernel."""

        @classmethod
        def instance(cls, *args, **kwargs):
            app = cls()
            app.kernel, app.shell = _sandbox_shell.shell().kernel, _sandbox_shell.shell()
            return app

    return {"get_ipython": get_ipython, "version_info": VERSION, "__version__": "8.30.0",
            "InteractiveShell": _sandbox_shell.SandboxShell, "Application": Application,
            "embed": _refuse("IPython.embed()"), "start_ipython": _refuse("IPython.start_ipython()")}


def _refuse(what):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{what} needs a terminal; this sandbox runs cells, and is already IPython-like")

    return refuse


def shell_module():
    import _sandbox_shell

    shell_class = _sandbox_shell.SandboxShell
    shell_class.instance = classmethod(lambda cls, *a, **k: _sandbox_shell.shell())
    shell_class.initialized = classmethod(lambda cls: True)
    return {"InteractiveShell": shell_class, "get_ipython": get_ipython}


def magic_module():
    import _sandbox_shell

    return {"Magics": Magics, "magics_class": magics_class, "line_magic": line_magic,
            "cell_magic": cell_magic, "line_cell_magic": line_cell_magic,
            "register_line_magic": register_line_magic, "register_cell_magic": register_cell_magic,
            "register_line_cell_magic": register_line_cell_magic, "needs_local_scope": needs_local_scope,
            "no_var_expand": no_var_expand, "output_can_be_silenced": output_can_be_silenced,
            "UsageError": _sandbox_shell.UsageError}


def error_module():
    import _sandbox_shell

    class TryNext(Exception):
        pass

    return {"UsageError": _sandbox_shell.UsageError, "TryNext": TryNext}


def debugger_module():
    """IPython.core.debugger: its set_trace() says there is no debugger, as breakpoint()
    does here (see notebook.py), and the code goes on."""
    import pdb
    import sys

    class Pdb(pdb.Pdb):
        def set_trace(self, frame=None):
            sys.breakpointhook()

    def set_trace(frame=None):
        sys.breakpointhook()

    return {"Pdb": Pdb, "set_trace": set_trace}


def magic_arguments_module():
    """IPython.core.magic_arguments: argparse options for magics of one's own, declared
    with decorators (@magic_arguments() above @argument(...) lines, read top to bottom)
    and parsed with parse_argstring(magic, line); a bad line raises UsageError."""
    import argparse
    import shlex

    import _sandbox_shell

    class MagicArgumentParser(argparse.ArgumentParser):
        def __init__(self, prog=None, **kwargs):
            kwargs.setdefault("add_help", False)
            super().__init__(prog=prog, **kwargs)

        def error(self, message):
            raise _sandbox_shell.UsageError(message)

        def parse_argstring(self, argstring):
            return self.parse_args(shlex.split(argstring))

    def declared(func):
        if not getattr(func, "has_arguments", False):
            func.has_arguments, func.decorators = True, []
        return func

    def magic_name(func):
        name = func.__name__.removeprefix("magic_")
        return getattr(func, "argcmd_name", name)

    class ArgDecorator:
        """A decorator that adds to the magic's parser (in source order)."""

        def __call__(self, func):
            declared(func).decorators.append(self)
            return func

        def add_to_parser(self, parser, group):
            return None

    class argument(ArgDecorator):
        def __init__(self, *args, **kwds):
            self.args, self.kwds = args, kwds

        def add_to_parser(self, parser, group):
            (group or parser).add_argument(*self.args, **self.kwds)

    class argument_group(argument):
        def add_to_parser(self, parser, group):
            return parser.add_argument_group(*self.args, **self.kwds)

    class defaults(argument):
        def add_to_parser(self, parser, group):
            parser.set_defaults(*self.args, **self.kwds)

    class kwds(ArgDecorator):
        def __init__(self, **kwds):
            self.kwds = kwds

        def __call__(self, func):
            func.argcmd_kwds = self.kwds
            return func

    class magic_arguments(ArgDecorator):
        def __init__(self, name=None):
            self.name = name

        def __call__(self, func):
            declared(func)
            if self.name is not None:
                func.argcmd_name = self.name
            func.parser = construct_parser(func)
            return func

    def construct_parser(func):
        options = dict(getattr(func, "argcmd_kwds", {}))
        options.setdefault("description", func.__doc__)
        parser = MagicArgumentParser("%" + magic_name(func), **options)
        group = None
        for decorator in reversed(func.decorators):
            group = decorator.add_to_parser(parser, group) or group
        func.__doc__ = parser.format_help()
        return parser

    def parse_argstring(magic_func, argstring):
        return magic_func.parser.parse_argstring(argstring)

    return {"MagicArgumentParser": MagicArgumentParser, "ArgDecorator": ArgDecorator,
            "argument": argument, "argument_group": argument_group, "defaults": defaults,
            "kwds": kwds, "magic_arguments": magic_arguments, "construct_parser": construct_parser,
            "parse_argstring": parse_argstring, "real_name": magic_name}


def capture_module():
    return {"capture_output": _display.capture_output, "CapturedIO": _display.CapturedIO,
            "RichOutput": _display.RichOutput}


def pretty_module():
    """IPython.lib.pretty: the printer a notebook shows values with."""
    import _sandbox_pretty

    def pretty(obj, verbose=False, max_width=79, newline="\n", max_seq_length=1000):
        printer = _sandbox_pretty.Printer(None, verbose, max_width, newline, max_seq_length)
        printer.pretty(obj)
        return printer.getvalue()

    def pprint(obj, verbose=False, max_width=79, newline="\n", max_seq_length=1000):
        print(pretty(obj, verbose, max_width, newline, max_seq_length))

    class RawText:
        """Shown as its text, as it is."""

        def __init__(self, value):
            self.value = value

        def _repr_pretty_(self, p, cycle):
            p.text(self.value)

    class RawStringLiteral:
        """A string shown with an `r` prefix."""

        def __init__(self, value):
            self.value = value

        def _repr_pretty_(self, p, cycle):
            p.text(_sandbox_pretty.raw_string(self.value))

    class CallExpression:
        """Shown as a call: `name(*args, **kwargs)`, broken over lines as one."""

        def __init__(self, name, /, *args, **kwargs):
            self.name, self.args, self.kwargs = name, args, kwargs

        @classmethod
        def factory(cls, name):
            return lambda *args, **kwargs: cls(name, *args, **kwargs)

        def _repr_pretty_(self, p, cycle):
            prefix = self.name + "("
            with p.group(len(prefix), prefix, ")"):
                items = [(None, arg) for arg in self.args] + list(self.kwargs.items())
                for index, (name, value) in enumerate(items):
                    if index:
                        p.text(",")
                        p.breakable()
                    if name is None:
                        p.pretty(value)
                    else:
                        with p.group(len(name) + 1, name + "="):
                            p.pretty(value)

    return {"pretty": pretty, "pprint": pprint, "RepresentationPrinter": _sandbox_pretty.Printer,
            "PrettyPrinter": _sandbox_pretty.Printer, "for_type": _sandbox_pretty.for_type,
            "for_type_by_name": _sandbox_pretty.for_type_by_name, "RawText": RawText,
            "CallExpression": CallExpression, "RawStringLiteral": RawStringLiteral,
            "_repr_pprint": _sandbox_pretty.repr_printer}


BUILDERS = {
    "IPython": top_module,
    "IPython.display": display_module,
    "IPython.core": dict,
    "IPython.core.display": display_module,
    "IPython.core.display_functions": functions,
    "IPython.lib": dict,
    "IPython.lib.display": display_module,
    "IPython.lib.pretty": pretty_module,
    "IPython.core.getipython": lambda: {"get_ipython": get_ipython},
    "IPython.core.interactiveshell": shell_module,
    "IPython.core.magic": magic_module,
    "IPython.core.error": error_module,
    "IPython.core.debugger": debugger_module,
    "IPython.core.magic_arguments": magic_arguments_module,
    "IPython.utils": dict,
    "IPython.utils.capture": capture_module,
    "IPython.utils.io": capture_module,
    "matplotlib_inline": dict,
    "matplotlib_inline.backend_inline": inline_backend_module,
}
