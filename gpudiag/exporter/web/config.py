"""An exporter-toolkit web-config file (`--web-config FILE`, alias `--web.config.file`), the format every
Prometheus exporter reads, so that one file and one habit serve the whole fleet. Everything the toolkit accepts
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md) is accepted and enforced,
and what it refuses is refused for the same reason (tests/exporter/web/test_config_toolkit.py replays its test configs):

    tls_server_config: …             # tls_config.py: files or inline PEM, client certificates, ciphers, curves
    http_server_config:
      headers: {X-Frame-Options: deny}   # set on every response; only the headers the toolkit allows
      http2: true                    # accepted; gpudiag speaks HTTP/1.1 (see below)
    rate_limit: {interval: 1s, burst: 10}   # rate_limit.py: a token bucket, 429 when empty
    basic_auth_users:
      prometheus: $2y$10$…           # bcrypt hash, e.g. `htpasswd -nBC 10 "" | tr -d ':\\n'`

`http2`: Python's HTTP server speaks HTTP/1.1 and offers no ALPN, so clients (Prometheus included) use HTTP/1.1
whatever the setting; it is accepted so that a node_exporter file works, and with TLS on and http2 left true a
cipher list without an HTTP/2-required suite is refused, as the toolkit (golang.org/x/net/http2) refuses it.

Anything gpudiag cannot honour is an error, never ignored: a security setting silently dropped is worse than a
service that refuses to start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gpudiag.exporter.web import errors as E
from gpudiag.exporter.web.errors import WebConfigError
from gpudiag.exporter.web.rate_limit import TokenBucket, parse_rate_limit
from gpudiag.exporter.web.tls_config import HTTP2_REQUIRED, TLSServer, parse_tls

__all__ = ["AuthBusy", "BasicAuth", "WebConfig", "WebConfigError", "load_web_config"]

_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}$")
# exporter-toolkit's web/handler.go extraHTTPHeaders: the headers a config may set, and the values allowed where
# the header is an enumeration (None: any value).
HEADERS = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}


@dataclass
class WebConfig:
    """The exporter's web settings: TLS, basic auth, headers, rate limit, HTTP/2."""
    tls: Optional[TLSServer] = None
    auth: Optional["BasicAuth"] = None
    headers: dict[str, str] = field(default_factory=dict)
    limiter: Optional[TokenBucket] = None
    http2: bool = True


def load_web_config(path: Path) -> WebConfig:
    """The config, every file it names read and checked now; WebConfigError (with the toolkit's error class) if
    the toolkit would refuse it."""
    import yaml

    from gpudiag.fileio import CONFIG_MAX_BYTES, DocumentError, parse_bounded, read_text

    try:  # a regular file, size-capped, UTF-8, not nested too deep (gpudiag.fileio)
        data = parse_bounded(yaml.safe_load, read_text(path, CONFIG_MAX_BYTES))
    except DocumentError as exc:
        raise WebConfigError(f"{path}: {exc}", E.NO_SUCH_FILE) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None)
        raise WebConfigError(f"{path}: not valid YAML{line}" + (f" ({problem})" if problem else "")) from None
    if data is None:
        return WebConfig()
    _require_mapping(data, "the file")
    _reject_unknown(data, {"tls_server_config", "http_server_config", "rate_limit", "basic_auth_users"}, "")
    # The toolkit's order: the YAML (types, names, header values), then the password hashes, then the files.
    # Not resolved: relative paths are relative to the directory the file is named in (Go's filepath.Dir).
    base = Path(os.path.abspath(path)).parent
    tls = parse_tls(data.get("tls_server_config"), base)
    headers, http2 = _http_server(data.get("http_server_config"))
    limiter = parse_rate_limit(data.get("rate_limit"))
    users = _users(data["basic_auth_users"]) if data.get("basic_auth_users") else None
    config = WebConfig(headers=headers, limiter=limiter, http2=http2)
    if tls is not None:
        config.tls = TLSServer(tls)
        if http2 and tls.ciphers and tls.min_version != "TLS13" and not HTTP2_REQUIRED & set(tls.ciphers):
            raise WebConfigError(
                "tls_server_config.cipher_suites is missing an HTTP/2-required AES_128_GCM_SHA256 cipher (need "
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), which the "
                "toolkit refuses while http_server_config.http2 is true", E.NO_HTTP2_CIPHER)
    if users is not None:
        config.auth = BasicAuth(users)
    return config


def _require_mapping(value: Any, what: str) -> None:
    if not isinstance(value, dict):
        raise WebConfigError(f"{what} must be a mapping")


def _reject_unknown(section: dict, allowed: set[str], prefix: str) -> None:
    unknown = sorted(str(k) for k in section if k not in allowed)
    if unknown:
        raise WebConfigError(f"unknown setting {prefix}{unknown[0]} (known: {', '.join(sorted(allowed))})")


def _http_server(section: Any) -> tuple[dict[str, str], bool]:
    if section is None:
        return {}, True
    _require_mapping(section, "http_server_config")
    _reject_unknown(section, {"headers", "http2"}, "http_server_config.")
    http2 = section.get("http2", True)
    if not isinstance(http2, bool):
        raise WebConfigError("http_server_config.http2 must be true or false")
    headers = section.get("headers") or {}
    _require_mapping(headers, "http_server_config.headers")
    out = {}
    for name, value in headers.items():
        if isinstance(value, (dict, list)) or value is None:
            raise WebConfigError(f"http_server_config.headers.{name} must be a string")
        name, value = str(name), str(value)
        if name not in HEADERS:
            raise WebConfigError(f"HTTP header {name!r} can not be configured (allowed: {', '.join(HEADERS)})",
                                 E.INVALID_HEADER)
        allowed = HEADERS[name]
        if allowed is not None and value not in allowed:
            raise WebConfigError(f"invalid value for {name}: {value!r} (one of {', '.join(allowed)})",
                                 E.INVALID_VALUE)
        if any(c in value for c in "\r\n\0"):
            raise WebConfigError(f"http_server_config.headers.{name}: a value cannot hold a line break")
        out[name] = value
    return out, http2


def _users(section: Any) -> dict[str, bytes]:
    _require_mapping(section, "basic_auth_users")
    users = {}
    for user, hashed in section.items():
        if not isinstance(hashed, str) or not _BCRYPT_HASH.match(hashed):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash ($2a$/$2b$/$2y$, cost 04-31, 60 "
                                 "characters)", E.BAD_PASSWORD)
        users[str(user)] = hashed.encode()
    try:
        import bcrypt  # noqa: F401 - checked here so that a missing package is a start-up error, not a 500
    except ImportError:
        raise WebConfigError("basic_auth_users needs the Python package bcrypt (pip install bcrypt)",
                             E.UNSUPPORTED) from None
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
