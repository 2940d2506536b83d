# numpy cannot see floating-point errors here: WebAssembly has no floating-point exception
# flags, so `np.seterr(all="raise")` or `with np.errstate(divide="raise"):` never raises,
# and nothing warns (`np.log(0)` is `-inf` without numpy's RuntimeWarning). When the
# code itself asks for errors to raise (or to be printed, logged or passed to a call), one
# line says so, once, and what to check instead; numpy's own settings are kept as asked.

__sandbox_internal__ = True

import sys

# The handlings that would make an error visible (numpy's default, 'warn', is left out:
# code that puts the defaults back is not told).
VISIBLE = ("raise", "call", "print", "log")

NOTICE = ("[numpy cannot see floating-point errors in this sandbox (WebAssembly has no "
          "floating-point flags): {asked} will neither raise nor warn; check results with "
          "np.isfinite() or np.isnan() instead]\n")

_told = []


def tell(settings, depth):
    """The notice, once, when the code (not a library) asks for visible handling."""
    if _told:
        return
    asked = {name: mode for name, mode in settings.items()
             if isinstance(mode, str) and mode in VISIBLE}
    if not asked or sys._getframe(depth + 1).f_globals.get("__name__") != "__main__":
        return
    _told.append(True)
    said = ", ".join(f"{name}={mode!r}" for name, mode in asked.items())
    try:
        sys.stderr.write(NOTICE.format(asked=said))
    except Exception:  # noqa: BLE001 - a stderr the code replaced: the notice is skipped
        pass


def patch_numpy(numpy):
    """numpy.seterr and numpy.errstate tell the notice; they work as before (errstate
    stays numpy's own class: only its __init__ is wrapped)."""
    import functools

    seterr = numpy.seterr

    @functools.wraps(seterr)
    def told_seterr(*args, **kwargs):
        tell({**dict(zip(("all", "divide", "over", "under", "invalid"), args)), **kwargs}, 1)
        return seterr(*args, **kwargs)

    init = numpy.errstate.__init__

    @functools.wraps(init)
    def told_init(self, *args, **kwargs):
        tell(kwargs, 1)
        init(self, *args, **kwargs)

    try:
        numpy.errstate.__init__ = told_init
    except TypeError:  # a numpy whose errstate is a compiled type: no notice for it
        pass
    numpy.seterr = told_seterr
