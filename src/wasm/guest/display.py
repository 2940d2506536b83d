# What IPython's display machinery shows, turned into what an MCP result can carry: an
# object's representations (its _repr_*_ methods, a _repr_mimebundle_, printers code
# registered with get_ipython().display_formatter) are gathered into a MIME bundle, and
# the richest one a client can show is kept:
#
# - an image (PNG, JPEG, SVG) goes back as an image, with the figures, within the image
#   budget (a larger one is saved in the sandbox);
# - anything else is text, printed where the display happens (so it keeps its place among
#   what the code prints): the plain text, unless it only names the object
#   (`<IPython.core.display.Markdown object>`), then the markdown, HTML, LaTeX or JSON.
#
# clear_output() clears what the cell has shown so far, its printed text (the host forgets
# it) and its images; with wait=True, when the cell next shows something (the host sees
# every write), as a notebook does. %%capture keeps displays aside instead (capture_output).

__sandbox_internal__ = True

import sys

import _sandbox_api as api
import _sandbox_images as _images
import _sandbox_values as _values
import _sandbox_pretty as _pretty

IMAGES = ("image/png", "image/jpeg", "image/svg+xml")
TEXTS = ("text/markdown", "text/html", "text/latex", "application/json", "application/javascript")
REPRS = (("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"), ("image/svg+xml", "_repr_svg_"),
         ("text/markdown", "_repr_markdown_"), ("text/html", "_repr_html_"),
         ("text/latex", "_repr_latex_"), ("application/json", "_repr_json_"),
         ("application/javascript", "_repr_javascript_"))
_captures = []  # the capture_output() contexts open now, innermost last


def own_method(obj, name):
    """`obj`'s method `name` when its class defines it (never a __getattr__ answer)."""
    if isinstance(obj, type):
        return None
    for cls in type(obj).__mro__:
        if name in cls.__dict__:
            return getattr(obj, name, None)
    return None


def formatters():
    shell = sys.modules.get("_sandbox_shell")
    if shell is None or not shell._shell:
        return {}
    return shell._shell[0].display_formatter.formatters


def plain_text(obj):
    printer = formatters().get("text/plain")
    printer = printer.lookup(obj) if printer is not None else None
    if printer is not None:
        p = _pretty.Printer(leaf=registered_text)
        try:
            printer(obj, p, False)
            return p.getvalue()
        except Exception as exc:  # noqa: BLE001 - as IPython: the printer's error is shown, not the cell's
            show_format_error(exc)
            return _values.format_value(obj)
    if _pretty.own_pretty(obj) is not None:
        return _pretty.pretty(obj, registered_text)
    styler = sys.modules.get("pandas.io.formats.style")
    if styler is not None and isinstance(obj, styler.Styler):
        return _values.format_value(styled_values(obj))
    plain = formatters().get("text/plain")
    if type(obj) in CONTAINERS and plain is not None and (plain.type_printers or plain.deferred_printers):
        return _pretty.pretty(obj, registered_text)
    return own_text(obj)


def show_format_error(exc):
    """A printer's error, shown as IPython shows it (its traceback, on stderr) without
    failing the cell."""
    import traceback

    traceback.print_exception(type(exc), exc, api.user_traceback(exc.__traceback__))


def registered_text(obj):
    """The text of a value a printer registered with the display formatter shows (else
    None): IPython applies them inside containers and other printers' output too."""
    printers = formatters().get("text/plain")
    if printers is None or not printers.lookup(obj):
        return None
    return plain_text(obj)


def own_text(obj):
    """The text of a value with rich displays: its repr, or its str() when the repr says
    nothing but its class (`<class 'SimpleTable'>`, `<X object at 0x...>`) and str() does
    (statsmodels' tables, whose HTML a notebook would show)."""
    import re

    text = _values.format_value(obj)
    if re.fullmatch(r"<(class '[\w.]+'|[\w.]+( object)? at 0x[0-9a-f]+)>", text):
        try:
            mine = str(obj)
        except Exception:  # noqa: BLE001 - the repr it is
            return text
        if mine and mine != text:
            return mine
    return text


CONTAINERS = (list, tuple, dict, set, frozenset)


# A styled table this large is shown unformatted (formatting each cell costs).
STYLED_CELLS = 20_000


def styled_values(styler):
    """The Styler's table with each cell as its format() shows it (colours and other CSS
    have no text form); its plain data when it is large or the formatting fails."""
    data = styler.data
    rows, columns = data.shape
    if rows * columns > STYLED_CELLS:
        return data
    try:
        shown = data.astype(object)
        funcs = styler._display_funcs
        for i in range(rows):
            for j in range(columns):
                shown.iat[i, j] = funcs[(i, j)](data.iat[i, j])
        return shown
    except Exception:  # noqa: BLE001 - another pandas: the plain data still shows
        return data


def mime_bundle(obj):
    """Every representation of `obj`, by MIME type (text/plain always)."""
    data = {}
    bundle = own_method(obj, "_repr_mimebundle_")
    if bundle is not None:
        try:
            got = bundle(include=None, exclude=None)
        except Exception:  # noqa: BLE001 - a broken repr is skipped, as IPython does
            got = None
        if isinstance(got, tuple):
            got = got[0]
        if isinstance(got, dict):
            data.update(got)
    registered = formatters()
    for mime, name in REPRS:
        if mime in data:
            continue
        printer = registered.get(mime)
        method = printer.lookup(obj) if printer is not None else None
        method = (lambda m=method: m(obj)) if method is not None else own_method(obj, name)
        if method is None:
            continue
        try:
            value = method()
        except Exception:  # noqa: BLE001 - skipped, as IPython skips a failing repr
            continue
        if isinstance(value, tuple):
            value = value[0]
        if value is not None:
            data[mime] = value
    if "text/plain" not in data:
        data["text/plain"] = plain_text(obj)
    return data


def is_placeholder(text):
    """Whether a plain text only names its object (`<...Markdown object>`)."""
    text = text.strip()
    return text.startswith("<") and text.endswith(">") and "\n" not in text and (
        text.endswith(" object>") or " object at 0x" in text)


def as_bytes(value, mime):
    if isinstance(value, bytes):
        return value
    if mime == "image/svg+xml":
        return str(value).encode("utf-8")
    import base64

    return base64.b64decode(value)


def text_of(data):
    """The text a bundle is shown as, when it has no image."""
    plain = data.get("text/plain")
    if plain is not None and not is_placeholder(str(plain)):
        return str(plain)
    for mime in TEXTS:
        if mime in data:
            value = data[mime]
            if mime == "application/json" and not isinstance(value, str):
                import json

                return json.dumps(value, indent=2, ensure_ascii=False, default=str)
            if mime == "application/javascript":
                return "[JavaScript is not run here: the sandbox has no browser]"
            return str(value)
    return str(plain)


def keeper():
    """The innermost open %%capture that keeps displays, or None (displays are shown)."""
    return next((capture for capture in reversed(_captures) if capture.displays), None)


def publish(data, value_text=False):
    """Shows a bundle: its image goes back as an image; else its text is printed (or,
    for a cell's value, returned). Inside %%capture it is kept aside instead; inside a
    %%capture --no-display it is shown, past what the capture keeps of stdout."""
    kept_by = keeper()
    if kept_by is not None:
        kept_by.outputs.append(RichOutput(data))
        return None
    for mime in IMAGES:
        if mime in data:
            _images.take_image(as_bytes(data[mime], mime), mime)
            return str(data.get("text/plain", "")) if value_text else None
    text = text_of(data)
    if value_text:
        return text
    print(text, file=_captures[0].saved[0] if _captures else sys.stdout)
    return None


def present(obj):
    """What a cell's last value shows: its text (an image it carries goes back too)."""
    if _values.is_figure(obj):
        _images.take_and_close(obj)
        return _values.format_value(obj)
    return publish(mime_bundle(obj), value_text=True)


class DisplayHandle:
    """What display(..., display_id=True) hands back: display() and update() show again."""

    def __init__(self, display_id=None):
        import uuid

        self.display_id = display_id or uuid.uuid4().hex

    def display(self, obj, **kwargs):
        display(obj, **kwargs)

    def update(self, obj, **kwargs):
        display(obj, **kwargs)

    def __repr__(self):
        return f"<DisplayHandle display_id={self.display_id}>"


def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None,
            raw=False, clear=False, **kwargs):
    """Shows objects as a notebook's display() does: figures and images as images, the
    rest as text where the call is (raw=True: each object is a MIME bundle already)."""
    if clear:
        clear_output(wait=True)
    for obj in objs:
        if raw and isinstance(obj, dict):
            publish(obj)
        elif _values.is_figure(obj):
            if not capture_figure(obj):
                _images.take_and_close(obj)
        else:
            try:
                bundle = mime_bundle(obj)
            except Exception as exc:  # noqa: BLE001 - as IPython: shown, and the cell goes on
                show_format_error(exc)
                continue
            publish(bundle)
    if display_id:
        return DisplayHandle(None if display_id is True else display_id)
    return None


def update_display(obj, *, display_id, **kwargs):
    display(obj, **kwargs)


def clear_output(wait=False):
    """Clears what the cell has shown so far, its printed text and its images, as a
    notebook does. With wait=True the clear happens when the cell next shows something
    (anything written to stdout or stderr, an image, its value or error), so a loop that
    clears and then prints or draws ends showing its last round; if nothing comes,
    nothing is cleared. The host sees what is written, and makes a waiting clear itself."""
    kept_by = keeper()
    if kept_by is not None:
        kept_by.outputs.clear()
        return
    programs = sys.modules.get("_sandbox_python_cmd")
    if programs is not None and programs.programs_running[0]:
        # A program (!python, %%python) has no kernel: IPython then clears the
        # terminal's line, and the cell keeps its output.
        for stream in (sys.stdout, sys.stderr):
            print("\033[2K\r", end="", file=stream, flush=True)
        return
    if not wait:
        _waiting.clear()
        api.plots["images"] = []
        api.output_control("C")
    else:
        # Asked each time: text written since the last ask may have made that clear.
        _waiting[:] = [True]
        api.output_control("W", str(len(api.plots["images"])))


_waiting = []  # holds True while a clear_output(wait=True) waits for output


def output_arrives():
    """The cell shows an image: a clear_output(wait=True) waiting for output happens now
    (unless text written since made it already), and the images before it go."""
    if _waiting:
        _waiting.clear()
        api.plots["images"] = []
        api.output_control("A")


def cell_ends(shows_more):
    """At the end of a cell, a clear_output(wait=True) still waiting clears when the cell
    shows more (its value or its error), and otherwise clears nothing."""
    if shows_more:
        output_arrives()
    else:
        _waiting.clear()


FIGURE_FORMATS = ("png", "retina", "png2x", "jpg", "jpeg", "svg", "pdf")


def set_figure_formats(formats):
    """IPython's figure formats (set_matplotlib_formats, %config InlineBackend.figure_format),
    as far as an MCP client can show them: 'retina' (or 'png2x') draws figures at twice
    their resolution; 'svg', 'pdf' and 'jpeg' alone come back as PNG, which every client
    shows, and say so."""
    if isinstance(formats, str) or not hasattr(formats, "__iter__"):
        formats = [formats]
    chosen = {str(name).lower() for name in formats}
    unknown = chosen - set(FIGURE_FORMATS)
    if unknown:
        raise ValueError(f"supported formats are: {', '.join(map(repr, FIGURE_FORMATS))}, "
                         f"not {', '.join(map(repr, sorted(unknown)))}")
    api.plots["scale"] = 2 if chosen & {"retina", "png2x"} else 1
    if chosen and not chosen & {"png", "retina", "png2x"}:
        print(f"[figures come back as PNG here, which every client can show "
              f"({', '.join(sorted(chosen))} was asked)]")


class RichOutput:
    """One display kept by %%capture (IPython's RichOutput)."""

    def __init__(self, data, figure=None):
        self.data, self.metadata, self._figure = data, {}, figure

    def display(self):
        if self._figure is not None:
            _images.take_and_close(self._figure)
        else:
            publish(self.data)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.data

    def __repr__(self):
        return f"<RichOutput {sorted(self.data)}>"


class CapturedIO:
    """What %%capture keeps (IPython's CapturedIO): stdout, stderr, outputs; show()."""

    def __init__(self, stdout, stderr, outputs=None):
        self._stdout, self._stderr, self.outputs = stdout, stderr, outputs if outputs is not None else []

    @property
    def stdout(self):
        return self._stdout.getvalue() if self._stdout is not None else ""

    @property
    def stderr(self):
        return self._stderr.getvalue() if self._stderr is not None else ""

    def show(self):
        if self.stdout:
            sys.stdout.write(self.stdout)
        if self.stderr:
            sys.stderr.write(self.stderr)
        for output in self.outputs:
            output.display()

    __call__ = show

    def __str__(self):
        return self.stdout

    def __repr__(self):
        return f"<IPython.utils.capture.CapturedIO object at {id(self):#x}>"


CapturedIO.__module__ = "IPython.utils.capture"


class capture_output:
    """Keeps what runs inside it prints and displays (IPython.utils.capture)."""

    def __init__(self, stdout=True, stderr=True, display=True):
        self.stdout, self.stderr, self.displays = stdout, stderr, display

    def __enter__(self):
        import io

        self.figures_before = set(open_figures())
        self.saved = sys.stdout, sys.stderr
        out = io.StringIO() if self.stdout else None
        err = io.StringIO() if self.stderr else None
        self.outputs = []
        if out is not None:
            sys.stdout = out
        if err is not None:
            sys.stderr = err
        _captures.append(self)
        return CapturedIO(out, err, self.outputs)

    def __exit__(self, *exc):
        sys.stdout, sys.stderr = self.saved
        # Figures drawn inside and left open are kept too (a notebook would have shown
        # them at the end of the cell), not shown.
        if self.displays:
            for figure in [f for f in open_figures() if f not in self.figures_before]:
                self.outputs.append(RichOutput({"text/plain": _values.format_value(figure)}, figure=figure))
                sys.modules["matplotlib.pyplot"].close(figure)
        _captures.remove(self)


capture_output.__module__ = "IPython.utils.capture"


def open_figures():
    """The pyplot figures open now."""
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if helpers is None or "matplotlib.pyplot" not in sys.modules:
        return []
    return [manager.canvas.figure for manager in helpers.Gcf.get_all_fig_managers()]


def capture_figure(figure):
    """Keeps `figure` in the innermost %%capture that keeps displays (plt.show() inside
    one); False when there is none, and the figure is shown."""
    kept_by = keeper()
    if kept_by is None:
        return False
    kept_by.outputs.append(RichOutput({"text/plain": _values.format_value(figure)}, figure=figure))
    return True


def register_magics(shell):
    """%%html, %%markdown, %%latex, %%svg, %%javascript: the body displayed as that."""
    import _sandbox_ipython as ipython

    def cell_display(kind):
        def show(line, cell):
            display(kind(cell))

        return show

    for name, kind in (("html", ipython.HTML), ("HTML", ipython.HTML), ("markdown", ipython.Markdown),
                       ("latex", ipython.Latex), ("svg", ipython.SVG), ("SVG", ipython.SVG),
                       ("javascript", ipython.Javascript), ("js", ipython.Javascript)):
        shell.magics_manager.register_function(cell_display(kind), "cell", name)


def patch_tqdm_notebook(module):
    """tqdm.notebook's bars need ipywidgets; here they are tqdm's text bars."""
    import tqdm.std

    module.tqdm, module.trange = tqdm.std.tqdm, tqdm.std.trange
    module.tqdm_notebook, module.tnrange = tqdm.std.tqdm, tqdm.std.trange


def plotly_summary(fig):
    """What a plotly figure shows here: what it holds, and what to use for a picture."""
    if isinstance(fig, dict):  # plotly.offline.iplot hands over the figure as a dict
        try:
            from plotly import graph_objects

            fig = graph_objects.Figure(fig)
        except Exception:  # noqa: BLE001 - summarised as what it is
            pass
    layout = getattr(fig, "layout", None)
    title = getattr(getattr(layout, "title", None), "text", None)
    kinds = [getattr(trace, "type", None) or "trace" for trace in getattr(fig, "data", ())]
    counted = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) or "no traces"
    named = f" {title!r}" if title else ""
    return (f"<plotly Figure{named}: {counted}> (an interactive plotly chart cannot be "
            "drawn here: plot with matplotlib or seaborn for an image, or save it with "
            "fig.write_html('chart.html') and read it with read_file)")


def patch_plotly(pio):
    """plotly's fig.show() and a figure as a cell's value: a notebook draws an interactive
    chart (here its renderers would need nbformat, a browser or kaleido's Chromium); here
    one line says what the figure holds and what gives an image instead."""
    from plotly import basedatatypes

    def show(fig, renderer=None, validate=True, **kwargs):
        print(plotly_summary(fig))

    pio.show = show
    figure = basedatatypes.BaseFigure
    figure._repr_mimebundle_ = lambda self, include=None, exclude=None, **kwargs: {
        "text/plain": plotly_summary(self)}
    figure._repr_html_ = lambda self: None
    figure._ipython_display_ = lambda self: print(plotly_summary(self))
