"""Source: `gpudiag check --format json` reports (files, a directory of them, or `-`: a stream of reports).

Each report is read through a bounded reader (regular files only, a size cap) and reduced to a NodeFacts as it is
read (gpudiag.fleet.report_facts), so memory grows with the fleet's facts, not with its reports. A stream
(standard input: `srun ... gpudiag check --format json | gpudiag fleet -`, `kubectl logs ... | gpudiag fleet -`)
holds concatenated or newline-delimited reports; each is bounded like a file, and the stream as a whole by
STREAM_MAX_BYTES.

What cannot be read is skipped and counted, as node_exporter's textfile collector skips a file it cannot parse:
a truncated report, a line of a pod's stderr between two reports. The run is then incomplete, and the node whose
report it was (the hostname it got as far as naming, or the file's name) is `unknown`. Only a path the command line
names that is not there, or not a file, is a usage error.
"""

from __future__ import annotations

import os
import stat
from datetime import datetime, timezone
from typing import IO, Iterable, Iterator, Optional

from gpudiag.fileio import DocumentError, read_text
from gpudiag.fleet.jsonstream import Malformed, Reader
from gpudiag.fleet.model import MAX_NOTES, NODE_SEVERITY, NodeFacts, NothingToJudge, SourceError
from gpudiag.fleet.report_facts import Unreadable, read_report

REPORT_MAX_BYTES = 16 << 20  # an 8-GPU level-2 report is ~100 KB; a kernel log full of events can grow it
STREAM_MAX_BYTES = 4 << 30  # 2,000 nodes of the largest reports stay well inside
MAX_FILES = 100_000
MAX_WARNINGS = 100  # lines about skipped input; more are counted in one
STDIN = "-"
EXPECTED_MAX_BYTES = 4 << 20  # --nodes: 100,000 hostnames
_CHUNK = 1 << 20

class _Read:
    """One report read (or not): its node's facts, when it was collected, where it came from."""

    def __init__(self, facts: NodeFacts, collected_at: str, origin: str, skipped: Optional[str] = None) -> None:
        self.facts, self.collected_at, self.origin, self.skipped = facts, collected_at, origin, skipped

    def rank(self) -> tuple[int, datetime]:
        """Worse first, then newer: the report of a hostname that is judged."""
        return NODE_SEVERITY[own_status(self.facts)], parsed_time(self.collected_at)


def own_status(facts: NodeFacts) -> str:
    """The status a report gives its node by itself (drift and lag need its peers)."""
    if facts.failures or facts.more_failures:
        return "fail"
    if facts.silent:
        return "silent"
    if facts.unread:
        return "unknown"
    return "warn" if facts.warnings else "pass"


_OLDEST = datetime.min.replace(tzinfo=timezone.utc)


def parsed_time(text: str) -> datetime:
    """An ISO 8601 time as gpudiag writes it (`2026-12-01T22:44:03+00:00`; `Z` too), compared as a time and not as
    text: `...T23:00:00-02:00` is later than `...T00:30:00+00:00` of the next day. Unreadable: the oldest."""
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except (TypeError, ValueError):
        return _OLDEST
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def read_reports(paths: Iterable[str], stdin: Optional[IO[bytes]] = None,
                 expected: Optional[list[str]] = None) -> tuple[list[NodeFacts], list[str]]:
    """The facts of every report under `paths`, one node per hostname, and warnings (lines starting
    `incomplete:` for input that was skipped). Several reports of one hostname: the worst is judged (then the
    newest), the conflict named on the node. An empty report file is its node (the file's name) gone silent:
    `srun --output reports/%N.json` leaves one where gpudiag crashed or was killed. `expected` (hostnames) names
    the nodes that should have reported: a missing one is silent. SourceError for a bad path, NothingToJudge when
    nothing at all was found."""
    latest: dict[str, _Read] = {}
    claims: dict[str, int] = {}
    skipped: list[str] = []
    for read in _documents(paths, stdin):
        if read.skipped is not None:
            skipped.append(f"{read.origin}: {read.skipped}")
        if not read.facts.node:  # nothing named: counted in `skipped` only
            continue
        host = read.facts.node
        claims[host] = claims.get(host, 0) + 1
        previous = latest.get(host)
        if previous is None:
            latest[host] = read
            continue
        worse, other = (read, previous) if read.rank() > previous.rank() else (previous, read)
        worse.facts.conflicts = previous.facts.conflicts + read.facts.conflicts  # the claims so far
        if len(worse.facts.conflicts) < MAX_NOTES:
            worse.facts.conflicts.append(f"{other.origin}: {own_status(other.facts)}, collected "
                                         f"{other.collected_at or 'at an unknown time'}")
        latest[host] = worse
    if not latest:
        unread = f" ({len(skipped)} unreadable piece(s) of input skipped: {skipped[0]})" if skipped else ""
        raise NothingToJudge(f"no gpudiag reports found{unread}")
    warnings = [f"{host}: {count} reports claim this hostname; judged the worst ({latest[host].origin})"
                for host, count in sorted(claims.items()) if count > 1]
    warnings += [f"incomplete: {line}" for line in skipped[:MAX_WARNINGS]]
    if len(skipped) > MAX_WARNINGS:
        warnings.append(f"incomplete: and {len(skipped) - MAX_WARNINGS} more pieces of input skipped")
    nodes = [read.facts for read in latest.values()]
    if expected is not None:
        nodes, extra = _against_expected(nodes, expected)
        warnings += [f"{host}: a report from a node not in the expected list" for host in extra]
    return nodes, warnings


def _short(hostname: str) -> str:
    return hostname.split(".", 1)[0]


def _against_expected(nodes: list[NodeFacts], expected: list[str]) -> tuple[list[NodeFacts], list[str]]:
    """Every expected node that has no report becomes a silent one; a host matches by its full or short name
    (`scontrol show hostnames` gives short names, a report may hold the FQDN)."""
    reported = {_short(n.node) for n in nodes} | {n.node for n in nodes}
    missing = [NodeFacts(node=host, silent=[(None, None, "no report from this node")])
               for host in dict.fromkeys(expected) if host not in reported and _short(host) not in reported]
    wanted = set(expected) | {_short(h) for h in expected}
    extra = sorted(n.node for n in nodes if n.node not in wanted and _short(n.node) not in wanted)
    return nodes + missing, extra


def read_expected(path: str) -> list[str]:
    """Hostnames, one a line (`scontrol show hostnames`, `kubectl get nodes -o name`); blank lines and #comments
    are skipped; `node/` prefixes as kubectl prints them are dropped."""
    try:
        text = read_text(path, EXPECTED_MAX_BYTES)
    except DocumentError as exc:
        raise SourceError(f"--nodes {path}: {exc}") from None
    hosts = [line.split("#", 1)[0].strip().removeprefix("node/") for line in text.splitlines()]
    hosts = [host for host in hosts if host]
    if not hosts:
        raise SourceError(f"--nodes {path}: no hostname in it")
    return hosts


def _documents(paths: Iterable[str], stdin: Optional[IO[bytes]]) -> Iterator[_Read]:
    for path in paths:
        if path == STDIN:
            yield from read_stream(stdin, "standard input")
        elif os.path.isdir(path):
            files = sorted(entry.path for entry in os.scandir(path) if entry.name.endswith(".json"))
            if len(files) > MAX_FILES:
                raise SourceError(f"{path}: more than {MAX_FILES} reports")
            for file in files:
                yield _read_file(file, named=False)
        else:
            yield _read_file(path, named=True)


def _stem(path: str) -> str:
    name = os.path.basename(path)
    return name[:-len(".json")] if name.endswith(".json") and len(name) > len(".json") else name


def _read_file(path: str, named: bool) -> _Read:
    """A report file. `named`: on the command line, where a path that is not there (or not a file) is a usage
    error; in a directory it is skipped like any unreadable report."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if named:
            raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
        st = None
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 0:
        return _Read(
            NodeFacts(
                node=_stem(path),
                silent=[
                    (
                        None,
                        None,
                        f"its report {path} is empty: gpudiag wrote nothing there (crashed, killed, or never ran)",
                    )
                ],
            ),
            "",
            path,
        )
    try:
        text = read_text(path, REPORT_MAX_BYTES)
    except DocumentError as exc:
        if named and (st is None or not stat.S_ISREG(st.st_mode)):
            raise SourceError(f"{path}: {exc}") from None
        return _unreadable(path, str(exc), _stem(path))
    reader = Reader(text=text)
    try:
        facts, collected_at = read_report(reader, path)
        if reader.peek() != "":
            raise Unreadable(f"text after the report at character {reader.offset}", facts.node)
    except Unreadable as exc:
        return _unreadable(path, str(exc), exc.hostname or _stem(path))
    except Malformed as exc:
        return _unreadable(path, f"not a readable report: {exc}", _stem(path))
    return _Read(facts, collected_at, path)


def _unreadable(origin: str, reason: str, node: Optional[str]) -> _Read:
    facts = NodeFacts(node=node or "")
    facts.add_unread(f"its report ({origin}) could not be read: {reason}")
    return _Read(facts, "", origin, skipped=reason)


def read_stream(stream: Optional[IO[bytes]], name: str) -> Iterator[_Read]:
    """Concatenated (or newline-delimited) reports; each at most REPORT_MAX_BYTES, all STREAM_MAX_BYTES. Text that
    is not a report (a stray line of a pod's stderr in `kubectl logs`), or a report cut short, is skipped to the
    next line that starts with `{` (where the next report starts, pretty-printed or `jq -c`) and counted."""
    if stream is None:
        raise SourceError(f"{name}: no stream to read")
    total = 0

    def read(size: int) -> bytes:
        nonlocal total
        if total >= STREAM_MAX_BYTES:
            return b""
        data = stream.read(min(size, STREAM_MAX_BYTES - total))
        total += len(data)
        return data

    reader, count = Reader(read, chunk=_CHUNK, errors="replace"), 0
    while True:
        found = reader.peek()
        if found == "":
            break
        count += 1
        origin = f"{name} (report {count})"
        if found != "{":
            text = reader.skip_to_line_starting("{").strip()
            yield _unreadable(origin, f"not a report: {_quoted(text)}", None)
            continue
        try:
            facts, collected_at = read_report(reader, origin, REPORT_MAX_BYTES)
        except Unreadable as exc:
            reader.skip_to_line_starting("{")
            yield _unreadable(origin, str(exc), exc.hostname)
            continue
        yield _Read(facts, collected_at, origin)
    if total >= STREAM_MAX_BYTES:
        yield _unreadable(name, f"more than {STREAM_MAX_BYTES >> 30} GiB: the rest was not read", None)


def _quoted(text: str, limit: int = 80) -> str:
    """The start of skipped text, to say what it was (cleaned of controls when shown: gpudiag.report.text)."""
    first = text.splitlines()[0] if text else ""
    return repr(first[:limit] + ("…" if len(first) > limit or "\n" in text else ""))
