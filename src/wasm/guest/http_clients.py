# The HTTP clients people use, through the host's door (guest/http_door.py's `fetch`),
# patched as each is imported, on the model of pyodide-http and of urllib3's own
# emscripten support (which replaces its connection classes): the library keeps its own
# logic (redirects, retries, cookies, decoding, timeouts as it reads them) and only the
# wire is the host's. The host follows no redirect for them (each hop comes back to the
# library, which follows it through the door again, every hop checked by the host).
#
# - urllib3 (and so requests): connection classes whose getresponse() asks the door;
# - requests: a request urllib3 could not change goes straight to the door (no pool); a
#   refusal raises requests.exceptions.NetworkRefused (a ConnectionError);
# - httpx: HTTPTransport and AsyncHTTPTransport answer through the door;
# - aiohttp: the TCP connector's connection is a transport that reads the HTTP/1.1
#   request aiohttp writes, asks the door, and hands back the response as bytes for
#   aiohttp's own parser.
#
# A refusal by the sandbox's rules raises the library's connection error class (named
# NetworkRefused) with the host's message, which names the rule; it is never retried.

__sandbox_internal__ = True

import io
import math

from _sandbox_http import MAX_BODY_BYTES, DoorFailure, fetch, incomplete, named

REFUSALS = ("denied", "too_large", "budget_exceeded", "no_door", "closed", "protocol", "invalid_arguments")


def seconds(value):
    """A timeout setting as seconds, or None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
        return float(value)
    return None


_told_of_proxy = []


def proxy_not_used(proxy):
    """Says once that a proxy setting (HTTPS_PROXY, proxies=, ProxyManager) is not used:
    every request goes to its own target, through the host and under its rules."""
    if not _told_of_proxy:
        _told_of_proxy.append(proxy)
        import sys

        where = str(proxy).rsplit("@", 1)[-1]  # never its credentials
        sys.stderr.write(f"[the proxy {where} is not used: requests go to their own hosts through the "
                         "sandbox's host, which applies its own rules (SANDBOX_ALLOW_HOSTS)]\n")


# ---- urllib3 ------------------------------------------------------------------------------

class Original:
    """What urllib3 and requests read of http.client's response: its headers (for
    cookies) and whether it is closed."""

    def __init__(self, pairs):
        import http.client

        self.msg = http.client.HTTPMessage()
        for name, value in pairs:
            # What msg[name] = value stores under HTTPMessage's policy (compat32),
            # without its per-header policy calls.
            self.msg.set_raw(name, value)
        self.closed = False

    def isclosed(self):
        return self.closed

    def close(self):
        self.closed = True


class Body(io.BytesIO):
    """A response's body in memory, read as urllib3 reads http.client's response, which
    says it is closed (`isclosed()`) once a read has reached the end: with a length, the
    read that returns its last byte; without one (the server sent it chunked or until it
    closed), the read that finds nothing more, or a read of everything. So a stream of
    chunks of no fixed size (`stream(None)`, requests' `iter_content(None)`) ends, and
    an empty body is not closed before it is read. A body that broke off (`broken`) is
    never done: with a length, urllib3 finds it short (IncompleteRead, as from a
    socket); chunked, a read of everything or at its end raises IncompleteRead. (urllib's
    response, http_door.DoorResponse, fails a chunked read it cannot fill at once, as
    http.client's read(n) does; urllib3 reads a chunked body chunk by chunk, and gets what
    came before the error.)"""

    def __init__(self, data, sized, broken=False, promised=None):
        super().__init__(data)
        self.size, self.sized, self.broken, self.ended = len(data), sized, broken, False
        self.promised = promised  # of a body that broke off, the length it was to have

    def read(self, size=-1):
        data = super().read(size)
        self.note_read(size, data)
        return data

    def read1(self, size=-1):
        data = super().read1(size)
        self.note_read(size, data)
        return data

    def note_read(self, size, data):
        everything = size is None or size < 0
        if self.broken:
            if everything or (not self.sized and not data and size != 0):
                raise incomplete(data, self.promised, self.tell())
            return
        self.ended = self.ended or everything or (
            self.tell() >= self.size if self.sized else (not data and size != 0))

    def isclosed(self):
        return self.closed or self.ended


def urllib3_response(got, method, url, *, preload, decode, enforce, retries=None):
    """The door's answer as urllib3's HTTPResponse, read from memory."""
    from urllib3._collections import HTTPHeaderDict
    from urllib3.response import HTTPResponse

    headers = HTTPHeaderDict()
    for name, value in got.headers:  # what HTTPHeaderDict(pairs) does, without its type checks
        headers.add(name, value)
    return HTTPResponse(
        body=Body(got.body, sized="content-length" in headers, broken=got.broken is not None,
                  promised=None if got.broken is None else got.declared_length()),
        headers=headers,
        status=got.status,
        version=11,
        version_string="HTTP/1.1",
        reason=got.reason,
        preload_content=preload,
        decode_content=decode,
        original_response=Original(got.headers),
        enforce_content_length=enforce,
        request_method=method,
        request_url=url,
        retries=retries,
    )


def patch_urllib3(urllib3):
    """Makes urllib3's pools use connections that go through the door."""
    import http.client

    from urllib3 import connection, connectionpool, exceptions
    from urllib3.util.timeout import Timeout

    class NetworkRefused(exceptions.HTTPError):
        """The sandbox's network rules refused the request (the message names the rule);
        urllib3 does not retry it."""

    exceptions.NetworkRefused = named(NetworkRefused, "urllib3.exceptions")

    class DoorHTTPConnection:
        """An HTTP connection of urllib3 whose request goes through the door: request()
        keeps what to send, getresponse() sends it and reads the answer."""

        default_port = 80
        default_socket_options = []
        scheme = "http"
        is_verified = False
        proxy_is_verified = None
        sock = None

        def __init__(self, host, port=None, *, timeout=None, source_address=None,
                     blocksize=16384, socket_options=None, proxy=None, proxy_config=None, **_):
            self.host, self.port = host, port or self.default_port
            self.timeout = timeout
            self.blocksize, self.source_address, self.socket_options = blocksize, None, None
            self.proxy, self.proxy_config = None, None
            self._asked = None
            self._closed = True
            self._tunnel = None
            if proxy is not None:
                proxy_not_used(proxy)

        def set_tunnel(self, host, port=None, headers=None, scheme="http"):
            # An HTTPS request through a proxy: this connection was made to the proxy, and
            # the tunnel names the real target. The host has no proxy, so the request goes
            # to the target itself (through the door, under its rules); the tunnel's
            # headers are the proxy's (Proxy-Authorization) and go nowhere.
            self._tunnel = (host, port or self.default_port)

        def connect(self):
            pass

        def request(self, method, url, body=None, headers=None, *, chunked=False,
                    preload_content=True, decode_content=True, enforce_content_length=True):
            if not url.startswith(("http://", "https://")):
                host, port = self._tunnel or (self.host, self.port)
                host = f"[{host}]" if ":" in host else host
                url = f"{self.scheme}://{host}:{port}{url}"
            headers = [(name, value) for name, value in (headers or {}).items()
                       if not name.lower().startswith("proxy-")]
            self._asked = (method, url, headers, body,
                           preload_content, decode_content, enforce_content_length)
            self._closed = False

        def getresponse(self):
            if self._asked is None:
                raise http.client.ResponseNotReady()
            method, url, headers, body, preload, decode, enforce = self._asked
            self._asked = None
            timeout = self.timeout
            if timeout is Timeout.DEFAULT_TIMEOUT or isinstance(timeout, Timeout):
                timeout = None
            try:
                got = fetch(method, url, headers, body, seconds(timeout), follow_redirects=False)
            except DoorFailure as failure:
                if failure.kind == "timeout":
                    raise TimeoutError(str(failure)) from None
                if failure.kind in REFUSALS:
                    raise NetworkRefused(str(failure)) from None
                raise exceptions.NewConnectionError(self, str(failure)) from None
            return urllib3_response(got, method, url, preload=preload, decode=decode, enforce=enforce)

        def close(self):
            self._closed = True
            self._asked = None

        @property
        def is_closed(self):
            return self._closed

        @property
        def is_connected(self):
            return True

        @property
        def has_connected_to_proxy(self):
            return False

    class DoorHTTPSConnection(DoorHTTPConnection):
        """HTTPS through the door: the host does TLS and checks certificates itself."""

        default_port = 443
        scheme = "https"
        is_verified = True
        cert_reqs = ca_certs = ca_cert_dir = ca_cert_data = None
        ssl_version = ssl_minimum_version = ssl_maximum_version = None
        assert_hostname = assert_fingerprint = None

        def __init__(self, host, port=None, **kwargs):
            super().__init__(host, port, **kwargs)
            self.server_hostname = kwargs.get("server_hostname")
            self.ssl_context = kwargs.get("ssl_context")
            self.cert_file = kwargs.get("cert_file")
            self.key_file = kwargs.get("key_file")

        def set_cert(self, *args, **kwargs):
            pass

    connectionpool.HTTPConnectionPool.ConnectionCls = DoorHTTPConnection
    connectionpool.HTTPSConnectionPool.ConnectionCls = DoorHTTPSConnection
    connection.HTTPConnection = DoorHTTPConnection
    connection.HTTPSConnection = DoorHTTPSConnection
    connection.VerifiedHTTPSConnection = DoorHTTPSConnection


# ---- requests -----------------------------------------------------------------------------

def patch_requests(requests):
    """requests' HTTPAdapter sends through the door. A request urllib3 could not change
    (see `straight_target`) goes straight to the door, without urllib3's pool; any other
    takes urllib3's path (its connections are the door's too). Both raise the same
    exceptions. A refusal by the sandbox's rules raises requests' own ConnectionError
    class."""
    import urllib3.exceptions
    from requests import adapters, exceptions
    from urllib3 import connectionpool, poolmanager

    class NetworkRefused(exceptions.ConnectionError):
        """The sandbox's network rules refused the request; the message names the rule."""

    exceptions.NetworkRefused = requests.NetworkRefused = named(NetworkRefused, "requests.exceptions")
    through_urllib3 = adapters.HTTPAdapter.send
    # What the straight path stands in for, as it is now: anything changed later (a
    # subclass, a patched class or instance, a mock or instrumentation of urllib3's pool)
    # takes urllib3's path.
    def pool_parts():
        return (connectionpool.HTTPConnectionPool.urlopen, poolmanager.PoolManager.urlopen,
                poolmanager.PoolManager.connection_from_url,
                connectionpool.HTTPConnectionPool.ConnectionCls,
                connectionpool.HTTPSConnectionPool.ConnectionCls)

    own = {name: getattr(adapters.HTTPAdapter, name) for name in ADAPTER_HOOKS}
    own_pool = pool_parts()

    def unchanged(adapter):
        kind = type(adapter)
        return (not any(name in vars(adapter) for name in ADAPTER_HOOKS)
                and all(getattr(kind, name) is hook for name, hook in own.items())
                and pool_parts() == own_pool)

    def door_send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        target = None
        if unchanged(self):
            target = straight_target(self, request, timeout, verify, cert, proxies)
        if target is not None:
            response = send_straight(self, request, target, stream, timeout, verify, cert, proxies)
        else:
            try:
                response = through_urllib3(self, request, stream=stream, timeout=timeout,
                                           verify=verify, cert=cert, proxies=proxies)
            except urllib3.exceptions.NetworkRefused as refused:
                raise NetworkRefused(str(refused), request=request) from None
        if not stream and response._content is False:
            # The door's answer is already in memory: read it in large pieces
            # (decoded, and its errors mapped, by requests itself) rather
            # than in requests' 10 KiB chunks, each a trip through urllib3.
            response._content = b"".join(response.iter_content(1 << 20)) or b""
        return response

    door_send.__doc__ = through_urllib3.__doc__
    adapters.HTTPAdapter.send = door_send


# What an HTTPAdapter may override to change where or how a request is sent: when any
# of them is not requests' own, the request takes urllib3's path.
ADAPTER_HOOKS = ("get_connection_with_tls_context", "get_connection", "cert_verify",
                 "request_url", "init_poolmanager", "proxy_manager_for",
                 "build_connection_pool_key_attributes")


def straight_target(adapter, request, timeout, verify, cert, proxies):
    """The URL to ask the door for when nothing of urllib3 could change the request, else
    None: the adapter's retries are requests' default kind (a plain Retry that never
    retries and lets a read timeout through as it is), no proxy is chosen, no client
    certificate or CA bundle is named, and the timeout is one urllib3 takes as it is."""
    from requests.utils import select_proxy
    from urllib3.util import parse_url
    from urllib3.util.retry import Retry

    retries = adapter.max_retries
    if (type(retries) is not Retry or type(retries.total) is not int or retries.total != 0
            or retries.read is not False or retries.status_forcelist):
        return None
    if cert is not None or type(verify) is not bool:
        return None
    parts = timeout if type(timeout) is tuple else (timeout, timeout)
    if len(parts) != 2 or not all(plain_seconds(part) for part in parts):
        return None
    if proxies and select_proxy(request.url, proxies):
        return None
    try:
        url = parse_url(request.url)
    except Exception:
        return None
    if url.scheme not in ("http", "https") or not url.host:
        return None
    host = f"[{url.host}]" if ":" in url.host and not url.host.startswith("[") else url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{url.scheme}://{host}:{port}{request.path_url}"


def plain_seconds(value):
    """Whether `value` is a timeout urllib3 would take as it is: none, or seconds > 0."""
    return value is None or (type(value) in (int, float) and seconds(value) is not None)


def send_straight(adapter, request, target, stream, timeout, verify, cert, proxies):
    """Sends `request` to `target` through the door and builds requests' Response as
    urllib3's path would (the same raw response, the same exceptions)."""
    from requests import exceptions

    adapter.add_headers(request, stream=stream, timeout=timeout, verify=verify, cert=cert,
                        proxies=proxies)
    read = timeout[1] if type(timeout) is tuple else timeout
    headers = [(name, value) for name, value in request.headers.items()
               if not str(name).lower().startswith("proxy-")]
    try:
        got = fetch(request.method, target, headers, request.body, seconds(read),
                    follow_redirects=False)
    except DoorFailure as failure:
        if failure.kind in REFUSALS:
            raise exceptions.NetworkRefused(str(failure), request=request) from None
        error, wrapper = urllib3_error(adapter, request, target, failure, read)
        raise wrapper(error, request=request) from error
    response = urllib3_response(got, request.method, target, preload=False, decode=False,
                                enforce=True, retries=adapter.max_retries)
    return adapter.build_response(request, response)


def urllib3_error(adapter, request, target, failure, read):
    """The urllib3 error urllib3's path raises for a failed fetch, and the requests
    exception class it becomes there."""
    from requests import exceptions
    from urllib3 import exceptions as raised

    pool = adapter.poolmanager.connection_from_url(target)  # opens nothing
    if failure.kind == "timeout":
        message = f"Read timed out. (read timeout={read})"
        return raised.ReadTimeoutError(pool, target, message), exceptions.ReadTimeout
    reason = raised.NewConnectionError(None, str(failure))
    return raised.MaxRetryError(pool, request.path_url, reason), exceptions.ConnectionError


# ---- httpx --------------------------------------------------------------------------------

def patch_httpx(httpx):
    """httpx's transports answer through the door, sync and async."""

    class NetworkRefused(httpx.ConnectError):
        """The sandbox's network rules refused the request; the message names the rule."""

    httpx.NetworkRefused = named(NetworkRefused, "httpx")

    def ask(request, body):
        timeouts = request.extensions.get("timeout") or {}
        timeout = seconds(timeouts.get("read")) or seconds(timeouts.get("connect"))
        try:
            # The header bytes httpx would send (its text form guesses one encoding).
            got = fetch(request.method, str(request.url), request.headers.raw, body,
                        timeout, follow_redirects=False)
        except DoorFailure as failure:
            if failure.kind == "timeout":
                raise httpx.ReadTimeout(str(failure), request=request) from None
            if failure.kind in REFUSALS:
                raise NetworkRefused(str(failure), request=request) from None
            raise httpx.ConnectError(str(failure), request=request) from None
        return httpx.Response(
            got.status,
            # As bytes, which httpx decodes as it does a server's (ASCII, UTF-8, latin-1).
            headers=[(name.encode("latin-1", "replace"), value.encode("latin-1", "replace"))
                     for name, value in got.headers],
            stream=httpx.ByteStream(got.body) if got.broken is None else broken_stream(httpx, got),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": got.reason.encode("latin-1", "replace")},
        )

    def handle_request(self, request):
        return ask(request, request.read())

    async def handle_async_request(self, request):
        return ask(request, await request.aread())

    httpx.HTTPTransport.handle_request = handle_request
    httpx.AsyncHTTPTransport.handle_async_request = handle_async_request


# ---- aiohttp ------------------------------------------------------------------------------

class DoorTransport:
    """An asyncio transport to one origin whose bytes never leave the sandbox: it reads
    each HTTP/1.1 request the protocol writes, asks the door for it, and feeds the
    response back as HTTP/1.1 bytes, for the protocol's own parser."""

    def __init__(self, loop, protocol, origin, timeout, failed):
        self._loop, self._protocol, self._origin = loop, protocol, origin
        self._timeout, self._failed = timeout, failed
        self._buffer = b""
        self._closing = False
        self._continued = False

    def write(self, data):
        if self._closing:
            return
        self._buffer += bytes(data)
        while True:
            request = take_request(self._buffer)
            if request is None:
                self._continue_if_expected()
                return
            self._buffer = request[-1]
            self._continued = False
            self._answer(*request[:-1])

    def _continue_if_expected(self):
        """A head with `Expect: 100-continue` (aiohttp's expect100) waits for leave to send
        its body: the door takes whole requests, so it is given at once, as a server would."""
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0 or self._continued:
            return
        lines = self._buffer[:end].decode("latin-1").split("\r\n")[1:]
        if any(name.strip().lower() == "expect" and value.strip().lower() == "100-continue"
               for name, _, value in (line.partition(":") for line in lines)):
            self._continued = True
            self._loop.call_soon(self._protocol.data_received, b"HTTP/1.1 100 Continue\r\n\r\n")

    def writelines(self, chunks):
        self.write(b"".join(bytes(c) for c in chunks))

    def _answer(self, method, target, headers, body):
        url = target if target.startswith(("http://", "https://")) else self._origin + target
        headers = [(name, value) for name, value in headers if name.lower() != "expect"]
        try:
            got = fetch(method, url, headers, body, self._timeout, follow_redirects=False)
        except DoorFailure as failure:
            self._loop.call_soon(self._protocol.set_exception, self._failed(failure))
            return
        self._loop.call_soon(self._protocol.data_received, response_bytes(method, got))
        if got.broken is not None:
            self._loop.call_soon(self.close)  # the server closed before the body's end

    def is_closing(self):
        return self._closing

    def close(self):
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._protocol.connection_lost, None)

    abort = close

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self):
        return 0

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_write_buffer_limits(self):
        return (0, 0)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def is_reading(self):
        return True

    def can_write_eof(self):
        return False

    def write_eof(self):
        pass


def take_request(buffer):
    """(method, target, headers, body, rest) of the first whole HTTP/1.1 request in
    `buffer`, or None while it is still coming."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].decode("latin-1").split("\r\n")
    method, target = head[0].split(" ")[:2]
    headers = [tuple(part.strip() for part in line.split(":", 1)) for line in head[1:] if ":" in line]
    names = {name.lower(): value for name, value in headers}
    rest = buffer[end + 4:]
    if names.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            line_end = rest.find(b"\r\n")
            if line_end < 0:
                return None
            size = int(rest[:line_end].split(b";")[0], 16)
            if len(rest) < line_end + 2 + size + 2:
                return None
            body += rest[line_end + 2:line_end + 2 + size]
            rest = rest[line_end + 2 + size + 2:]
            if size == 0:
                return method, target, headers, bytes(body), rest
    length = int(names.get("content-length", "0") or 0)
    if len(rest) < length:
        return None
    return method, target, headers, (rest[:length] if length else None), rest[length:]


def response_bytes(method, got):
    """A fetched response as HTTP/1.1 bytes, its body sized by Content-Length. A body that
    broke off comes as it would from the server, for the client's own parser to find
    short: under the length it promised, or chunked without its end."""
    keep_length = method == "HEAD" or got.status in (204, 304)
    promised = got.declared_length() if got.broken is not None else None
    lines = [f"HTTP/1.1 {got.status} {got.reason}"]
    lines += [f"{name}: {value}" for name, value in got.headers
              if keep_length or name.lower() != "content-length"]
    if got.closes:
        lines.append("Connection: close")  # the server's word, so the client reconnects
    body = got.body
    if keep_length:
        body = b""
    elif got.broken is None:
        lines.append(f"Content-Length: {len(body)}")
    elif promised is not None:
        lines.append(f"Content-Length: {promised}")
    else:
        lines.append("Transfer-Encoding: chunked")
        body = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
    # The door gives header bytes as latin-1 text: the same bytes go back.
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


def broken_stream(httpx, got):
    """httpx's stream of a body that broke off: what came, then the error httpx raises
    when a server closes before the body ends."""
    promised = got.declared_length()
    told = (f"received {len(got.body)} bytes, expected {promised}" if promised is not None
            else "incomplete chunked read")
    message = f"peer closed connection without sending complete message body ({told})"

    class Broken(httpx.SyncByteStream, httpx.AsyncByteStream):
        def __iter__(self):
            if got.body:
                yield got.body
            raise httpx.RemoteProtocolError(message)

        async def __aiter__(self):
            if got.body:
                yield got.body
            raise httpx.RemoteProtocolError(message)

    return Broken()


def patch_aiohttp(aiohttp):
    """aiohttp's TCP connections are DoorTransports (no name is resolved here: the host
    resolves and checks every address)."""
    import asyncio

    from aiohttp import connector

    class NetworkRefused(aiohttp.ClientConnectionError):
        """The sandbox's network rules refused the request; the message names the rule."""

    aiohttp.NetworkRefused = named(NetworkRefused, "aiohttp")

    def failed(failure):
        if failure.kind == "timeout":
            return aiohttp.ServerTimeoutError(str(failure))
        if failure.kind in REFUSALS:
            return NetworkRefused(str(failure))
        return aiohttp.ClientConnectionError(str(failure))

    async def _create_direct_connection(self, req, traces, timeout, *, client_error=None):
        host = req.url.raw_host
        host = f"[{host}]" if ":" in host else host
        origin = f"{'https' if req.is_ssl() else 'http'}://{host}:{req.port}"
        loop = asyncio.get_running_loop()
        protocol = self._factory()
        transport = DoorTransport(loop, protocol, origin, seconds(timeout.total) or seconds(timeout.sock_read), failed)
        protocol.connection_made(transport)
        return transport, protocol

    connector.TCPConnector._create_direct_connection = _create_direct_connection


# ---- http.client and socket ---------------------------------------------------------------

class DoorSocket:
    """The socket of an http.client connection: each HTTP/1.1 request the connection
    writes is asked of the door, and the response is read back as HTTP/1.1 bytes by
    http.client's own parser."""

    def __init__(self, origin, timeout):
        self._origin, self._timeout = origin, seconds(timeout)
        self._written, self._answers = bytearray(), bytearray()

    def sendall(self, data):
        self._written += data
        if len(self._written) > MAX_WRITTEN_BYTES:
            # Refused as it grows, not parsed again for every block until it ends.
            self._written.clear()
            raise ConnectionError(
                f"the request is over {MAX_WRITTEN_BYTES} bytes, more than the door carries: "
                f"a body of at most {MAX_BODY_BYTES} bytes (about {MAX_BODY_BYTES // 1024} KiB) "
                "and its headers")
        while (request := take_request(self._written)) is not None:
            method, target, headers, body, self._written = request
            url = target if target.startswith(("http://", "https://")) else self._origin + target
            try:
                got = fetch(method, url, headers, body, self._timeout, follow_redirects=False)
            except DoorFailure as failure:
                raise socket_error(failure) from None
            self._answers += response_bytes(method, got)

    def send(self, data):
        self.sendall(data)
        return len(data)

    def makefile(self, mode="rb", buffering=None, **kwargs):
        return io.BufferedReader(AnswerReader(self._answers))

    def settimeout(self, timeout):
        self._timeout = seconds(timeout)

    def setsockopt(self, *args):
        pass

    def close(self):
        # A response being read keeps what it was answered (http.client hands the
        # socket's file to a response that closes its connection, then closes it).
        self._answers = bytearray()


# Most bytes a DoorSocket holds of requests not yet whole: a body the door takes, and room
# for the head and a chunked body's framing.
MAX_WRITTEN_BYTES = MAX_BODY_BYTES + 64 * 1024


class AnswerReader(io.RawIOBase):
    """Reads what a DoorSocket has been answered, taking it out as it goes."""

    def __init__(self, answers):
        self._answers = answers

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), len(self._answers))
        buffer[:n] = self._answers[:n]
        del self._answers[:n]
        return n


def socket_error(failure):
    """The OSError a socket would raise for a failed fetch; the message names the rule."""
    if failure.kind == "timeout":
        return TimeoutError(str(failure))
    if failure.kind == "denied":
        return ConnectionRefusedError(str(failure))
    return ConnectionError(str(failure))


def patch_http_client(client):
    """http.client's connections (and so xmlrpc.client and code written against
    http.client) send their requests through the door; an HTTPS connection's TLS is the
    host's. (A runtime without ssl has no HTTPSConnection.)"""
    secure = getattr(client, "HTTPSConnection", None)

    def connect(self):
        host, port = self.host, self.port
        if self._tunnel_host:
            proxy_not_used(f"{self.host}:{self.port}")
            host, port = self._tunnel_host, self._tunnel_port
        scheme = "https" if secure is not None and isinstance(self, secure) else "http"
        host = f"[{host}]" if ":" in host else host
        self.sock = DoorSocket(f"{scheme}://{host}:{port}", self.timeout)

    for connection in (client.HTTPConnection, secure):
        if connection is not None:
            connection.connect = connect


NO_SOCKETS = ("there are no network sockets in this sandbox: HTTP goes through the host, with "
              "urllib, requests, httpx, aiohttp, urllib3 or http.client, to the hosts "
              "SANDBOX_ALLOW_HOSTS allows")


def patch_socket(socket):
    """Looking a name up or opening a connection says there are no sockets here, and what
    to use instead (WASI's socket module has neither)."""

    lookup_failed = getattr(socket, "gaierror", OSError)

    def refusing(name, error):
        def refused(*args, **kwargs):
            raise error(NO_SOCKETS)

        refused.__name__ = refused.__qualname__ = name
        refused.__module__ = "socket"
        return refused

    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        setattr(socket, name, refusing(name, lookup_failed))
    # getfqdn() asks it, and falls back to the host name on its error.
    socket.gethostbyaddr = refusing("gethostbyaddr", getattr(socket, "herror", OSError))
    socket.create_connection = refusing("create_connection", OSError)
