# The figures and images a cell shows, handed back with its answer: a matplotlib figure
# drawn as PNG (at twice its resolution for 'retina', downscaled to fit the image budget,
# the full-size file saved in the sandbox), an image a display() carries, each marked in
# the cell's output where it stood (`[Image 2]`); past the budget or the count, saved in
# the sandbox instead, with a note. Also the matplotlib backend MPLBACKEND names, whose
# show() hands every open figure back.

__sandbox_internal__ = True

import os
import sys

import _sandbox_api as api

# This execution's image settings (budget, count, where to save) and the images it
# produced, as the driver keeps them.
plots = api.plots


def save_file(path, data):
    """Saves a full-size figure; returns whether it worked (a full disk quota, say,
    costs the file, not the cell)."""
    directory = path.rsplit("/", 1)[0]
    try:
        os.mkdir(directory)
    except OSError:
        pass
    try:
        with open(path, "wb") as f:
            f.write(data)
        return True
    except OSError as exc:
        api.note(f"could not save {path}: {exc}")
        return False


def png_of(figure, dpi):
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def retina_dpi(figure):
    """The resolution to draw `figure` at: its own, twice that for 'retina' figures
    (%config InlineBackend.figure_format) unless that passes 4 million pixels (a
    figure that large has the detail already, and drawing it twice as fine takes
    four times the memory)."""
    dpi = figure.get_dpi()
    scale = plots.get("scale", 1)
    width, height = figure.get_size_inches()
    if scale > 1 and width * height * (dpi * scale) ** 2 <= 4_000_000:
        return dpi * scale
    return dpi


def take_figure(figure):
    """Renders a figure as PNG within the byte budget: downscaled when needed, with
    the full-size file saved in the sandbox."""
    output_arrives()
    plots["count"] += 1
    number = plots["count"]
    path = f"{plots['prefix']}-figure-{number}.png"
    dpi = retina_dpi(figure)
    try:
        data = png_of(figure, dpi)
    except MemoryError:
        if dpi == figure.get_dpi():
            raise
        dpi = figure.get_dpi()  # twice the resolution did not fit in memory
        data = png_of(figure, dpi)
    if len(plots["images"]) >= plots["max"]:
        if save_file(path, data):
            api.note(f"figure {number} not returned: at most {plots['max']} images per execution; saved as {path}")
        return
    saved = ""
    if len(data) > plots["budget"]:
        if save_file(path, data):
            saved = path
        full = len(data)
        for _ in range(6):
            dpi *= max(0.2, min(0.9, (plots["budget"] / len(data)) ** 0.5 * 0.9))
            data = png_of(figure, dpi)
            if len(data) <= plots["budget"]:
                break
        if len(data) > plots["budget"]:
            api.note(f"figure {number} is over the image budget of {plots['budget']} bytes even downscaled")
            return
        api.note(f"figure {number} was downscaled from {full} bytes to fit the image budget" + (f"; the full-size PNG is {saved}" if saved else ""))
    plots["images"].append((saved, data))
    mark_image()


def take_and_close(figure):
    """Hands a figure back once: a pyplot figure is closed, so the end of the cell
    does not hand it back again. A figure that cannot be drawn is a note."""
    try:
        take_figure(figure)
    except Exception as exc:  # noqa: BLE001 - e.g. MemoryError for a huge figure
        api.note(f"a figure could not be drawn: {type(exc).__name__}: {exc}")
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(figure)


def show_figures(*args, **kwargs):
    """Hands every open pyplot figure back and closes it."""
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    pyplot = sys.modules.get("matplotlib.pyplot")
    if helpers is None or pyplot is None:
        return
    display_module = sys.modules.get("_sandbox_display")
    for manager in helpers.Gcf.get_all_fig_managers():
        if display_module is not None and display_module.capture_figure(manager.canvas.figure):
            continue
        try:
            take_figure(manager.canvas.figure)
        except Exception as exc:  # noqa: BLE001 - a figure that cannot be drawn
            api.note(f"a figure could not be drawn: {type(exc).__name__}: {exc}")
    pyplot.close("all")


def mark_image():
    """Notes in the cell's output where an image it showed while running stands
    (`[Image 2]`, as the result lists its images), so text printed between figures
    is read with the right one; figures left open come back at the end unmarked."""
    if plots.get("during_cell") and sys.stdout is sys.__stdout__ and sys.stdout is not None:
        try:
            sys.stdout.write(f"[Image {len(plots['images'])}]\n")
        except (OSError, ValueError):
            pass


def take_image(data, mime):
    """Hands an image (PNG, JPEG, SVG bytes) back with the figures, within the
    image budget; one over it is saved in the sandbox instead."""
    output_arrives()
    plots["count"] += 1
    number = plots["count"]
    extension = {"image/png": "png", "image/jpeg": "jpg", "image/svg+xml": "svg"}.get(mime, "bin")
    path = f"{plots['prefix']}-image-{number}.{extension}"
    if len(plots["images"]) >= plots["max"] or len(data) > plots["budget"]:
        why = (f"at most {plots['max']} images per execution" if len(plots["images"]) >= plots["max"]
               else f"{len(data)} bytes, over the image budget of {plots['budget']} bytes")
        if save_file(path, data):
            api.note(f"image {number} not returned ({why}); saved as {path}")
        return
    plots["images"].append(("", data))
    mark_image()


def output_arrives():
    """The cell shows an image: a clear_output(wait=True) waiting for the cell's next
    output clears what came before it first."""
    display_module = sys.modules.get("_sandbox_display")
    if display_module is not None:
        display_module.output_arrives()


def fill_backend(module):
    """Makes `module` the matplotlib backend MPLBACKEND names (`_sandbox_plots`): Agg's
    canvas, and a show() that hands every open figure back."""
    import warnings

    from matplotlib.backend_bases import FigureManagerBase
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    class FigureManager(FigureManagerBase):
        def show(self):
            """fig.show(): the figure stays open, so it comes back as an image
            (as inline shows it), without matplotlib's warning that it cannot."""

    module.FigureCanvas = FigureCanvasAgg
    module.FigureManager = FigureManager
    module.show = show_figures
    # After matplotlib.use("Agg"), plt.show() warns that nothing can be shown;
    # here every open figure still comes back as an image.
    warnings.filterwarnings("ignore", message=r"FigureCanvas\w* is non-interactive, "
                            "and thus cannot be shown", category=UserWarning)
