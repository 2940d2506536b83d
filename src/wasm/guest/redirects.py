# The redirections a shell reads at the end of a command line, for the pip and python
# lines the sandbox runs itself (`!pip freeze > requirements.txt`,
# `!pip install -q x > /dev/null 2>&1`, `%pip install x 2>/dev/null`): `>`, `>>`, `1>`,
# `2>`, `2>>`, `&>`, `&>>` to a path (quoted or not), `2>&1` and `1>&2`, each after a space
# (so `pip install x>=1` keeps its version), applied left to right as a shell applies
# them. /dev/null (which the sandbox's files do not have) takes what is sent to it and
# keeps nothing.

__sandbox_internal__ = True

import io
import re
import sys

# One redirection closing a command line.
TRAILING = re.compile(
    r"^(?P<rest>.*\S)\s+(?P<redirect>2>&1|1?>&2|(?:[12&]?>>?)\s*"
    r"(?:\"[^\"]*\"|'[^']*'|[^\s<>|&;'\"]+))\s*$")
TARGET = re.compile(r"^(?P<fd>[12&]?)(?P<op>>>?)\s*(?P<path>.+)$")


class Nowhere(io.RawIOBase):
    """Bytes written to /dev/null."""

    def writable(self):
        return True

    def write(self, data):
        return len(data)


def discard():
    """What /dev/null is here: a text stream, as a file is, that keeps nothing."""
    return io.TextIOWrapper(io.BufferedWriter(Nowhere()), encoding="utf-8", write_through=True)


def is_null(path):
    """Whether `path` names /dev/null (`//dev/null`, `/dev/../dev/null` too)."""
    import posixpath

    return posixpath.normpath("/" + path.lstrip("/")) == "/dev/null"


def split(cmd):
    """(the command line without its closing redirections, the redirections in order)."""
    redirects = []
    while (match := TRAILING.match(cmd)) is not None:
        redirects.insert(0, match["redirect"])
        cmd = match["rest"]
    return cmd, redirects


class Streams:
    """The streams a command's output and errors go to once `redirects` are applied to
    `stdout` and `stderr` (None: the cell's own); opens the files, and closes them on
    exit. An OSError names the file that cannot be opened."""

    def __init__(self, redirects, stdout=None, stderr=None):
        self.redirects, self.stdout, self.stderr, self.files = redirects, stdout, stderr, []

    def __enter__(self):
        try:
            for redirect in self.redirects:
                self.apply(redirect)
        except BaseException:
            self.close()
            raise
        return self

    def apply(self, redirect):
        if redirect == "2>&1":
            self.stderr = self.stdout if self.stdout is not None else sys.stdout
            return
        if redirect.endswith(">&2"):
            self.stdout = self.stderr if self.stderr is not None else sys.stderr
            return
        target = TARGET.match(redirect)
        path = target["path"]
        if len(path) > 1 and path[0] == path[-1] and path[0] in "'\"":
            path = path[1:-1]
        stream = self.open(path, "a" if target["op"] == ">>" else "w")
        if target["fd"] in ("", "1", "&"):
            self.stdout = stream
        if target["fd"] in ("2", "&"):
            self.stderr = stream

    def open(self, path, mode):
        if is_null(path):
            stream = discard()
            self.files.append(stream)
            return stream
        try:
            stream = open(path, mode, encoding="utf-8")
        except OSError as error:
            raise OSError(f"{path}: {error.strerror or error}") from None
        self.files.append(stream)
        return stream

    def close(self):
        for stream in self.files:
            stream.close()

    def __exit__(self, *exc):
        self.close()
