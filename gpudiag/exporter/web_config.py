"""TLS and basic auth from an exporter-toolkit style web-config file (`--web-config FILE`), the format every
Prometheus exporter reads, so that one file and one habit serve the whole fleet:

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional; needs client_ca_file
      client_ca_file: clients.pem
      min_version: TLS12             # optional: TLS10 … TLS13; default TLS12
    basic_auth_users:
      prometheus: $2y$10$…           # bcrypt hash, e.g. `htpasswd -nBC 10 "" | tr -d ':\\n'`

Anything gpudiag cannot honour is an error, never ignored: a security setting silently dropped is worse than a
service that refuses to start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional


class WebConfigError(Exception):
    """The web-config file is unreadable or invalid; the message is one line for the operator."""


_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# exporter-toolkit's client_auth_type values Python's ssl module can enforce. RequestClientCert and
# RequireAnyClientCert accept unverified certificates, which ssl cannot do: they are refused, not weakened.
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_BCRYPT_HASH = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")


@dataclass
class WebConfig:
    tls: Optional[ssl.SSLContext] = None
    auth: Optional["BasicAuth"] = None


def load_web_config(path: Path) -> WebConfig:
    import yaml

    from gpudiag.fileio import CONFIG_MAX_BYTES, DocumentError, parse_bounded, read_text

    try:  # a regular file, size-capped, UTF-8, not nested too deep (gpudiag.fileio)
        data = parse_bounded(yaml.safe_load, read_text(path, CONFIG_MAX_BYTES))
    except DocumentError as exc:
        raise WebConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None)
        raise WebConfigError(f"{path}: not valid YAML{line}" + (f" ({problem})" if problem else "")) from None
    if data is None:
        return WebConfig()
    _require_mapping(data, "the file")
    _reject_unknown(data, {"tls_server_config", "basic_auth_users"}, "")
    base = Path(path).resolve().parent
    config = WebConfig()
    if data.get("tls_server_config"):
        config.tls = _tls_context(data["tls_server_config"], base)
    if data.get("basic_auth_users"):
        config.auth = BasicAuth(_users(data["basic_auth_users"]))
    return config


def _require_mapping(value: Any, what: str) -> None:
    if not isinstance(value, dict):
        raise WebConfigError(f"{what} must be a mapping")


def _reject_unknown(section: dict, allowed: set[str], prefix: str) -> None:
    unknown = sorted(str(k) for k in section if k not in allowed)
    if unknown:
        raise WebConfigError(f"unsupported setting {prefix}{unknown[0]} (supported: {', '.join(sorted(allowed))})")


def _tls_context(section: Any, base: Path) -> ssl.SSLContext:
    _require_mapping(section, "tls_server_config")
    _reject_unknown(section, _TLS_KEYS, "tls_server_config.")
    for key in ("cert_file", "key_file"):
        if not isinstance(section.get(key), str) or not section[key]:
            raise WebConfigError(f"tls_server_config.{key} is required")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(section, "min_version", "TLS12")
    if "max_version" in section:
        context.maximum_version = _version(section, "max_version", "TLS13")
    cert, key = base / section["cert_file"], base / section["key_file"]
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"cannot load the TLS certificate {cert} and key {key}: {_reason(exc)}") from None
    auth_type = section.get("client_auth_type", "NoClientCert")
    if auth_type not in _CLIENT_AUTH:
        raise WebConfigError(
            f"tls_server_config.client_auth_type {auth_type!r} is not supported (supported: {', '.join(_CLIENT_AUTH)})"
        )
    context.verify_mode = _CLIENT_AUTH[auth_type]
    if context.verify_mode != ssl.CERT_NONE:
        ca = section.get("client_ca_file")
        if not isinstance(ca, str) or not ca:
            raise WebConfigError(f"tls_server_config.client_ca_file is required with client_auth_type {auth_type}")
        try:
            context.load_verify_locations(cafile=base / ca)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"cannot load the client CA file {base / ca}: {_reason(exc)}") from None
    return context


def _version(section: dict, key: str, default: str) -> ssl.TLSVersion:
    name = section.get(key, default)
    if name not in _VERSIONS:
        raise WebConfigError(f"tls_server_config.{key} {name!r} is not one of {', '.join(_VERSIONS)}")
    return _VERSIONS[name]


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def _users(section: Any) -> dict[str, bytes]:
    _require_mapping(section, "basic_auth_users")
    users = {}
    for user, hashed in section.items():
        if not isinstance(hashed, str) or not _BCRYPT_HASH.match(hashed):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash ($2a$/$2b$/$2y$, 60 characters)")
        users[str(user)] = hashed.encode()
    try:
        import bcrypt  # noqa: F401 - checked here so that a missing package is a start-up error, not a 500
    except ImportError:
        raise WebConfigError("basic_auth_users needs the Python package bcrypt (pip install bcrypt)") from None
    return users


@dataclass
class BasicAuth:
    """Checks `Authorization: Basic …` against bcrypt hashes.

    bcrypt is slow on purpose (~50-250 ms at cost 10-12), far more than a scrape should cost, so a credential that
    verified once is remembered, keyed by a SHA-256 of user and password (as exporter-toolkit does); failures are
    never cached. An unknown user is checked against a dummy hash so that the reply takes as long as for a known one.
    """

    users: dict[str, bytes]
    _verified: "OrderedDict[bytes, None]" = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    cache_size: int = 64

    _DUMMY = b"$2b$10$" + b"." * 53

    def check(self, header: Optional[str]) -> bool:
        credentials = _parse_basic(header)
        if credentials is None:
            return False
        user, password = credentials
        key = hashlib.sha256(user.encode() + b"\0" + password).digest()
        with self._lock:
            if key in self._verified:
                self._verified.move_to_end(key)
                return True
        import bcrypt

        hashed = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password, hashed or self._DUMMY) and hashed is not None
        except ValueError:
            ok = False
        if ok:
            with self._lock:
                self._verified[key] = None
                while len(self._verified) > self.cache_size:
                    self._verified.popitem(last=False)
        return ok


def _parse_basic(header: Optional[str]) -> Optional[tuple[str, bytes]]:
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None
