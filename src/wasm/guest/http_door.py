# HTTP through the host's door. No sockets here: a request goes to the host as an
# `http_request` call of the tool protocol (src/door/), which checks it against the
# server's allowed hosts and networks, does TLS itself, and answers with the response
# (its body raw after the answer's JSON). urllib.request is routed here as it is imported
# (so pandas.read_csv(url) and friends follow); guest/http_clients.py routes urllib3,
# requests, httpx and aiohttp through the same `fetch`, so every client meets the same
# allowlist, limits, usage records and refusals.

__sandbox_internal__ = True

import binascii
import io
import json

try:
    import _host
except ImportError:  # a runtime with no door (python-3.12)
    _host = None

# The transport's own headers: the host sets them, whatever a client put in.
SET_BY_HOST = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
    "te", "trailer", "expect", "proxy-authorization", "proxy-authenticate", "proxy-connection",
})
# Headers of the host's response that describe its own transport, not the body handed
# over (which is whole, not chunked).
HOST_TRANSPORT = frozenset({"transfer-encoding", "connection", "keep-alive"})
# Most bytes of a request body: the frame carrying it (base64 in JSON) is at most 1 MiB.
MAX_BODY_BYTES = 760 * 1024
NO_NETWORK = (
    "this sandbox's runtime has no network: {url} cannot be fetched; create the sandbox with "
    "runtime 'scientific' (the server allows hosts with SANDBOX_ALLOW_HOSTS)"
)


class DoorFailure(Exception):
    """A call through the door failed; `kind` is the protocol's name for why."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class NoDoor(DoorFailure):
    """The runtime has no door to the host."""

    def __init__(self, url):
        super().__init__("no_door", NO_NETWORK.format(url=url))


def named(cls, module):
    """`cls`, defined inside the function that patches `module`, named as if `module`
    defined it: a traceback then says `module.Name`, not the patching function's locals."""
    cls.__module__ = module
    cls.__qualname__ = cls.__name__
    return cls


_frame_ids = [0]


def call(tool, args):
    """Calls `tool` through the door: its value, and the raw bytes after the answer's
    JSON (empty unless the tool sends some). Raises DoorFailure."""
    if _host is None:
        raise NoDoor(args.get("url", tool))
    _frame_ids[0] += 1
    frame = {"v": 1, "id": _frame_ids[0], "op": "call", "tool": tool, "args": args}
    try:
        answer = _host.call(json.dumps(frame).encode())
    except ConnectionRefusedError:
        raise DoorFailure("closed", "the door to the host is closed") from None
    # No JSON string holds a raw newline: what follows the first one is the raw body
    # (a megabyte is not decoded as JSON and base64 here).
    head, _, raw = answer.partition(b"\n")
    answer = json.loads(head)
    if not answer.get("ok"):
        error = answer.get("error") or {}
        raise DoorFailure(error.get("kind", "tool_error"), error.get("message", ""))
    return answer.get("value"), raw


class Fetched:
    """A response the host fetched: status, reason, final URL, headers as (name, value)
    pairs in order (repeated names kept), and the whole body; or, when the answer broke
    off before its body ended, what came, and `broken` says so (else None)."""

    __slots__ = ("status", "reason", "url", "headers", "body", "broken", "closes")

    def __init__(self, status, reason, url, headers, body, broken=None, closes=False):
        self.status, self.reason, self.url, self.headers, self.body = status, reason, url, headers, body
        self.broken = broken
        self.closes = closes  # the server said it closes the connection after this answer

    def declared_length(self):
        """The body's length as the headers give it (one whole number), else None."""
        values = [value for name, value in self.headers if name.lower() == "content-length"]
        if len(values) == 1 and values[0].strip().isdigit():
            return int(values[0])
        return None


def body_bytes(data):
    """A request body as bytes: bytes, str, a file, or an iterable of chunks."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    if hasattr(data, "read"):
        data = data.read()
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return b"".join(c.encode("utf-8") if isinstance(c, str) else bytes(c) for c in data)


def header_text(value):
    """A header name or value as text (bytes as HTTP reads them, latin-1). Text that
    cannot be encoded (a lone surrogate) raises UnicodeEncodeError here, as a client's
    own encoding of it would."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("latin-1")
    text = str(value)
    text.encode("utf-8")
    return text


def fetch(method, url, headers=(), body=None, timeout=None, follow_redirects=True):
    """One request through the door. `headers`: (name, value) pairs; the transport's
    own are left to the host. `follow_redirects`: whether the host follows them (a client
    that follows redirects itself asks for the 3xx). Raises DoorFailure: kind `denied`
    when a rule refused it (the message names the rule), `timeout`, `too_large`..."""
    args = {
        "url": url,
        "method": method,
        "headers": [[header_text(k), header_text(v)] for k, v in headers
                    if header_text(k).lower() not in SET_BY_HOST],
        "raw_body": True,
    }
    data = body_bytes(body)
    if data is not None:
        if len(data) > MAX_BODY_BYTES:
            raise DoorFailure(
                "too_large",
                f"the request body is {len(data)} bytes; a request through the door carries at "
                f"most {MAX_BODY_BYTES} bytes (about 760 KiB)",
            )
        args["body"] = {"$bytes": binascii.b2a_base64(data, newline=False).decode()}
    if not follow_redirects:
        args["follow_redirects"] = False
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        args["timeout_seconds"] = float(timeout)
    value, raw = call("http_request", args)
    if len(raw) != value.get("body_bytes"):
        raise DoorFailure("tool_error", "the door's answer was cut short")
    headers = [(name, text) for name, text in value["headers"] if name.lower() not in HOST_TRANSPORT]
    closes = any(name.lower() == "connection" and "close" in text.lower() for name, text in value["headers"])
    return Fetched(value["status"], value["reason"], value["url"], headers, raw, value.get("broken"), closes)


def incomplete(data, promised, at):
    """http.client's IncompleteRead for a body that broke off: what the read got, and what
    its headers promised beyond `at` (None: chunked, no length promised)."""
    import http.client

    return http.client.IncompleteRead(data, None if promised is None else max(promised - at, 0))


# ---- urllib.request -------------------------------------------------------------------------

def patch_urllib(request_module):
    """Routes urllib.request's http and https through the door; on a runtime with no
    door, says so instead of failing on a missing socket."""
    import http.client
    import urllib.error

    class NetworkRefused(urllib.error.URLError):
        """The sandbox's network rules refused the request; the message names the rule."""

    urllib.error.NetworkRefused = named(NetworkRefused, "urllib.error")

    def door_open(self, http_class, req, **kwargs):
        headers = dict(req.unredirected_hdrs)
        headers.update({k: v for k, v in req.headers.items() if k not in headers})
        try:
            got = fetch(req.get_method(), req.full_url, headers.items(), req.data, req.timeout)
        except DoorFailure as failure:
            if failure.kind == "denied":
                raise NetworkRefused(str(failure)) from None
            if failure.kind == "timeout":
                raise TimeoutError(str(failure)) from None
            if failure.kind in ("no_door", "closed"):
                raise urllib.error.URLError(str(failure)) from None
            raise urllib.error.URLError(f"{failure} ({failure.kind})") from None
        message = http.client.HTTPMessage()
        for name, text in got.headers:
            message.set_raw(name, text)  # as message[name] = text stores it (compat32)
        return DoorResponse(got, message)

    request_module.AbstractHTTPHandler.do_open = door_open
    http.client.HTTPResponse.register(DoorResponse)
    if not hasattr(request_module, "HTTPSHandler"):

        class HTTPSHandler(request_module.AbstractHTTPHandler):
            def https_open(self, req):
                return self.do_open(None, req)

            https_request = request_module.AbstractHTTPHandler.do_request_

        request_module.HTTPSHandler = HTTPSHandler
        request_module.install_opener(request_module.build_opener(HTTPSHandler))


class DoorResponse(io.BytesIO):
    """A response the host fetched, its body in memory, with the interface urllib's HTTP
    responses have (status, reason, headers, info(), geturl(), getheader(), length,
    isclosed(), peek()...), read as http.client reads one: reading a closed response
    gives nothing, it cannot seek, and a body that broke off raises IncompleteRead where
    http.client does. A BytesIO underneath: read() hands back the body without a copy,
    and no file wrapper warns when it is left unclosed. isinstance() takes it for an
    http.client.HTTPResponse (registered as one)."""

    version = 11
    will_close = True  # urllib asks for "Connection: close"
    debuglevel = 0

    def __init__(self, fetched, headers):
        super().__init__(fetched.body)
        self.headers, self.url, self.status, self.reason = headers, fetched.url, fetched.status, fetched.reason
        self.msg = fetched.reason  # what urllib leaves in .msg of an HTTP response
        self.size, self.ended = len(fetched.body), False
        self.sized = headers.get("Content-Length") is not None
        self.broken = fetched.broken is not None
        # A body that broke off: the length its headers promised (None: chunked).
        self.promised = fetched.declared_length() if self.broken else None

    def read(self, size=-1):
        """The body; of one that broke off, a read of all of it (or, chunked, any read
        it cannot fill) raises IncompleteRead with what came."""
        if self.closed:
            return b""
        data = super().read(size)
        at = io.BytesIO.tell(self)
        if self.broken and (size is None or size < 0 or (self.promised is None and len(data) < size)):
            raise incomplete(data, self.promised, at)
        self.ended = self.ended or (not self.broken and at >= self.size) or (self.broken and not data and size != 0)
        return data

    def read1(self, size=-1):
        """As read(), in one piece; of a chunked body that broke off, a read at its end
        raises IncompleteRead (a text wrapper reads lines with it)."""
        if self.closed:
            return b""
        data = super().read1(size)
        self.note_end(bool(data) or size == 0)
        return data

    def readinto(self, buffer):
        if self.closed:
            return 0
        n = super().readinto(buffer)
        self.note_end(n > 0 or len(buffer) == 0)
        return n

    def note_end(self, got_some):
        """After a read that found the end (nothing more) or not: a body that broke off
        is then done, and a chunked one raises IncompleteRead, as http.client's does."""
        if got_some or not self.broken:
            return
        self.ended = True
        if self.promised is None:
            raise incomplete(b"", None, 0)

    def readline(self, size=-1):
        if self.closed:
            return b""
        line = super().readline(size)
        self.ended = self.ended or (self.broken and not line and size != 0)
        return line

    def readable(self):
        return True

    @property
    def code(self):
        return self.status

    @property
    def length(self):
        """Bytes of the body not read yet, or None when the server gave no length."""
        if not self.sized:
            return None
        total = self.size if self.promised is None else self.promised
        return 0 if self.closed else total - io.BytesIO.tell(self)

    def isclosed(self):
        """Whether the body has been read to its end (or closed), as http.client says: an
        empty one only once read."""
        if self.closed or self.ended:
            return True
        return not self.broken and self.size > 0 and io.BytesIO.tell(self) >= self.size

    def peek(self, n=0):
        """Bytes ahead, left to be read."""
        if self.closed:
            return b""
        at = io.BytesIO.tell(self)
        ahead = super().read(n if n > 0 else 8192)
        io.BytesIO.seek(self, at)
        return ahead

    def seekable(self):
        return False

    def seek(self, *args):
        raise io.UnsupportedOperation("seek")

    def tell(self):
        raise io.UnsupportedOperation("seek")  # as io's tell(), which seeks

    def writable(self):
        return False

    def write(self, data):
        raise io.UnsupportedOperation("write")

    def info(self):
        return self.headers

    def geturl(self):
        return self.url

    def getcode(self):
        return self.status

    def getheader(self, name, default=None):
        return self.headers.get(name, default)

    def getheaders(self):
        return list(self.headers.items())

    def __repr__(self):
        return f"<http response {self.status} from {self.url}>"
