# How a value reads in a notebook: pandas tables whole (wide enough not to wrap), floats
# as %precision says, everything else as IPython's pretty printer lays it out
# (guest/pretty.py); a figure, or a value with rich displays (markdown, HTML, images,
# printers the code registered), goes to guest/display.py, which picks what a client can
# show. The driver shows a cell's last value and display()'s arguments with these.

__sandbox_internal__ = True

import sys

import _sandbox_api as api
import _sandbox_images as _images
import _sandbox_pretty as _pretty


def display_module():
    """guest/display.py (imported when first needed: it imports this module)."""
    import _sandbox_display

    return _sandbox_display


def is_figure(value):
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(value, figure.Figure)


def is_table(value):
    pandas = sys.modules.get("pandas")
    tables = tuple(
        t for t in (getattr(pandas, "DataFrame", None), getattr(pandas, "Series", None)) if t
    )
    return bool(tables) and isinstance(value, tables)


# A notebook's HTML tables do not wrap: as text, a table is this wide, unless the code
# set these options itself. Rows and column widths are pandas' own settings.
TABLE_TEXT = {"display.width": 200, "display.max_columns": 40}


def format_value(value):
    """The value as a notebook shows it: pandas objects as whole text tables (wide
    enough not to wrap, long ones summarised by pandas as the code's display options
    say), a float as %precision says, lists, dicts, functions and the like as
    IPython's pretty printer lays them out, anything else by repr()."""
    if type(value) in _pretty.PLAIN and (api.float_format[0] is None or type(value) is not float):
        return repr(value)
    if is_table(value):
        pandas = sys.modules["pandas"]
        changes = [item for key, wide in TABLE_TEXT.items() if at_default(pandas, key)
                   for item in (key, wide)]
        if changes:
            with pandas.option_context(*changes):
                return repr(value)
        return repr(value)
    form = api.float_format[0]
    leaf = None if form is None else (lambda member: float_text(member, form))
    return _pretty.pretty(value, leaf)


def float_text(value, form):
    """A float as %precision's format shows it (None: anything else). IPython's printer
    for floats serves numpy's float64 too (it registers it for that class), and the
    float subclasses that show themselves no way of their own."""
    if not isinstance(value, float) or not shown_as_float(type(value)):
        return None
    try:
        return form % value
    except (TypeError, ValueError, OverflowError):
        return repr(value)  # %d of inf or nan: IPython shows repr too


def shown_as_float(kind):
    """Whether IPython's printer for floats is the one a value of class `kind` (float or
    a subclass) meets first along its MRO."""
    if kind.__module__ == "numpy" and kind.__name__ == "float64":
        return True
    for cls in kind.__mro__:
        if cls is float:
            return True
        if "_repr_pretty_" in cls.__dict__ or "__repr__" in cls.__dict__:
            return False
    return False


def at_default(pandas, key):
    """Whether pandas' option `key` has the value pandas gives it."""
    try:
        default = pandas._config.config._get_registered_option(key).defval
    except Exception:  # noqa: BLE001 - another pandas: treat it as unchanged
        return True
    return pandas.get_option(key) == default


# What IPython's display machinery would show for an object with rich reprs
# (markdown, HTML, images...): guest/display.py decides, only for such objects.
RICH_REPRS = ("_repr_mimebundle_", "_repr_pretty_", "_repr_png_", "_repr_jpeg_",
              "_repr_svg_", "_repr_markdown_", "_repr_html_", "_repr_latex_", "_repr_json_")


def is_rich(value):
    kind = type(value)
    return (not isinstance(value, type) and any(hasattr(kind, name) for name in RICH_REPRS)) \
        or has_type_printers()


def has_type_printers():
    """Whether the code registered a text printer for some type (IPython's
    display_formatter.formatters["text/plain"].for_type()), which guest/display.py
    applies."""
    shell = sys.modules.get("_sandbox_shell")
    if shell is None or not shell._shell:
        return False
    plain = shell._shell[0].display_formatter.formatters.get("text/plain")
    return plain is not None and bool(plain.type_printers or plain.deferred_printers)


def present(value):
    """The text a value is shown as; a figure, or an image a rich value carries,
    is handed back as an image too."""
    if is_figure(value):
        _images.take_and_close(value)
        return format_value(value)
    if is_rich(value) and not is_table(value):
        return display_module().present(value)
    return format_value(value)


def display(*values, **options):
    """Shows values as a notebook's display() does: figures and images as images,
    the rest as text where the call is (IPython.display's options are taken)."""
    if options or any(is_rich(v) and not is_table(v) for v in values):
        return display_module().display(*values, **options)
    for value in values:
        if is_figure(value):
            _images.take_and_close(value)
            continue
        try:
            text = format_value(value)
        except Exception as exc:  # as IPython: a printer's error is shown, the cell goes on
            display_module().show_format_error(exc)
            continue
        print(text)
