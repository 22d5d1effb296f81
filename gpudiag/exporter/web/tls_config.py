"""`tls_server_config` of an exporter-toolkit web config, read as the toolkit reads it
(https://github.com/prometheus/exporter-toolkit/blob/master/web/tls_config.go, ConfigToTLSConfig), so that a file
that works for node_exporter works for gpudiag and one it refuses is refused here for the same reason:

- TLS is on when any of cert/cert_file/key/key_file/client_ca/client_ca_file/client_auth_type is set (IsEnabled);
  then a certificate (cert_file or inline cert) and a key (key_file or inline key) are required;
- files are read in the toolkit's order (certificate and key, then the client CA), relative paths relative to the
  config file's directory as named (not symlink-resolved: a Kubernetes secret volume swaps a `..data` link);
- client_auth_type: NoClientCert, RequestClientCert, RequireAnyClientCert (alias RequireClientCert),
  VerifyClientCertIfGiven, RequireAndVerifyClientCert; a client CA with NoClientCert is refused (the toolkit:
  "client CA's have been configured without a Client Auth Policy"); a verifying mode without a CA verifies against
  the system's trust store, as Go does with a nil ClientCAs;
- cipher_suites are Go's names (tls.CipherSuites()); TLS 1.3 suites are accepted and, as in Go, not configurable;
- certificates are re-read when their files change (the toolkit re-reads them on every connection): each handshake
  stats the files (a few microseconds) and rebuilds the context when one's inode, size or mtime moved.

gpudiag is stricter in one place: client_allowed_sans without a client_auth_type that asks for a certificate is
refused (the toolkit would never check them: a security setting silently ignored).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from gpudiag.exporter.web import errors as E
from gpudiag.exporter.web import openssl_ctx
from gpudiag.exporter.web.errors import WebConfigError

log = logging.getLogger(__name__)

KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
        "cipher_suites", "curve_preferences", "min_version", "max_version", "prefer_server_cipher_suites",
        "client_allowed_sans"}
VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
            "TLS13": ssl.TLSVersion.TLSv1_3}
# Go's crypto/tls CipherSuites() (the ones without known weaknesses) → OpenSSL's names; None: TLS 1.3, whose suites
# neither Go nor Python's ssl lets a server choose.
CIPHERS = {
    "TLS_AES_128_GCM_SHA256": None, "TLS_AES_256_GCM_SHA384": None, "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA", "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256", "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
}
# golang.org/x/net/http2 ConfigureServer refuses a TLS 1.2 cipher list without one of these.
HTTP2_REQUIRED = {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}
CURVES = {"CurveP256": "P-256", "CurveP384": "P-384", "CurveP521": "P-521", "X25519": "X25519"}
# client_auth_type → (ask for a certificate, require one, verify it against the client CAs)
CLIENT_AUTH = {
    "": (False, False, False), "NoClientCert": (False, False, False),
    "RequestClientCert": (True, False, False),
    "RequireAnyClientCert": (True, True, False), "RequireClientCert": (True, True, False),
    "VerifyClientCertIfGiven": (True, False, True),
    "RequireAndVerifyClientCert": (True, True, True),
}
PEM_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class TLSSettings:
    """The TLS files of a web config, with what each held when read."""
    cert_file: Optional[Path]
    cert: str
    key_file: Optional[Path]
    key: str
    client_ca_file: Optional[Path]
    client_ca: str
    client_auth: str
    ciphers: tuple[str, ...]
    curves: tuple[str, ...]
    min_version: str
    max_version: str
    prefer_server_cipher_suites: bool
    allowed_sans: Optional[tuple[str, ...]]

    def files(self) -> tuple[Optional[Path], ...]:
        return self.cert_file, self.key_file, self.client_ca_file


def _string(section: dict, key: str) -> str:
    value = section.get(key)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        raise WebConfigError(f"tls_server_config.{key} must be a string")
    return str(value)


def _strings(section: dict, key: str) -> Optional[tuple[str, ...]]:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or any(isinstance(v, (dict, list)) or v is None for v in value):
        raise WebConfigError(f"tls_server_config.{key} must be a list of strings")
    return tuple(str(v) for v in value)


def _pick(section: dict, key: str, known: dict, kind: str, what: str) -> tuple[str, ...]:
    names = _strings(section, key) or ()
    for name in names:
        if name not in known:
            raise WebConfigError(f"tls_server_config.{key}: unknown {what} {name!r}", kind)
    return names


def parse_tls(section: Any, base: Path) -> Optional[TLSSettings]:
    """The settings, or None when the section enables no TLS (as the toolkit's IsEnabled)."""
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise WebConfigError("tls_server_config must be a mapping")
    unknown = sorted(str(k) for k in section if k not in KEYS)
    if unknown:
        raise WebConfigError(f"unknown setting tls_server_config.{unknown[0]} (known: {', '.join(sorted(KEYS))})")
    ciphers = _pick(section, "cipher_suites", CIPHERS, E.UNKNOWN_CIPHER, "cipher")
    curves = _pick(section, "curve_preferences", CURVES, E.UNKNOWN_CURVE, "curve")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        versions[key] = _string(section, key) or default
        if versions[key] not in VERSIONS:
            raise WebConfigError(f"tls_server_config.{key}: unknown TLS version {versions[key]!r} "
                                 f"(one of {', '.join(VERSIONS)})", E.UNKNOWN_TLS_VERSION)
    prefer = section.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError("tls_server_config.prefer_server_cipher_suites must be true or false")
    path = {key: _string(section, key) for key in ("cert_file", "key_file", "client_ca_file")}
    text = {key: _string(section, key) for key in ("cert", "key", "client_ca", "client_auth_type")}
    if not any(path.values()) and not any(text.values()):
        return None
    if not path["cert_file"] and not text["cert"]:
        raise WebConfigError("tls_server_config: missing one of cert or cert_file", E.MISSING_CERT)
    if not path["key_file"] and not text["key"]:
        raise WebConfigError("tls_server_config: missing one of key or key_file", E.MISSING_KEY)
    return TLSSettings(
        cert_file=base / path["cert_file"] if path["cert_file"] else None, cert=text["cert"],
        key_file=base / path["key_file"] if path["key_file"] else None, key=text["key"],
        client_ca_file=base / path["client_ca_file"] if path["client_ca_file"] else None,
        client_ca=text["client_ca"], client_auth=text["client_auth_type"], ciphers=ciphers, curves=curves,
        min_version=versions["min_version"], max_version=versions["max_version"],
        prefer_server_cipher_suites=prefer, allowed_sans=_strings(section, "client_allowed_sans"))


def _read_pem(path: Path, what: str) -> str:
    """A PEM file's text, bounded; /dev/null reads as empty (the toolkit's own test config names it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise WebConfigError(f"cannot read {what} {path}: {exc.strerror or exc}", E.NO_SUCH_FILE) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise WebConfigError(f"cannot read {what} {path}: not a regular file", E.NO_SUCH_FILE)
        data = os.read(fd, PEM_MAX_BYTES + 1)
    except OSError as exc:
        raise WebConfigError(f"cannot read {what} {path}: {exc.strerror or exc}", E.NO_SUCH_FILE) from None
    finally:
        os.close(fd)
    if len(data) > PEM_MAX_BYTES:
        raise WebConfigError(f"{what} {path} is larger than {PEM_MAX_BYTES} bytes", E.BAD_CERT)
    return data.decode("utf-8", "replace")


def _load_chain(context: ssl.SSLContext, cert: str, key: str) -> None:
    """load_cert_chain wants file names: give it anonymous memory (memfd), so an inline key never touches a disk."""
    fds = []
    try:
        for data in (cert, key):
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create("gpudiag-tls", os.MFD_CLOEXEC)
            else:  # pragma: no cover - not Linux
                fd, name = tempfile.mkstemp()
                os.unlink(name)
            fds.append(fd)
            os.write(fd, data.encode())
        # password: an encrypted key fails instead of prompting on the service's terminal
        context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}", password=lambda: b"")
    except (OSError, ssl.SSLError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise WebConfigError(f"tls_server_config: cannot load the certificate and key: {reason}", E.BAD_CERT) from None
    finally:
        for fd in fds:
            os.close(fd)


def build_context(s: TLSSettings) -> ssl.SSLContext:
    """An SSLContext for the settings, reading their files now; WebConfigError with the toolkit's error class."""
    cert = _read_pem(s.cert_file, "cert_file") if s.cert_file else s.cert
    key = _read_pem(s.key_file, "key_file") if s.key_file else s.key
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_chain(context, cert, key)
    context.minimum_version, context.maximum_version = VERSIONS[s.min_version], VERSIONS[s.max_version]
    if not s.prefer_server_cipher_suites:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [CIPHERS[name] for name in s.ciphers if CIPHERS[name]]
    if tls12:
        context.set_ciphers(":".join(tls12))
    elif s.ciphers:  # TLS 1.3 suites only: Go then has no TLS 1.2 suite to offer
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    ca = _read_pem(s.client_ca_file, "client_ca_file") if s.client_ca_file else s.client_ca
    if s.client_auth not in CLIENT_AUTH:
        raise WebConfigError(f"tls_server_config: invalid ClientAuth {s.client_auth!r} "
                             f"(one of {', '.join(k for k in CLIENT_AUTH if k)})", E.INVALID_CLIENT_AUTH)
    ask, require, verify = CLIENT_AUTH[s.client_auth]
    if (s.client_ca_file or s.client_ca) and not ask:
        raise WebConfigError("tls_server_config: client CA's have been configured without a Client Auth Policy "
                             "(set client_auth_type)", E.CA_WITHOUT_POLICY)
    if s.allowed_sans is not None and not ask:
        raise WebConfigError("tls_server_config: client_allowed_sans needs a client_auth_type that asks for a "
                             "client certificate", E.CA_WITHOUT_POLICY)
    try:
        if ca.strip():
            context.load_verify_locations(cadata=ca)
        elif verify:  # Go verifies against the host's roots when ClientCAs is nil
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (ssl.SSLError, ValueError) as exc:
        raise WebConfigError(f"tls_server_config: the client CA does not load: {exc}", E.BAD_CERT) from None
    if s.curves:
        _set_curves(context, [CURVES[name] for name in s.curves])
    if ask and not verify:
        _call(openssl_ctx.accept_any_client_certificate, context, require)
    elif ask:
        context.verify_mode = ssl.CERT_REQUIRED if require else ssl.CERT_OPTIONAL
    return context


def _set_curves(context: ssl.SSLContext, names: list[str]) -> None:
    # One path for one curve and for several: SSL_CTX_set1_groups_list. set_ecdh_curve takes a single elliptic
    # curve, and Debian 12's python3 (3.11.2, EC_KEY_new_by_curve_name) refuses X25519 through it with
    # "[EC: UNKNOWN_GROUP]", although node_exporter serves `curve_preferences: [X25519]` (issue 24, item 19).
    _call(openssl_ctx.set_groups, context, names)


def _call(setter, *args) -> None:
    try:
        setter(*args)
    except openssl_ctx.OpenSSLUnavailable as exc:
        raise WebConfigError(f"tls_server_config: this Python's ssl module cannot apply the setting: {exc}",
                             E.UNSUPPORTED) from None


def _stamp(files: tuple[Optional[Path], ...]) -> tuple:
    out = []
    for path in files:
        try:
            st = os.stat(path) if path else None
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if st else None)
        except OSError:
            out.append("missing")
    return tuple(out)


class TLSServer:
    """Wraps accepted sockets with the current context; re-reads the certificate files when they change."""

    def __init__(self, settings: TLSSettings):
        self.settings = settings
        self._stamp = _stamp(settings.files())
        self._context = build_context(settings)
        self._lock = threading.Lock()
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        stamp = _stamp(self.settings.files())
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    # Remember the stamp even if this fails: a half-written file is retried when it changes again,
                    # not rebuilt on every connection meanwhile; the last good certificate stays in use.
                    self._stamp = stamp
                    try:
                        self._context = build_context(self.settings)
                        self.reloads += 1
                        log.info("TLS certificate reloaded", extra=self._told())
                    except WebConfigError as exc:
                        log.warning("TLS certificate files changed but do not load; the previous ones are kept",
                                    extra=self._told(error=str(exc)))
        return self._context

    def _told(self, **more: str) -> dict:
        """The log line's fields (gpudiag/cli/serve/log_format.py), under one rate bound for all reloads."""
        files = {"cert_file": self.settings.cert_file, "key_file": self.settings.key_file,
                 "client_ca_file": self.settings.client_ca_file}
        return {"bound": ("tls",), "fields": {**{k: str(v) for k, v in files.items() if v}, **more}}

    def wrap_socket(self, sock, server_side: bool = True) -> ssl.SSLSocket:
        wrapped = self.context().wrap_socket(sock, server_side=server_side)
        if self.settings.allowed_sans is not None and not _san_allowed(wrapped, self.settings.allowed_sans):
            wrapped.close()
            raise ConnectionRefusedError("the client certificate has none of the allowed SANs")
        return wrapped


def _san_allowed(sock: ssl.SSLSocket, allowed: tuple[str, ...]) -> bool:
    """The toolkit's VerifyPeerCertificate: any DNS, email, IP or URI SAN of the client's certificate in the list
    (an IP as Go prints it: compressed, lower case)."""
    for kind, value in (sock.getpeercert() or {}).get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                value = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        if kind in ("DNS", "email", "IP Address", "URI") and value in allowed:
            return True
    return False
