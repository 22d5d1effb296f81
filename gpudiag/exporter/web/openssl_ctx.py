"""The two OpenSSL settings exporter-toolkit's web config needs that Python's ssl module does not expose, set on
the SSL_CTX of an ssl.SSLContext through ctypes:

- accept *any* client certificate (`RequestClientCert`, `RequireAnyClientCert`: Go's tls.RequestClientCert and
  tls.RequireAnyClientCert ask for a certificate without verifying it). ssl can only verify against loaded CAs, so
  a verify callback that accepts every certificate is installed; CPython keeps a callback already set when its
  verify_mode changes (Modules/_ssl.c, _set_verify_mode: SSL_CTX_get_verify_callback), and getpeercert() still
  decodes the certificate, so client_allowed_sans can be checked after the handshake.
- the key-exchange groups (`curve_preferences`): ssl.SSLContext.set_ecdh_curve takes one elliptic curve (not X25519
  on Debian 12's python3), so every list, of one name or more, is
  SSL_CTX_set1_groups_list (a macro for SSL_CTX_ctrl(ctx, SSL_CTRL_SET_GROUPS_LIST = 92, 0, "P-256:X25519"),
  openssl/ssl.h).

The SSL_CTX pointer is the first field after the object header of CPython's PySSLContext (Modules/_ssl.c). That is
checked before anything is set: the verify mode read back through the pointer must be the one ssl set, else
`OpenSSLUnavailable`, and the web config is refused rather than a setting silently left out.
"""

from __future__ import annotations

import ctypes
import ssl
import threading

SSL_VERIFY_PEER, SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x01, 0x02
SSL_CTRL_SET_GROUPS_LIST = 92

_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_ACCEPT_ANY = _VERIFY_CB(lambda preverify_ok, store: 1)  # module-level: it must outlive every context
_lib = None
_lock = threading.Lock()


class OpenSSLUnavailable(Exception):
    """The running Python's ssl module cannot be reached through ctypes."""


def _libssl() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is None:
            path = getattr(ssl._ssl, "__file__", None)  # the libssl _ssl is linked against, not another one
            if not path:
                raise OpenSSLUnavailable("the ssl module is built into this Python")
            try:
                lib = ctypes.CDLL(path)
                lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
                lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
                lib.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CB]
                lib.SSL_CTX_set_verify.restype = None
                lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
                lib.SSL_CTX_ctrl.restype = ctypes.c_long
            except (OSError, AttributeError) as exc:
                raise OpenSSLUnavailable(str(exc)) from None
            _lib = lib
    return _lib


def _ctx_pointer(context: ssl.SSLContext) -> int:
    lib = _libssl()
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    saved = context.verify_mode
    try:
        for mode, expected in ((ssl.CERT_OPTIONAL, SSL_VERIFY_PEER),
                               (ssl.CERT_REQUIRED, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT)):
            context.verify_mode = mode
            if not pointer or lib.SSL_CTX_get_verify_mode(pointer) != expected:
                raise OpenSSLUnavailable("the SSL_CTX of this Python's ssl.SSLContext is not where it was expected")
    finally:
        context.verify_mode = saved
    return pointer


def accept_any_client_certificate(context: ssl.SSLContext, require: bool) -> None:
    """Ask for a client certificate (and refuse a client without one when `require`) but accept any certificate."""
    context.verify_mode = ssl.CERT_REQUIRED if require else ssl.CERT_OPTIONAL
    mode = SSL_VERIFY_PEER | (SSL_VERIFY_FAIL_IF_NO_PEER_CERT if require else 0)
    _libssl().SSL_CTX_set_verify(_ctx_pointer(context), mode, _ACCEPT_ANY)


def set_groups(context: ssl.SSLContext, names: list[str]) -> None:
    """Limit key exchange to `names` (OpenSSL group names: P-256, P-384, P-521, X25519), TLS 1.2 and 1.3; one name
    or several (a single curve too: set_ecdh_curve refuses X25519 on some builds, Debian 12's among them)."""
    if _libssl().SSL_CTX_ctrl(_ctx_pointer(context), SSL_CTRL_SET_GROUPS_LIST, 0,
                              ctypes.c_char_p(":".join(names).encode())) != 1:
        raise OpenSSLUnavailable(f"OpenSSL refused the groups {':'.join(names)}")
