"""A small client of Prometheus's HTTP query API (https://prometheus.io/docs/prometheus/latest/querying/api/),
with the connection options Prometheus clients take: basic auth (password from a file), a bearer token file, a
CA file, and skipping TLS verification. Stdlib only (urllib).

Every request is bounded: one overall deadline covers connecting, the TLS handshake, the head and the whole body
(the request runs on a daemon thread that is given up on at the deadline, so a server trickling a byte a second
cannot hold the run; the remaining time is also sent as the query's `timeout`, so that Prometheus gives up too), and
a cap on the answer's size. The answer is read as it arrives (gpudiag.fleet.jsonstream) and each sample is reduced
at once to the labels the caller asked for, at most `per_node` samples per instance: what is held is bounded by
what the fleet view keeps, not by the answer's size. A sample that cannot be read (not an object, a label that is
not a string, a value that is not a number) is counted against its instance, never judged. A partial answer is not
an error but is reported: Prometheus's `warnings`, and Thanos's `partial_response` flag where a store did not answer.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from gpudiag.fileio import DocumentError, read_text
from gpudiag.fleet.jsonstream import Malformed, Reader
from gpudiag.fleet.model import NothingToJudge, SourceError

SECRET_MAX_BYTES = 64 << 10
# The largest answer, gpudiag_gpu_info of 2,000 nodes x 8 GPUs, is ~3 MB: the cap leaves room for ~40,000 such
# nodes while bounding what a hostile or misconfigured server can make the parser hold (~10x the answer's size).
RESPONSE_MAX_BYTES = 64 << 20
SAMPLE_MAX_CHARS = 64 << 10  # one sample's JSON; a target's labels are a few hundred bytes
LABEL_MAX_CHARS = 1 << 10  # a label value the fleet view keeps (hostnames, versions, check IDs)
OTHER_MAX_CHARS = 1 << 20  # any other value of an answer (an error message, Thanos's extras)
WARNINGS_KEPT = 5


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would resend the Authorization header to wherever it points, and turn
    the POST into a GET without the query. It surfaces as HTTPError 30x, a usage error naming the new place."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None


class QueryFailed(Exception):
    """One query did not get a (complete) answer: the rest of the judgement goes on, marked incomplete."""


class TooManySeries(QueryFailed):
    """More samples than the caller's `max_samples`."""


@dataclass
class Answer:
    """An instant vector, reduced: each sample as (its `keep` label values..., value), value a float (NaN and
    infinities included: the caller decides what a non-finite value means)."""

    samples: list[tuple] = field(default_factory=list)
    unreadable: Counter = field(default_factory=Counter)  # instance → samples not read; "" → naming no instance
    dropped: Counter = field(default_factory=Counter)  # instance → samples over `per_node`, not kept
    partial: list[str] = field(default_factory=list)  # warnings, partial response: series may be missing
    failed: bool = False  # no answer at all (the caller's stand-in for one that failed)


@dataclass
class Connection:
    """How to reach a Prometheus server: its URL and credentials."""
    url: str
    username: Optional[str] = None
    password_file: Optional[str] = None
    bearer_token_file: Optional[str] = None
    ca_file: Optional[str] = None
    insecure_skip_verify: bool = False
    timeout_seconds: float = 30.0
    max_response_bytes: int = RESPONSE_MAX_BYTES

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

    def query(self, promql: str, keep: tuple[str, ...] = ("instance",), per_node: Optional[int] = None,
              instances: Optional[set[str]] = None, max_samples: Optional[int] = None) -> Answer:
        """The instant vector `promql` evaluates to, reduced (Answer): only samples of `instances` when given, at
        most `per_node` of each instance, at most `max_samples` in all (QueryFailed beyond). QueryFailed on a
        timeout, an error or an unreadable answer; NothingToJudge when Prometheus cannot be reached at all;
        SourceError for a query it rejects (400) or refused credentials."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise QueryFailed(f"not run: the {self.timeout_seconds:g} s deadline has passed")
        outcome: list = []
        worker = threading.Thread(target=self._fetch, args=(promql, left, outcome,
                                                             _Reduce(keep, per_node, instances, max_samples)),
                                  name="gpudiag-fleet-query", daemon=True)
        worker.start()
        worker.join(left)
        if not outcome:  # the thread is left to end on its own (a daemon: it cannot keep the process alive)
            raise QueryFailed(f"{promql}: no complete answer within {left:.1f} s")
        kind, found = outcome[0]
        if kind == "error":
            raise found
        return found

    def _fetch(self, promql: str, left: float, outcome: list, reduce: "_Reduce") -> None:
        try:
            outcome.append(("answer", self._answer(promql, left, reduce)))
        except (QueryFailed, NothingToJudge, SourceError) as exc:
            outcome.append(("error", exc))
        except Exception as exc:  # noqa: BLE001 - whatever the server did, this query is not answered
            outcome.append(("error", QueryFailed(f"{promql}: {type(exc).__name__}: {str(exc)[:200]}")))

    def _answer(self, promql: str, left: float, reduce: "_Reduce") -> Answer:
        body = urllib.parse.urlencode({"query": promql, "timeout": f"{int(max(left - 0.5, 0.5) * 1000)}ms"}).encode()
        request = urllib.request.Request(f"{self._base}/api/v1/query", data=body, headers=self._headers)
        try:
            with self._opener.open(request, timeout=left) as response:
                return self._read_answer(response, promql, reduce)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, promql) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (TimeoutError, ssl.SSLError)) or "timed out" in str(reason):
                if isinstance(reason, ssl.SSLError) and "timed out" not in str(reason):
                    raise SourceError(f"--prometheus {self.url}: TLS: {reason}") from None
                raise QueryFailed(f"{promql}: no answer within {left:.1f} s") from None
            if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or not isinstance(exc, urllib.error.URLError):
                raise QueryFailed(f"{promql}: the answer broke off: {reason}") from None
            raise NothingToJudge(f"Prometheus at {self.url} unreachable: {reason}") from None

    def _read_answer(self, response: Any, promql: str, reduce: "_Reduce") -> Answer:
        received = 0

        def read(size: int) -> bytes:
            nonlocal received
            if time.monotonic() > self._deadline:
                raise QueryFailed(f"{promql}: the answer was still coming at the {self.timeout_seconds:g} s deadline")
            data = response.read1(size)
            received += len(data)
            if received > self.max_response_bytes:
                raise QueryFailed(f"{promql}: answer larger than {self.max_response_bytes >> 20} MiB")
            return data

        try:
            return _parse(Reader(read), promql, reduce)
        except Malformed as exc:
            raise QueryFailed(f"{promql}: the answer is not a Prometheus answer: {exc}") from None

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



class _Reduce:
    """What one query keeps of each sample (Connection.query)."""

    def __init__(self, keep: tuple[str, ...], per_node: Optional[int], instances: Optional[set[str]],
                 max_samples: Optional[int]) -> None:
        self.keep, self.per_node, self.instances, self.max_samples = keep, per_node, instances, max_samples
        self.answer = Answer()
        self._per_instance: dict[str, int] = {}
        self._strings: dict[str, str] = {}  # one copy of each label value (instances repeat in every sample)

    def add(self, entry: Any, promql: str) -> None:
        metric = entry.get("metric") if type(entry) is dict else None
        instance = metric.get("instance") if type(metric) is dict else None
        if type(instance) is not str or not instance or len(instance) > LABEL_MAX_CHARS:
            self.answer.unreadable[""] += 1
            return
        if self.instances is not None and instance not in self.instances:
            return  # not a node of this fleet (the first queries name them)
        strings = self._strings
        instance = strings.setdefault(instance, instance)
        reading = _reading(entry.get("value"))
        kept = []
        for name in self.keep:  # a plain loop: this runs for every sample of every answer
            label = metric.get(name, "")
            if type(label) is not str or len(label) > LABEL_MAX_CHARS:
                reading = None
                break
            kept.append(strings.setdefault(label, label))
        if reading is None:
            self.answer.unreadable[instance] += 1
            return
        count = self._per_instance[instance] = self._per_instance.get(instance, 0) + 1
        if self.per_node is not None and count > self.per_node:
            self.answer.dropped[instance] += 1
            return
        if self.max_samples is not None and len(self.answer.samples) >= self.max_samples:
            raise TooManySeries(f"{promql}: more than {self.max_samples:,} series")
        kept.append(reading)
        self.answer.samples.append(tuple(kept))


def _reading(value: Any) -> Optional[float]:
    """A sample's value, `[unix time, "text"]`: the number, NaN and infinities included; None if unreadable."""
    if type(value) is not list or len(value) != 2 or type(value[1]) is not str or len(value[1]) > 64:
        return None
    try:
        return float(value[1])
    except ValueError:
        return None


def _parse(reader: Reader, promql: str, reduce: _Reduce) -> Answer:
    """The answer's object, member by member; the result's samples one at a time."""
    answer, scalars = reduce.answer, {}
    for key in reader.members():
        if key == "data":
            for name in reader.members():
                if name == "result":
                    for entry in reader.values(SAMPLE_MAX_CHARS):
                        reduce.add(entry, promql)
                else:
                    _keep(scalars, "data." + name, reader.value(OTHER_MAX_CHARS))
        elif key == "warnings":  # a remote-read or federated store failed: the answer may lack series
            warnings = 0
            for _ in reader.elements():
                warning = reader.value(OTHER_MAX_CHARS)
                warnings += 1
                if warnings <= WARNINGS_KEPT:
                    answer.partial.append(f"Prometheus warns: {str(warning)[:300]}")
            if warnings > WARNINGS_KEPT:
                answer.partial.append(f"and {warnings - WARNINGS_KEPT} more warnings")
        else:
            _keep(scalars, key, reader.value(OTHER_MAX_CHARS))
    if reader.peek() != "":
        raise Malformed(f"text after the answer at character {reader.offset}")
    if scalars.get("status") != "success":
        error = scalars.get("error")
        raise QueryFailed(f"{promql}: {str(error)[:300] if error else 'no success status'}")
    if scalars.get("data.resultType") != "vector":
        raise QueryFailed(f"{promql}: not an instant vector")
    if scalars.get("partial_response") or scalars.get("data.partial_response"):  # Thanos
        answer.partial.append("partial response (a store did not answer)")
    return answer


_SCALARS = frozenset({"status", "error", "partial_response", "data.resultType", "data.partial_response"})


def _keep(scalars: dict, key: str, value: Any) -> None:
    if key in _SCALARS:
        scalars[key] = value


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
