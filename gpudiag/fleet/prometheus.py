"""Source: a Prometheus server that scrapes `gpudiag serve` (or node_exporter's textfile of `gpudiag textfile`).

A fixed set of queries whatever the fleet's size (never one per node), each aggregated in PromQL down to the
labels the judgement needs: 2,000 nodes x 8 GPUs is ~16,000 short series per per-GPU query. One pass over the
check states counts each node's series by value (count_values); only the nodes with one that is not 1 are then
asked which (`!= 1` in Prometheus: 0, and NaN too, which `== 0` would hide); the GPUs that are not up come back
as such. The first three queries (targets, gpudiag series, last collections) name the nodes; the rest are sent
together and read only for those nodes.

A node is sound only on positive evidence: a recent complete collection (gpudiag_last_collection_timestamp_seconds
within --stale-after), no part of its last cycle failing (gpudiag_collector_success{collector="collection"|
"checks"}, where the node exports it: `gpudiag textfile` does not) and check series present (gpudiag_check_ok).
Without them it is silent (no collection completed yet, stale, the last cycle overran) or unknown. A query that
fails or answers in part, and a sample that cannot be read (a NaN, a malformed entry), leave the nodes they cover
unknown (`unread`) and the verdict incomplete; only the first query (`up`) must answer.

A node is a Prometheus `instance`. Actions for failing checks come from the checks' verdict table
(gpudiag.checks.verdicts): the metric does not carry them; a node's own report may name a more specific one
(an Xid's).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

from gpudiag.checks.kernel_log.nvidia import FALLEN_OFF_BUS
from gpudiag.checks.verdicts import TABLE
from gpudiag.fleet import screening
from gpudiag.fleet.model import (FIGURES, MAX_FAILURES, MAX_GPUS, Failure, NodeFacts, NothingToJudge, SourceError,
                                 ecc_mode, pcie_link, watts)
from gpudiag.fleet.prometheus_api import Answer, Connection, QueryFailed, TooManySeries
from gpudiag.model import Status
from gpudiag.report.subject import Subject

DEFAULT_SELECTOR = '{job=~"gpudiag.*"}'  # the alert rules' convention: scrape jobs named gpudiag*
DEFAULT_STALE_AFTER = 600.0  # the textfile timer runs every 5 minutes; serve collects every 15 s
MAX_NAMED_INSTANCES = 200  # failing nodes named in a follow-up query; more, and it asks about every node
MAX_NODES = 100_000  # targets one run judges; more is a selector picking far more than one fleet
PARALLEL_QUERIES = 4  # a Prometheus evaluates queries concurrently (--query.max-concurrency, 20 by default)
_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')

Lookup = Callable[[str], Optional[NodeFacts]]


def _is(label: str, op: str, text: str) -> str:
    return f'{label}{op}"{text}"'


def selector_matchers(selector: str) -> str:
    """The label matchers inside `{...}`, checked one by one: the selector is pasted into every query, so it must
    be matchers and nothing else (no `}` or `or` smuggling a different query in)."""
    text = selector.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise SourceError(f"--selector {selector}: expected label matchers in braces, e.g. {DEFAULT_SELECTOR}")
    inner, position, matchers = text[1:-1], 0, []
    while position < len(inner):
        found = _MATCHER.match(inner, position)
        if found is None:
            raise SourceError(f"--selector {selector}: cannot read the matcher at {inner[position:][:40]!r}")
        matchers.append(found.group(0).strip())
        position = found.end()
        if position < len(inner):
            if inner[position] != ",":
                raise SourceError(f"--selector {selector}: matchers must be separated by commas")
            position += 1
    return ",".join(matchers)


class _Queries:
    """Runs the queries and keeps account of what was not read; `recording` only notes them (answering nothing),
    so that they can be sent together."""

    def __init__(self, connection: Connection, matchers: str, recording: bool = False) -> None:
        self.connection, self.matchers, self.recording = connection, matchers, recording
        self.incomplete: list[str] = []  # why the verdict is incomplete, a line each
        self.not_read: list[tuple[str, Optional[set[str]]]] = []  # (what, the instances it covers: None for all)
        self.recorded: list[tuple[str, tuple[str, ...], int]] = []
        self.instances: Optional[set[str]] = None  # the nodes, once the first queries have named them
        self._pending: dict[str, Future] = {}
        self._queued: list[tuple[str, tuple[str, ...], int]] = []
        self._pool: Optional[ThreadPoolExecutor] = None

    def series(self, metric: str, *extra: str) -> str:
        return metric + "{" + ",".join(m for m in (self.matchers, *extra) if m) + "}"

    def send(self, queries: list[tuple[str, tuple[str, ...], int]], pool: ThreadPoolExecutor) -> None:
        """Sends `queries` ahead, PARALLEL_QUERIES at a time: the next goes out as an answer is read (run), so that
        at most that many answers are held at once, whatever their size."""
        self._queued, self._pool = list(reversed(queries)), pool
        for _ in range(PARALLEL_QUERIES):
            self._send_next()

    def _send_next(self) -> None:
        if self._queued and self._pool is not None:
            promql, keep, per_node = self._queued.pop()
            self._pending[promql] = self._pool.submit(self._ask, promql, keep, per_node)

    def _ask(self, promql: str, keep: tuple[str, ...], per_node: int) -> Answer:
        return self.connection.query(promql, keep, per_node, self.instances,
                                     MAX_NODES if self.instances is None else None)

    def run(self, promql: str, what: str, keep: tuple[str, ...] = ("instance",), per_node: int = 1,
            required: bool = False, covers: Optional[set[str]] = None) -> Answer:
        """The answer to `promql` (`what` it reads, for the nodes' findings), at most `per_node` samples of each
        node kept (one, for a query aggregated `by (instance)`); an empty one where it failed."""
        if self.recording:
            self.recorded.append((promql, keep, per_node))
            return Answer()
        pending = self._pending.pop(promql, None)
        try:
            answer = pending.result() if pending is not None else self._ask(promql, keep, per_node)
        except QueryFailed as exc:
            if required and isinstance(exc, TooManySeries):
                raise SourceError(f"the selector picks more than {MAX_NODES:,} targets: judge one fleet at a time "
                                  "(--selector)") from None
            if required:
                raise NothingToJudge(f"Prometheus did not answer: {exc}") from None
            self.incomplete.append(str(exc))
            reason = str(exc)[len(promql) + 2:] if str(exc).startswith(promql + ": ") else str(exc)
            self.not_read.append((f"{what}: not read ({reason[:160]})", covers))
            return Answer(failed=True)
        finally:
            if pending is not None:
                self._send_next()
        if answer.partial:
            self.incomplete += [f"{promql}: {note}" for note in answer.partial]
            self.not_read.append((f"{what}: a partial answer (some series may be missing)", covers))
        if answer.unreadable.get(""):
            self.incomplete.append(f"{promql}: {answer.unreadable['']} sample(s) naming no instance could not be read")
            self.not_read.append((f"{what}: samples that name no node could not be read", covers))
        return answer

    def unreadable(self, answer: Answer, what: str, node: Lookup) -> None:
        """Samples that named their node but could not be read: that node's `what` is not read."""
        for instance, count in answer.unreadable.items():
            facts = node(instance) if instance else None
            if facts is not None:
                facts.add_unread(f"{what}: {count} sample(s) could not be read")


def read_prometheus(connection: Connection, selector: str = DEFAULT_SELECTOR,
                    stale_after: float = DEFAULT_STALE_AFTER) -> tuple[list[NodeFacts], list[str]]:
    """The facts of every node the selector picks, and warnings about the answers (partial, timed out)."""
    q = _Queries(connection, selector_matchers(selector))
    nodes: dict[str, NodeFacts] = {}

    def node(instance: str) -> Optional[NodeFacts]:
        return nodes.get(instance)

    targets = q.run(q.series("up"), "targets", per_node=4, required=True)  # a target in several jobs
    for instance, up in targets.samples:
        facts = nodes.setdefault(instance, NodeFacts(node=instance))
        if up == 0:
            facts.silent.append((None, None, "scrape target down (up == 0): Prometheus cannot read its metrics"))
        elif up != 1:
            facts.add_unread(f"whether Prometheus can scrape it: up is {up}")
    for instance in targets.unreadable:
        if instance:
            nodes.setdefault(instance, NodeFacts(node=instance)).add_unread("targets: its `up` could not be read")
    built = q.run(f"count by (instance) ({q.series('gpudiag_build_info')})", "gpudiag series")
    ages = q.run(f"time() - max by (instance) ({q.series('gpudiag_last_collection_timestamp_seconds')})",
                 "the last complete collection")
    gpudiag_nodes = {instance for instance, _ in built.samples} | {instance for instance, _ in ages.samples}
    down = {facts.node for facts in nodes.values() if facts.silent}
    if not gpudiag_nodes and not down and not q.incomplete:  # targets that answer, none of them gpudiag
        raise NothingToJudge(f"no gpudiag series in Prometheus at {connection.url} for {selector}")
    if not nodes and gpudiag_nodes:  # scraped by a job the selector's `up` does not match (textfile via node_exporter)
        for instance in sorted(gpudiag_nodes)[:MAX_NODES]:
            nodes[instance] = NodeFacts(node=instance)
    if not nodes:
        raise NothingToJudge(f"no scrape target in Prometheus at {connection.url} matches {selector}")
    q.instances = set(nodes)

    # The rest depend only on the nodes found: sent together, so that Prometheus works on several at once.
    recorder = _Queries(connection, q.matchers, recording=True)
    evidence = _Evidence()
    _read_rest(recorder, node, evidence)
    with ThreadPoolExecutor(PARALLEL_QUERIES) as pool:
        q.send(recorder.recorded, pool)
        _read_rest(q, node, evidence)
    for answer, what in ((built, "gpudiag series"), (ages, "the last complete collection")):
        q.unreadable(answer, what, node)
    first_read = not (built.failed or built.partial or ages.failed or ages.partial)
    for facts in nodes.values():
        if facts.node not in down:
            _collection_evidence(facts, dict(ages.samples), gpudiag_nodes, evidence, stale_after, first_read)
    for what, covers in q.not_read:
        for facts in nodes.values():
            if covers is None or facts.node in covers:
                facts.add_unread(what)
    return list(nodes.values()), [f"incomplete: {reason}" for reason in q.incomplete]


class _Evidence:
    """Per node, what shows that its last collection was complete: its failing collectors and its check series."""

    def __init__(self) -> None:
        self.failing_collectors: dict[str, list[tuple[str, float]]] = defaultdict(list)
        self.check_series: dict[str, float] = {}
        self.not_ok: set[str] = set()  # nodes with a gpudiag_check_ok series of a value other than 1
        self.read = True  # both queries answered


def _collection_evidence(facts: NodeFacts, ages: dict[str, float], gpudiag_nodes: set[str], evidence: _Evidence,
                         stale_after: float, answered: bool) -> None:
    """Silent or unread unless the node shows a recent complete collection with check results (module doc)."""
    age = ages.get(facts.node)
    if facts.node not in gpudiag_nodes:
        if answered:
            facts.silent.append((None, None, "the target answers but exports no gpudiag series"))
        return
    if age is None:
        if answered:
            facts.silent.append((None, None, "the exporter answers but no collection has completed yet (no "
                                             "gpudiag_last_collection_timestamp_seconds): a GPU may be hanging"))
        return
    if not math.isfinite(age):
        facts.add_unread(f"the last complete collection: its time is not a number ({age})")
        return
    if age > stale_after:
        facts.silent.append((None, None, f"exporter stale: its last complete collection was {age:.0f} s ago "
                                         f"(more than {stale_after:g} s)"))
        return
    failing = evidence.failing_collectors.get(facts.node, [])
    for collector, success in failing:
        series = f'gpudiag_collector_success{{collector="{collector}"}} {success:g}'
        if collector == "collection":
            facts.silent.append((None, None, f"its last collection did not complete ({series}: it overran or "
                                             f"failed); the series left are older, or missing"))
        else:
            facts.add_unread(f"its last cycle's {collector} did not complete ({series})")
    count = evidence.check_series.get(facts.node)
    if not failing and evidence.read and not (count is not None and math.isfinite(count) and count >= 1):
        facts.add_unread("no check results (no gpudiag_check_ok series): nothing shows it sound")


def _read_rest(q: _Queries, node: Lookup, evidence: _Evidence) -> None:
    _read_evidence(q, node, evidence)
    _read_gpus(q, node)
    _read_checks(q, node, evidence)
    _read_properties(q, node)
    _read_figures(q, node)
    _read_screening(q, node)


def _read_screening(q: _Queries, node: Lookup) -> None:
    """Each GPU's overdue seconds and whether it was ever verified (fleet/screening.py): nodes that screen."""
    verified: set[tuple[str, int]] = set()
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_screen_last_verified_timestamp_seconds')})",
             "when its GPUs were last screened", (), lambda f, gpu, labels, v: verified.add((f.node, gpu)))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_screen_overdue_seconds')})",
             "how overdue its GPUs' screens are", (),
             lambda f, gpu, labels, v: screening.from_metrics(f, gpu, v, (f.node, gpu) in verified))


def _read_evidence(q: _Queries, node: Lookup, evidence: _Evidence) -> None:
    """The failing collectors; and per node, how many check series it has of each value: one pass over
    gpudiag_check_ok says which nodes have check results at all and which have one that is not OK (only those
    are then asked which: _read_checks)."""
    what = "whether its last collection completed"
    collectors = q.run(f"{q.series('gpudiag_collector_success', _is('collector', '=~', 'collection|checks'))} != 1",
                       what, ("instance", "collector"), per_node=4)
    values = q.run(f'count_values by (instance) ("ok", {q.series("gpudiag_check_ok")})', "its check results",
                   ("instance", "ok"), per_node=8)
    evidence.read = not (collectors.failed or values.failed)
    q.unreadable(collectors, what, node)
    q.unreadable(values, "its check results", node)
    for instance, collector, success in collectors.samples:
        evidence.failing_collectors[instance].append((collector, success))
    for instance, ok, count in values.samples:
        evidence.check_series[instance] = evidence.check_series.get(instance, 0) + count
        if ok != "1":
            evidence.not_ok.add(instance)
    evidence.not_ok.update(values.dropped)  # more than 8 distinct values: not all 1


def _narrowed(instances: set[str]) -> list[str]:
    """A matcher for exactly `instances`, when they are few enough to name (else none: every node is asked)."""
    return [_is("instance", "=~", _alternation(sorted(instances)))] if len(instances) <= MAX_NAMED_INSTANCES else []


def _gpu(label: str) -> Optional[int]:
    try:
        return int(label) if label != "" else None
    except ValueError:
        return None


def _read_gpus(q: _Queries, node: Lookup) -> None:
    down = q.run(f"{q.series('gpudiag_device_up')} != 1", "whether its GPUs answer", ("instance", "gpu", "pci_bus_id"),
                 per_node=MAX_GPUS)
    q.unreadable(down, "whether its GPUs answer", node)
    for instance, count in down.dropped.items():
        if node(instance) is not None:
            node(instance).more_silent += count
    for instance, gpu, bus_id, up in down.samples:
        facts = node(instance)
        if facts is not None:
            facts.add_silent(_gpu(gpu), bus_id or None, f"GPU does not answer its probe (gpudiag_device_up {up:g})")
    models: dict[str, defaultdict] = defaultdict(lambda: defaultdict(int))
    info = q.run("max by (instance, gpu, pci_bus_id, model, vbios_version, driver_version) "
                 f"({q.series('gpudiag_gpu_info')})", "GPU identity",
                 ("instance", "gpu", "pci_bus_id", "model", "vbios_version", "driver_version"), per_node=MAX_GPUS)
    _over_gpus(q, info, "GPU identity", node)
    for instance, gpu_label, bus_id, model, vbios, driver, _ in info.samples:
        facts, gpu = node(instance), _gpu(gpu_label)
        if facts is None or gpu is None or not facts.known_gpu(gpu):
            continue
        if bus_id:
            facts.bus_ids[gpu] = bus_id
        if model:
            models[facts.node][model] += 1
        facts.gpu_property(gpu, "vbios_version", vbios)
        if driver:
            facts.properties["driver_version"] = driver
    for instance, counts in models.items():
        node(instance).model = min(counts, key=lambda m: (-counts[m], m))


def _over_gpus(q: _Queries, answer: Answer, what: str, node: Lookup) -> None:
    q.unreadable(answer, what, node)
    for instance in answer.dropped:
        facts = node(instance)
        if facts is not None:
            facts.add_unread(f"{what}: GPUs past the first {MAX_GPUS}")


def _read_checks(q: _Queries, node: Lookup, evidence: _Evidence) -> None:
    """The (check, GPU) pairs that are not OK (gpudiag_check_ok 0: fail or unknown; NaN or another value:
    unreadable), asked of the nodes _read_evidence found with one; then which of them are `unknown`, asked of the
    failing nodes. Warnings are not read from Prometheus: they change no exit code, and reading them costs a pass
    over a fifth of the state set."""
    if q.recording or not evidence.not_ok:
        return
    failing: dict[tuple[str, str, str], Failure] = {}
    not_ok = q.run(f"{q.series('gpudiag_check_ok', *_narrowed(evidence.not_ok))} != 1", "its failing checks",
                   ("instance", "check", "gpu"), per_node=MAX_FAILURES, covers=set(evidence.not_ok))
    q.unreadable(not_ok, "its failing checks", node)
    for instance, count in not_ok.dropped.items():
        if node(instance) is not None:
            node(instance).more_failures["fail"] += count
    for instance, check, gpu, ok in not_ok.samples:
        facts = node(instance)
        if facts is None or not check:
            continue
        if ok != 0:
            facts.add_unread(f"check {check}{f' on GPU {gpu}' if gpu else ''}: gpudiag_check_ok is {ok}, not 0 or 1")
            continue
        failure = Failure(check=check, status="fail", gpu=_gpu(gpu))
        failing[(instance, check, gpu)] = failure
        facts.add_failure(failure)
    if failing:
        instances = {instance for instance, _, _ in failing}
        undecided = q.run(f'{q.series("gpudiag_check_status", _is("status", "=", "unknown"), *_narrowed(instances))}'
                          " == 1", "which failing checks could not decide", ("instance", "check", "gpu"),
                          per_node=MAX_FAILURES, covers=instances)
        for instance, check, gpu, _ in undecided.samples:
            found = failing.get((instance, check, gpu))
            if found is not None:
                found.status = "unknown"
    fallen = _fallen_off_the_bus(q, failing)
    nics = _named_nics(q, failing)
    for key, failure in failing.items():
        status = Status(failure.status)
        failure.action, failure.fault_code = TABLE.get(failure.check, {}).get(
            status, ("drain" if status is Status.FAIL else "watch", None))
        failure.message = "fails" if status is Status.FAIL else "could not decide (unknown): not shown healthy"
        if key in fallen:  # the action and fault code the node's own report gives Xid 79
            failure.action, failure.fault_code = FALLEN_OFF_BUS.verdict, FALLEN_OFF_BUS.fault_code
            failure.message = "fails: Xid 79 (GPU has fallen off the bus)"
        if key in nics:  # a network check's result is the node's: the NIC ports it is about (issue 36 item 4)
            failure.message += f" on {', '.join(nics[key])}"
        failure.remediation = f"`gpudiag check --only {failure.check}` on the node says what was seen and what to do."


XID_CHECK = "kernel_log.xid"


def _fallen_off_the_bus(q: _Queries, failing: dict[tuple[str, str, str], Failure]) -> set[tuple[str, str, str]]:
    """The failing kernel_log.xid results of GPUs that logged Xid 79 (gpudiag_gpu_xid_errors_total, code 79): the
    report's verdict for them is Xid 79's (reboot), not kernel_log.xid's default (drain), and a lost GPU's record of
    its own loss follows from it (fleet/consequences.py). Asked of the nodes with such a failure only."""
    xid = {key for key, failure in failing.items() if key[1] == XID_CHECK and failure.status == "fail"}
    if not xid:
        return set()
    instances = {instance for instance, _, _ in xid}
    answer = q.run(f'{q.series("gpudiag_gpu_xid_errors_total", _is("code", "=", "79"), *_narrowed(instances))} > 0',
                   "which GPUs logged Xid 79", ("instance", "gpu"), per_node=MAX_GPUS, covers=instances)
    return {(instance, XID_CHECK, gpu) for instance, gpu, _ in answer.samples} & xid


def _named_nics(q: _Queries, failing: dict[tuple[str, str, str], Failure]) -> dict[tuple[str, str, str], list[str]]:
    """The NIC ports a node-level failing network check is about, as the checklist names them (`NIC mlx5_4
    (0000:3b:00.0) port 1`): gpudiag_nic_check_status, asked of the nodes with such a failure only."""
    network = {key for key in failing if key[2] == "" and key[1].startswith("network.")}
    if not network:
        return {}
    instances = {instance for instance, _, _ in network}
    answer = q.run(f'{q.series("gpudiag_nic_check_status", _is("status", "=~", "fail|unknown"), *_narrowed(instances))}'
                   " == 1", "which NIC ports fail", ("instance", "check", "nic", "pci_bus_id", "port"),
                   per_node=MAX_FAILURES, covers=instances)
    named: dict[tuple[str, str, str], list[str]] = {}
    for instance, check, nic, bus, port, _ in answer.samples:
        if (instance, check, "") in network and nic:
            label = Subject(None, bus or None, nic=nic, port=int(port) if port.isdigit() else None).label
            named.setdefault((instance, check, ""), []).append(label)
    return {key: sorted(labels) for key, labels in named.items()}


def _alternation(names: list[str]) -> str:
    """A PromQL-quoted RE2 alternation matching exactly `names`."""
    escaped = "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name) for name in names)
    return escaped.replace("\\", "\\\\").replace('"', '\\"')


def _per_gpu(q: _Queries, node: Lookup, promql: str, what: str, keep: tuple[str, ...],
             store: Callable[[NodeFacts, int, tuple, float], None]) -> None:
    """A per-GPU query: each sample's node, GPU and value to `store`; a non-finite value is unreadable."""
    answer = q.run(promql, what, ("instance", "gpu", *keep), per_node=MAX_GPUS * 2)
    _over_gpus(q, answer, what, node)
    for instance, gpu_label, *labels, reading in answer.samples:
        facts, gpu = node(instance), _gpu(gpu_label)
        if facts is None or gpu is None or not facts.known_gpu(gpu):
            continue
        if not math.isfinite(reading):
            facts.add_unread(f"{what} of GPU {gpu} is not a finite number ({reading}): not compared")
            continue
        store(facts, gpu, tuple(labels), reading)


def _read_properties(q: _Queries, node: Lookup) -> None:
    runtimes = q.run(f"max by (instance, runtime_version) ({q.series('gpudiag_backend_info')})", "runtime version",
                     ("instance", "runtime_version"), per_node=4)
    q.unreadable(runtimes, "runtime version", node)
    for instance, runtime, _ in runtimes.samples:
        if node(instance) is not None and runtime:
            node(instance).properties["runtime_version"] = runtime
    answering = q.run(f"max by (instance) ({q.series('gpudiag_node_gpus', _is('source', '=', 'answering'))})",
                      "GPU count")
    q.unreadable(answering, "GPU count", node)
    for instance, count in answering.samples:
        facts = node(instance)
        if facts is not None and math.isfinite(count) and 0 <= count <= MAX_GPUS:
            facts.properties["gpu_count"] = str(int(count))
        elif facts is not None:
            facts.add_unread(f"GPU count: {count} is not a GPU count")
    links: dict[tuple[str, int, str], dict[str, float]] = defaultdict(dict)
    for metric, part in (("gpudiag_gpu_pcie_link_generation", "generation"),
                         ("gpudiag_gpu_pcie_link_width_lanes", "width")):
        _per_gpu(q, node, f"max by (instance, gpu, kind) ({q.series(metric, _is('kind', '=', 'max'))})",
                 f"PCIe link {part}", ("kind",),
                 lambda f, gpu, labels, v, part=part: links[(f.node, gpu, labels[0])].update({part: v}))
    for (instance, gpu, _), link in links.items():
        node(instance).gpu_property(gpu, "pcie_slot_max", pcie_link(link.get("generation"), link.get("width")))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_gpu_power_limit_watts')})", "power limit", (),
             lambda f, gpu, labels, v: f.gpu_property(gpu, "power_limit", watts(v)))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_gpu_ecc_enabled', _is('mode', '=', 'current'))})",
             "ECC mode", (), lambda f, gpu, labels, v: f.gpu_property(gpu, "ecc_mode", ecc_mode(int(v))))


def _read_figures(q: _Queries, node: Lookup) -> None:
    def figure(name: str) -> Callable[[NodeFacts, int, tuple, float], None]:
        def store(facts: NodeFacts, gpu: int, labels: tuple, reading: float) -> None:
            key = name.format(direction=labels[0] if labels else "")
            if key in FIGURES:  # a direction this gpudiag does not know is not compared
                facts.figure(key, gpu, reading, FIGURES[key])

        return store

    _per_gpu(q, node, "max by (instance, gpu, direction) "
                      f"({q.series('gpudiag_active_copy_bandwidth_bytes_per_second')})", "host copy bandwidth",
             ("direction",), figure("copy_{direction}"))
    _per_gpu(q, node, f"min by (instance, gpu) ({q.series('gpudiag_active_p2p_bandwidth_bytes_per_second')})",
             "GPU-to-GPU copy bandwidth", (), figure("p2p_min"))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_active_stress_fp32_flops')})",
             "FP32 throughput under stress", (), figure("stress_fp32"))
