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
import os
import re
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass
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


class AuthBusy(Exception):
    """Too many password checks are already queued: answer 429 without running another."""


class _Recent:
    """A bounded set of recent keys, least recently used out first."""

    def __init__(self, size: int):
        self.size = size
        self._keys: "OrderedDict[bytes, None]" = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        return False

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)


class BasicAuth:
    """Checks `Authorization: Basic …` against bcrypt hashes, without letting bcrypt become a denial of service.

    bcrypt is slow on purpose (~60 ms at cost 10, ~250 ms at 12 on one core), and before this 16 clients sending
    wrong passwords in parallel took 189 % CPU and every connection slot (issue 10, item 6). So, as
    exporter-toolkit's web/handler.go does (https://github.com/prometheus/exporter-toolkit/blob/master/web/handler.go:
    a mutex around bcrypt.CompareHashAndPassword, and a cache of results keyed by user, hash and password):
    - one bcrypt check runs at a time (about one core at most, whatever the number of clients);
    - results are remembered, keyed by a salted SHA-256 of user and password: a verified credential costs a
      dictionary look-up from then on, and a repeated wrong one never costs a second bcrypt. The two caches are
      bounded and separate, so that a flood of new wrong passwords cannot push the scraper's credential out;
    - at most `max_waiting` checks wait for bcrypt; beyond that the request is answered 429 at once, so that
      password guessers cannot hold every connection slot while they queue;
    - an unknown user is checked against a dummy hash of the configured users' (highest) cost, so that the reply
      takes as long as for a known user with a wrong password (the dummy was cost 10 whatever the users' cost:
      item 8). Users of different costs remain distinguishable from each other: give them one cost.
    """

    def __init__(self, users: dict[str, bytes], cache_size: int = 64, failure_cache_size: int = 1024,
                 max_waiting: int = 4):
        self.users = users
        self.max_waiting = max_waiting
        self._verified = _Recent(cache_size)
        self._failed = _Recent(failure_cache_size)
        self._lock = threading.Lock()  # the caches
        self._bcrypt = threading.Lock()  # one bcrypt check at a time
        self._queue = threading.BoundedSemaphore(max_waiting)
        self._salt = os.urandom(16)
        cost = max((int(hashed[4:6]) for hashed in users.values()), default=10)
        self.dummy_hash = b"$2b$%02d$" % cost + b"." * 53  # valid bcrypt syntax that no password matches

    def check(self, header: Optional[str]) -> bool:
        """True for a configured user's password; False otherwise; AuthBusy when too many checks are queued."""
        credentials = _parse_basic(header)
        if credentials is None:
            return False
        user, password = credentials
        key = hashlib.sha256(self._salt + user.encode() + b"\0" + password).digest()
        cached = self._cached(key)
        if cached is not None:
            return cached
        if not self._queue.acquire(blocking=False):
            raise AuthBusy()
        try:
            with self._bcrypt:
                cached = self._cached(key)  # the same credentials may have been checked while this one waited
                ok = cached if cached is not None else self._bcrypt_check(user, password)
        finally:
            self._queue.release()
        with self._lock:
            (self._verified if ok else self._failed).add(key)
        return ok

    def _cached(self, key: bytes) -> Optional[bool]:
        with self._lock:
            if key in self._verified:
                return True
            if key in self._failed:
                return False
        return None

    def _bcrypt_check(self, user: str, password: bytes) -> bool:
        import bcrypt

        hashed = self.users.get(user)
        try:
            return bcrypt.checkpw(password, hashed or self.dummy_hash) and hashed is not None
        except ValueError:
            return False


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
