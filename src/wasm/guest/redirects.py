# The redirections a shell reads at the end of a command line, for the pip and python
# lines the sandbox runs itself (`!pip freeze > requirements.txt`,
# `!pip install -q x > /dev/null 2>&1`, `%pip install x 2>/dev/null`): `>`, `>>`, `1>`,
# `2>`, `2>>`, `&>`, `&>>` to a path, and `2>&1`, each after a space (so `pip install
# x>=1` keeps its version), applied left to right as a shell applies them. /dev/null (which
# the sandbox's files do not have) takes what is sent to it and keeps nothing.

__sandbox_internal__ = True

import re
import sys

# One redirection closing a command line.
TRAILING = re.compile(
    r"^(?P<rest>.*\S)\s+(?P<redirect>2>&1|(?:[12&]?>>?)\s*[^\s<>|&;'\"]+)\s*$")
TARGET = re.compile(r"^(?P<fd>[12&]?)(?P<op>>>?)\s*(?P<path>.+)$")

NULL = "/dev/null"


class Discard:
    """What /dev/null is here: a stream that keeps nothing."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


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
        target = TARGET.match(redirect)
        stream = self.open(target["path"], "a" if target["op"] == ">>" else "w")
        if target["fd"] in ("", "1", "&"):
            self.stdout = stream
        if target["fd"] in ("2", "&"):
            self.stderr = stream

    def open(self, path, mode):
        if path == NULL:
            return Discard()
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
