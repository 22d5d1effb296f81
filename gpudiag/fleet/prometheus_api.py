"""A small client of Prometheus's HTTP query API (https://prometheus.io/docs/prometheus/latest/querying/api/),
with the connection options Prometheus clients take: basic auth (password from a file), a bearer token file, a
CA file, and skipping TLS verification. Stdlib only (urllib).

Every request is bounded: a socket timeout, the remaining time of one overall deadline (sent along as the query's
`timeout` so that Prometheus gives up too), and a cap on the answer's size. A partial answer is not an error but is
reported, and makes the verdict incomplete: Prometheus's `warnings`, and Thanos's `partial_response` flag where a
store did not answer.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

from gpudiag.fileio import DocumentError, read_text
from gpudiag.fleet.model import NothingToJudge, SourceError

SECRET_MAX_BYTES = 64 << 10
# The largest answer, gpudiag_gpu_info of 2,000 nodes x 8 GPUs, is ~3 MB: the cap leaves room for ~40,000 such
# nodes while bounding what a hostile or misconfigured server can make the parser hold (~10x the answer's size).
RESPONSE_MAX_BYTES = 64 << 20


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would resend the Authorization header to wherever it points, and turn
    the POST into a GET without the query. It surfaces as HTTPError 30x, a usage error naming the new place."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None


class QueryFailed(Exception):
    """One query did not get a (complete) answer: the rest of the judgement goes on, marked incomplete."""


@dataclass
class Connection:
    url: str
    username: Optional[str] = None
    password_file: Optional[str] = None
    bearer_token_file: Optional[str] = None
    ca_file: Optional[str] = None
    insecure_skip_verify: bool = False
    timeout_seconds: float = 30.0
    max_response_bytes: int = RESPONSE_MAX_BYTES
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise SourceError(f"--prometheus {self.url}: not an http:// or https:// URL")
        if self.username is not None and self.bearer_token_file is not None:
            raise SourceError("--username and --bearer-token-file: give one way to authenticate")
        self._base = self.url.rstrip("/")
        self._headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded",
                         "User-Agent": "gpudiag-fleet"}
        if self.username is not None:
            password = _secret(self.password_file, "--password-file") if self.password_file else ""
            token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        elif self.password_file is not None:
            raise SourceError("--password-file needs --username")
        if self.bearer_token_file is not None:
            self._headers["Authorization"] = f"Bearer {_secret(self.bearer_token_file, '--bearer-token-file')}"
        self._context = None
        if parsed.scheme == "https":
            try:
                self._context = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise SourceError(f"--ca-file {self.ca_file}: {getattr(exc, 'strerror', None) or exc}") from None
            if self.insecure_skip_verify:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        handlers: list = [_NoRedirect()]
        if self._context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self._context))
        self._opener = urllib.request.build_opener(*handlers)
        self._deadline = time.monotonic() + self.timeout_seconds

    def query(self, promql: str) -> list[dict]:
        """The instant vector `promql` evaluates to; QueryFailed on a timeout, an error or a partial answer.
        NothingToJudge when Prometheus cannot be reached at all; SourceError for a query it rejects (400)."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise QueryFailed(f"not run: the {self.timeout_seconds:g} s deadline has passed")
        body = urllib.parse.urlencode({"query": promql, "timeout": f"{int(max(left - 0.5, 0.5) * 1000)}ms"}).encode()
        request = urllib.request.Request(f"{self._base}/api/v1/query", data=body, headers=self._headers)
        try:
            with self._opener.open(request, timeout=left) as response:
                data = response.read(self.max_response_bytes + 1)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, promql) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (TimeoutError, ssl.SSLError)) or "timed out" in str(reason):
                if isinstance(reason, ssl.SSLError) and "timed out" not in str(reason):
                    raise SourceError(f"--prometheus {self.url}: TLS: {reason}") from None
                raise QueryFailed(f"{promql}: no answer within {left:.1f} s") from None
            raise NothingToJudge(f"Prometheus at {self.url} unreachable: {reason}") from None
        if len(data) > self.max_response_bytes:
            raise QueryFailed(f"{promql}: answer larger than {self.max_response_bytes >> 20} MiB")
        return self._result(data, promql)

    def _http_error(self, exc: urllib.error.HTTPError, promql: str) -> Exception:
        detail = _error_text(exc)
        if 300 <= exc.code < 400:
            return SourceError(f"--prometheus {self.url}: redirected (HTTP {exc.code}) to "
                               f"{exc.headers.get('Location', '?')[:200]}: give that URL")
        if exc.code in (401, 403):
            return SourceError(f"--prometheus {self.url}: HTTP {exc.code} {detail}: check the credentials")
        if exc.code == 400:
            return SourceError(f"Prometheus rejected the query {promql!r}: {detail} (check --selector)")
        if exc.code == 404:
            return NothingToJudge(f"{self.url}: no Prometheus query API there (HTTP 404)")
        if exc.code in (422, 503) and "timeout" in detail.lower():
            return QueryFailed(f"{promql}: Prometheus timed out: {detail}")
        return QueryFailed(f"{promql}: HTTP {exc.code} {detail}")

    def _result(self, data: bytes, promql: str) -> list[dict]:
        try:
            answer = json.loads(data)
        except ValueError:
            raise QueryFailed(f"{promql}: the answer is not JSON") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error") if isinstance(answer, dict) else None
            raise QueryFailed(f"{promql}: {error or 'no success status'}")
        # Prometheus warns where a remote-read or federated store failed: the answer may lack series.
        for warning in answer.get("warnings") or ():
            self.warnings.append(f"incomplete: {promql}: Prometheus warns: {str(warning)[:300]}")
        if answer.get("partial_response") or (answer.get("data") or {}).get("partial_response"):
            self.warnings.append(f"incomplete: {promql}: partial response (a store did not answer)")
        result = (answer.get("data") or {}).get("result")
        if (answer.get("data") or {}).get("resultType") != "vector" or not isinstance(result, list):
            raise QueryFailed(f"{promql}: not an instant vector")
        return result


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read(1 << 16) or b"{}")
        return str(body.get("error") or exc.reason)[:300]
    except (ValueError, OSError, AttributeError):
        return str(exc.reason)[:300]


def _secret(path: str, option: str) -> str:
    try:
        text = read_text(path, SECRET_MAX_BYTES).strip()
    except DocumentError as exc:
        raise SourceError(f"{option} {path}: {exc}") from None
    if not text or "\n" in text:
        raise SourceError(f"{option} {path}: expected one line")
    return text


def value(sample: dict) -> Optional[float]:
    try:
        return float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
