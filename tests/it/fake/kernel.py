"""A stand-in for E2B's Jupyter kernel, used by the tests' fake of E2B.

Reads one JSON request per line on stdin ({"code": ...}) and answers with
JSON lines on stdout in the shape of the code interpreter's /execute stream
(stdout, stderr, result, error), ending each execution with {"type": "done"}.
State persists between executions; a final expression's repr is the main
result (with one pair of quotes stripped, as the real bridge does); SIGINT
interrupts the running code with KeyboardInterrupt; show_png() displays a
tiny PNG as a non-main result (with a JPEG of it too when asked),
show_image(size) an image of that many bytes, show_svg() a figure in SVG
only, and show_html() HTML and markdown objects.

The code sees the fake VM's directory (FAKE_VM_ROOT) as `/`, as code in an
E2B VM sees the VM's own root: absolute paths given to open(), io.open() and
the os functions that take a path are read under it, os.getcwd() answers in
its terms, and the kernel starts in /home/user, as E2B's does.
"""

import ast
import base64
import builtins
import datetime
import io
import json
import os
import signal
import sys
import traceback

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

SVG = '<svg width="4" height="4"><rect width="4" height="4"/></svg>'

VM_ROOT = os.path.realpath(os.environ["FAKE_VM_ROOT"])


def _host(path):
    """The host path for a path as the code names it."""
    if isinstance(path, int):
        return path
    text = os.fsdecode(path)
    if not text.startswith("/"):
        return path
    rest = os.path.normpath(text).lstrip("/")
    return os.path.join(VM_ROOT, rest) if rest else VM_ROOT


def _in_vm(function):
    def wrapped(*args, **kwargs):
        if args:
            args = (_host(args[0]),) + args[1:]
        return function(*args, **kwargs)
    return wrapped


def _vm_cwd():
    cwd = _os_getcwd()
    if cwd == VM_ROOT:
        return "/"
    return cwd[len(VM_ROOT):] if cwd.startswith(VM_ROOT + "/") else cwd


_os_getcwd = os.getcwd
builtins.open = _in_vm(open)
io.open = builtins.open
for _name in ("stat", "lstat", "listdir", "scandir", "mkdir", "rmdir", "remove",
              "unlink", "chdir", "access"):
    setattr(os, _name, _in_vm(getattr(os, _name)))
os.getcwd = _vm_cwd

_protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
_requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)


def emit(obj):
    _protocol.write(json.dumps(obj) + "\n")
    _protocol.flush()


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class Stream(io.TextIOBase):
    def __init__(self, name):
        self._name = name

    def write(self, text):
        if text:
            emit({"type": self._name, "text": text, "timestamp": now()})
        return len(text)

    def flush(self):
        pass

    def writable(self):
        return True


def show_png(jpeg=False):
    """Displays a tiny figure, as a PNG (and also as a JPEG when asked, as a
    figure rendered in both formats comes)."""
    result = {"type": "result", "png": PNG, "text": "<Figure size 640x480 with 1 Axes>",
              "extra": {}, "is_main_result": False}
    if jpeg:
        result["jpeg"] = PNG
    emit(result)


def show_image(size):
    """Displays an image of `size` bytes (base64 in the stream)."""
    data = base64.b64encode(b"\x89PNG" + bytes(max(0, size - 4))).decode()
    emit({"type": "result", "png": data, "text": f"<image of {size} bytes>",
          "extra": {}, "is_main_result": False})


def show_svg():
    """Displays a figure drawn as SVG only."""
    emit({"type": "result", "svg": SVG, "text": "<IPython.core.display.SVG object>",
          "extra": {}, "is_main_result": False})


def show_html(main=False):
    """Displays HTML (and markdown), as IPython's HTML and Markdown objects
    come: plain text that only names the object."""
    emit({"type": "result", "html": "<b>bold</b>", "text": "<IPython.core.display.HTML object>",
          "extra": {}, "is_main_result": main})
    emit({"type": "result", "markdown": "**bold**",
          "text": "<IPython.core.display.Markdown object>", "extra": {}, "is_main_result": False})


def strip_quotes(text):
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


# SIGINT interrupts the code even when the test runner was started with SIGINT
# ignored (as a background job of a non-interactive shell is), a disposition
# python3 would otherwise inherit and keep.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.stdout = Stream("stdout")
sys.stderr = Stream("stderr")
sys.stdin = io.StringIO("")
namespace = {"__name__": "__main__", "show_png": show_png, "show_image": show_image,
             "show_svg": show_svg, "show_html": show_html}

while True:
    try:
        line = _requests.readline()
    except KeyboardInterrupt:
        continue
    if not line:
        break
    try:
        code = json.loads(line)["code"]
        tree = ast.parse(code, "<cell>")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), namespace)
            if value is not None:
                emit({"type": "result", "text": strip_quotes(repr(value)), "extra": {},
                      "is_main_result": True})
    except BaseException as e:  # noqa: BLE001 - user code may raise anything
        try:
            emit({"type": "error", "name": type(e).__name__, "value": str(e),
                  "traceback": "".join(traceback.format_exception(e))})
        except KeyboardInterrupt:
            pass
    try:
        emit({"type": "done"})
    except KeyboardInterrupt:
        emit({"type": "done"})
