# What to do about a module that is not there, said after a ModuleNotFoundError's message
# (in place of CPython's hint about `site`, which points the wrong way here): nothing for
# a missing part of a package that is there; for a package, how it installs here (under
# its own name on the index when that differs), or that it cannot (compiled code), or
# where it exists instead (Colab, Pyodide).

__sandbox_internal__ = True


def hint(exc):
    """What to do about a module that is not there: nothing to add for a missing
    part of a package that is; for a package, how one is installed here."""
    top = (getattr(exc, "name", None) or "").partition(".")[0]
    if not top:
        return ""
    try:
        import importlib.util

        if importlib.util.find_spec(top) is not None:
            return ""
    except (ImportError, ValueError):
        pass
    full = getattr(exc, "name", None) or top
    if top == "google" and "google.colab" in failing_line(exc):
        full = "google.colab"
    if full in ELSEWHERE or top in ELSEWHERE:
        return f": {ELSEWHERE.get(full) or ELSEWHERE[top]}"
    if top in COMPILED:
        return (f": it is neither built into this runtime nor installable here: its package "
                f"({COMPILED[top]}) has compiled code, and only pure-Python packages install "
                "in the sandbox")
    package = PACKAGE_OF.get(top, top)
    return (f": it is neither built into this runtime nor installed. `%pip install {package}` "
            "(or the install_package tool) installs it if it is pure Python; a package with "
            "compiled code cannot be installed in the sandbox")


# CPython's hint when `site` was not imported, which points the wrong way here.
SITE_HINT = (". Site initialization is disabled, did you forget to add the site-packages "
             "directory to sys.path or to enable your virtual environment?")


def patch_traceback(traceback):
    """Every traceback traceback's module formats (the sandbox's own, print_exc,
    format_exc, logging's exception) says what to do about a missing module here, in
    place of CPython's hint about `site`."""
    import functools

    init = traceback.TracebackException.__init__

    @functools.wraps(init)
    def __init__(self, exc_type, exc_value, *args, **kwargs):
        init(self, exc_type, exc_value, *args, **kwargs)
        text = getattr(self, "_str", None)
        if isinstance(exc_value, ModuleNotFoundError) and isinstance(text, str) \
                and text.endswith(SITE_HINT):
            try:
                said = hint(exc_value)
            except Exception:  # noqa: BLE001 - the error is told without the hint
                said = ""
            self._str = text[:-len(SITE_HINT)] + said

    traceback.TracebackException.__init__ = __init__


def failing_line(exc):
    """The text of the line `exc` was raised on ("" when it is not known)."""
    import linecache

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb else ""


# Modules whose package is named otherwise on the index (pure Python, or may be).
PACKAGE_OF = {"dotenv": "python-dotenv", "docx": "python-docx", "pptx": "python-pptx",
              "jwt": "PyJWT", "slugify": "python-slugify", "git": "GitPython",
              "jose": "python-jose", "multipart": "python-multipart", "serial": "pyserial",
              "telegram": "python-telegram-bot", "discord": "discord.py", "sql": "jupysql",
              "attr": "attrs", "dateutil": "python-dateutil", "yaml": "PyYAML",
              "bs4": "beautifulsoup4", "PIL": "pillow", "sklearn": "scikit-learn",
              "magic": "python-magic", "Levenshtein": "python-Levenshtein",
              "fuzzywuzzy": "fuzzywuzzy", "googleapiclient": "google-api-python-client"}


# Modules whose package has compiled code (it cannot be installed here).
COMPILED = {"cv2": "opencv-python", "skimage": "scikit-image", "torch": "torch",
            "tensorflow": "tensorflow", "fitz": "PyMuPDF", "Crypto": "pycryptodome",
            "psycopg2": "psycopg2", "xgboost": "xgboost", "lightgbm": "lightgbm",
            "catboost": "catboost", "jax": "jax", "pyarrow": "pyarrow",
            "polars": "polars", "numba": "numba", "shapely": "shapely",
            "orjson": "orjson", "pydantic_core": "pydantic-core"}


# Modules that exist only in another environment.
ELSEWHERE = {"google.colab": "google.colab exists only in Google Colab's notebooks; files "
             "can be read and written here with open() or the read_file/write_file tools",
             "js": "js and pyodide exist only in Pyodide, in a browser",
             "pyodide": "js and pyodide exist only in Pyodide, in a browser"}
