# A stand-in for `_ssl`, the C half of the standard `ssl` module, which a WASI CPython
# lacks: with it, `import ssl` (and http.client's HTTPSConnection, and every library that
# builds an SSLContext at import or in a constructor: requests, httpx, urllib3, aiohttp,
# nltk...) works. There is no TLS in the sandbox: the host's door does TLS for every
# HTTPS request and checks certificates itself. A context here keeps its settings (so
# code that configures one behaves), and wrapping a socket in it says why it cannot.

__sandbox_internal__ = True

import os

NO_TLS = (
    "TLS is done by the host here: this sandbox has no sockets, so {what} cannot be used; "
    "HTTPS through urllib, requests, httpx, urllib3 and aiohttp goes through the host's "
    "door, which checks certificates itself"
)

CONSTANTS = dict(
    OPENSSL_VERSION="OpenSSL 3.0.0 (stand-in: TLS is done by the sandbox's host)",
    OPENSSL_VERSION_INFO=(3, 0, 0, 0, 0), OPENSSL_VERSION_NUMBER=0x30000000,
    _OPENSSL_API_VERSION=(3, 0, 0, 0, 0),
    _DEFAULT_CIPHERS="@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM",
    CERT_NONE=0, CERT_OPTIONAL=1, CERT_REQUIRED=2,
    PROTOCOL_SSLv23=2, PROTOCOL_TLS=2, PROTOCOL_TLS_CLIENT=16, PROTOCOL_TLS_SERVER=17,
    PROTOCOL_TLSv1=3, PROTOCOL_TLSv1_1=4, PROTOCOL_TLSv1_2=5,
    PROTO_MINIMUM_SUPPORTED=-2, PROTO_MAXIMUM_SUPPORTED=-1, PROTO_SSLv3=768, PROTO_TLSv1=769,
    PROTO_TLSv1_1=770, PROTO_TLSv1_2=771, PROTO_TLSv1_3=772,
    OP_ALL=0x80000050, OP_NO_SSLv2=0, OP_NO_SSLv3=0x2000000, OP_NO_TLSv1=0x4000000,
    OP_NO_TLSv1_1=0x10000000, OP_NO_TLSv1_2=0x8000000, OP_NO_TLSv1_3=0x20000000,
    OP_CIPHER_SERVER_PREFERENCE=0x400000, OP_SINGLE_DH_USE=0, OP_SINGLE_ECDH_USE=0,
    OP_NO_COMPRESSION=0x20000, OP_NO_TICKET=0x4000, OP_NO_RENEGOTIATION=0x40000000,
    OP_ENABLE_MIDDLEBOX_COMPAT=0x100000, OP_IGNORE_UNEXPECTED_EOF=0x80, OP_ENABLE_KTLS=0x8,
    OP_LEGACY_SERVER_CONNECT=0x4,
    HOSTFLAG_ALWAYS_CHECK_SUBJECT=1, HOSTFLAG_NO_WILDCARDS=2, HOSTFLAG_NO_PARTIAL_WILDCARDS=4,
    HOSTFLAG_MULTI_LABEL_WILDCARDS=8, HOSTFLAG_SINGLE_LABEL_SUBDOMAINS=16,
    HOSTFLAG_NEVER_CHECK_SUBJECT=32,
    VERIFY_DEFAULT=0, VERIFY_CRL_CHECK_LEAF=4, VERIFY_CRL_CHECK_CHAIN=12, VERIFY_X509_STRICT=32,
    VERIFY_X509_TRUSTED_FIRST=0x8000, VERIFY_ALLOW_PROXY_CERTS=64, VERIFY_X509_PARTIAL_CHAIN=0x80000,
    ENCODING_PEM=1, ENCODING_DER=2,
    SSL_ERROR_SSL=1, SSL_ERROR_WANT_READ=2, SSL_ERROR_WANT_WRITE=3, SSL_ERROR_WANT_X509_LOOKUP=4,
    SSL_ERROR_SYSCALL=5, SSL_ERROR_ZERO_RETURN=6, SSL_ERROR_WANT_CONNECT=7, SSL_ERROR_EOF=8,
    SSL_ERROR_INVALID_ERROR_CODE=10,
    HAS_SNI=True, HAS_ECDH=True, HAS_NPN=False, HAS_ALPN=True, HAS_TLS_UNIQUE=True,
    HAS_SSLv2=False, HAS_SSLv3=False, HAS_TLSv1=True, HAS_TLSv1_1=True, HAS_TLSv1_2=True,
    HAS_TLSv1_3=True, HAS_PSK=False, HAS_PHA=True, HAS_PSK_TLS13=False,
)
ALERTS = dict(
    CLOSE_NOTIFY=0, UNEXPECTED_MESSAGE=10, BAD_RECORD_MAC=20, RECORD_OVERFLOW=22,
    DECOMPRESSION_FAILURE=30, HANDSHAKE_FAILURE=40, BAD_CERTIFICATE=42, UNSUPPORTED_CERTIFICATE=43,
    CERTIFICATE_REVOKED=44, CERTIFICATE_EXPIRED=45, CERTIFICATE_UNKNOWN=46, ILLEGAL_PARAMETER=47,
    UNKNOWN_CA=48, ACCESS_DENIED=49, DECODE_ERROR=50, DECRYPT_ERROR=51, PROTOCOL_VERSION=70,
    INSUFFICIENT_SECURITY=71, INTERNAL_ERROR=80, USER_CANCELLED=90, NO_RENEGOTIATION=100,
    UNSUPPORTED_EXTENSION=110, CERTIFICATE_UNOBTAINABLE=111, UNRECOGNIZED_NAME=112,
    BAD_CERTIFICATE_STATUS_RESPONSE=113, BAD_CERTIFICATE_HASH_VALUE=114, UNKNOWN_PSK_IDENTITY=115,
)


class SSLError(OSError):
    """An error of the TLS layer (here: TLS cannot be used inside the sandbox)."""

    library = None
    reason = None

    def __str__(self):
        return self.args[1] if len(self.args) > 1 and isinstance(self.args[1], str) else super().__str__()


class SSLZeroReturnError(SSLError):
    pass


class SSLWantReadError(SSLError):
    pass


class SSLWantWriteError(SSLError):
    pass


class SSLSyscallError(SSLError):
    pass


class SSLEOFError(SSLError):
    pass


class SSLCertVerificationError(SSLError, ValueError):
    verify_code = None
    verify_message = None


def no_tls(what):
    return SSLError(1, NO_TLS.format(what=what))


def setting(name, check=None):
    """A context setting kept in the context's own dict (ssl.SSLContext's properties
    call these through super())."""
    def get(self):
        return self._settings[name]

    def set_(self, value):
        if check is not None:
            value = check(self, value)
        self._settings[name] = value

    return property(get, set_)


def checked_verify_mode(self, value):
    value = int(value)
    if value == 0 and self._settings["check_hostname"]:
        raise ValueError("Cannot set verify_mode to CERT_NONE when check_hostname is enabled.")
    return value


def checked_check_hostname(self, value):
    if value and self._settings["verify_mode"] == 0:
        self._settings["verify_mode"] = 2
    return bool(value)


class _SSLContext:
    """A TLS context's settings, kept; nothing here speaks TLS."""

    def __new__(cls, protocol=2):
        self = super().__new__(cls)
        client = protocol == 16
        self._settings = {
            "protocol": protocol,
            "verify_mode": 2 if client else 0,
            "check_hostname": client,
            "options": CONSTANTS["OP_ALL"] | CONSTANTS["OP_NO_SSLv3"] | CONSTANTS["OP_NO_COMPRESSION"],
            "_host_flags": 0,
            "verify_flags": CONSTANTS["VERIFY_X509_TRUSTED_FIRST"],
            "minimum_version": -2,
            "maximum_version": -1,
            "post_handshake_auth": False,
            "keylog_filename": None,
            "sni_callback": None,
            "num_tickets": 2,
            "security_level": 2,
            "_msg_callback": None,
        }
        self._ca_certs = []
        self._ciphers = CONSTANTS["_DEFAULT_CIPHERS"]
        self._alpn = []
        return self

    protocol = property(lambda self: self._settings["protocol"])
    verify_mode = setting("verify_mode", checked_verify_mode)
    check_hostname = setting("check_hostname", checked_check_hostname)
    options = setting("options", lambda self, value: int(value))
    _host_flags = setting("_host_flags")
    verify_flags = setting("verify_flags", lambda self, value: int(value))
    minimum_version = setting("minimum_version", lambda self, value: int(value))
    maximum_version = setting("maximum_version", lambda self, value: int(value))
    post_handshake_auth = setting("post_handshake_auth")
    keylog_filename = setting("keylog_filename")
    sni_callback = setting("sni_callback")
    num_tickets = setting("num_tickets")
    security_level = property(lambda self: self._settings["security_level"])
    _msg_callback = setting("_msg_callback")

    def load_verify_locations(self, cafile=None, capath=None, cadata=None):
        if cafile is None and capath is None and cadata is None:
            raise TypeError("cafile, capath and cadata cannot be all omitted")
        for path in (cafile, capath):
            if path is not None and not os.path.exists(os.fspath(path)):
                raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        self._ca_certs.append(cafile or capath or "cadata")

    def load_cert_chain(self, certfile, keyfile=None, password=None):
        if not os.path.exists(os.fspath(certfile)):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(certfile))

    def load_dh_params(self, path):
        pass

    def set_default_verify_paths(self):
        pass

    def set_ciphers(self, ciphers):
        self._ciphers = ciphers

    def get_ciphers(self):
        return [{"name": "TLS_AES_256_GCM_SHA384", "protocol": "TLSv1.3", "description": "done by the host"}]

    def _set_alpn_protocols(self, protos):
        self._alpn = protos

    def set_ecdh_curve(self, name):
        pass

    def set_groups(self, groups):
        pass

    def cert_store_stats(self):
        return {"x509": 0, "crl": 0, "x509_ca": 0}

    def get_ca_certs(self, binary_form=False):
        return []

    def session_stats(self):
        return {}

    def set_psk_client_callback(self, callback, identity_hint=None):
        pass

    def set_psk_server_callback(self, callback, identity_hint=None):
        pass

    def _wrap_socket(self, sock, server_side, server_hostname=None, *, owner=None, session=None):
        raise no_tls("a TLS socket")

    def _wrap_bio(self, incoming, outgoing, server_side, server_hostname=None, *, owner=None, session=None):
        raise no_tls("a TLS object over memory buffers")


class MemoryBIO:
    """A memory buffer for TLS objects (which cannot be made here)."""

    def __init__(self):
        self._data = bytearray()
        self.eof = False

    @property
    def pending(self):
        return len(self._data)

    def read(self, size=-1):
        size = len(self._data) if size < 0 else size
        data, self._data = bytes(self._data[:size]), self._data[size:]
        return data

    def write(self, data):
        self._data += data
        return len(data)

    def write_eof(self):
        self.eof = True


class SSLSession:
    pass


class Certificate:
    pass


class _SSLSocket:
    pass


def get_default_verify_paths():
    return ("SSL_CERT_FILE", "/etc/ssl/cert.pem", "SSL_CERT_DIR", "/etc/ssl/certs")


def RAND_status():
    return True


def RAND_add(string, entropy):
    pass


def RAND_bytes(n):
    return os.urandom(n)


def RAND_pseudo_bytes(n):
    return os.urandom(n), True


def txt2obj(txt, name=False):
    objects = {"1.3.6.1.5.5.7.3.1": (129, "serverAuth", "TLS Web Server Authentication", "1.3.6.1.5.5.7.3.1"),
               "1.3.6.1.5.5.7.3.2": (130, "clientAuth", "TLS Web Client Authentication", "1.3.6.1.5.5.7.3.2")}
    for entry in objects.values():
        if txt in (entry[3], entry[1], entry[2]):
            return entry
    raise ValueError(f"unknown object '{txt}'")


def nid2obj(nid):
    for oid in ("1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"):
        entry = txt2obj(oid)
        if entry[0] == nid:
            return entry
    raise ValueError(f"unknown NID {nid}")


def _test_decode_cert(path):
    raise no_tls("decoding certificates")


def fill(module):
    """Fills the `_ssl` module the driver made."""
    namespace = module.__dict__
    namespace.update(CONSTANTS)
    namespace.update({f"ALERT_DESCRIPTION_{name}": value for name, value in ALERTS.items()})
    for name in ("SSLError", "SSLZeroReturnError", "SSLWantReadError", "SSLWantWriteError",
                 "SSLSyscallError", "SSLEOFError", "SSLCertVerificationError", "_SSLContext",
                 "MemoryBIO", "SSLSession", "Certificate", "_SSLSocket", "get_default_verify_paths",
                 "RAND_status", "RAND_add", "RAND_bytes", "RAND_pseudo_bytes", "txt2obj", "nid2obj",
                 "_test_decode_cert"):
        value = globals()[name]
        if isinstance(value, type):
            value.__module__ = "ssl"
        namespace[name] = value
    namespace["err_codes_to_names"] = {}
    namespace["err_names_to_codes"] = {}
    namespace["lib_codes_to_names"] = {}
    namespace["__doc__"] = "Stand-in for the TLS module: the sandbox's host does TLS for HTTPS through its door."
