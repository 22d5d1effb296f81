"""Source: a Prometheus server that scrapes `gpudiag serve` (or node_exporter's textfile of `gpudiag textfile`).

A fixed set of queries whatever the fleet's size (never one per node), each aggregated in PromQL down to the
labels the judgement needs: 2,000 nodes x 8 GPUs is ~16,000 short series per per-GPU query. Only the failing
(check, GPU) pairs and the GPUs that are down come back as such (`== 1`, `== 0` filter in Prometheus). A query
that times out or fails leaves its part out and the verdict marked incomplete; only the first (`up`) must answer.

A node is a Prometheus `instance`. Actions for failing checks come from the checks' verdict table
(gpudiag.checks.verdicts): the metric does not carry them; a node's own report may name a more specific one
(an Xid's).
"""

from __future__ import annotations

import re
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

from gpudiag.checks.verdicts import TABLE
from gpudiag.fleet.model import FIGURES, Failure, NodeFacts, NothingToJudge, SourceError, ecc_mode, pcie_link, watts
from gpudiag.fleet.prometheus_api import Connection, QueryFailed, value
from gpudiag.model import Status

DEFAULT_SELECTOR = '{job=~"gpudiag.*"}'  # the alert rules' convention: scrape jobs named gpudiag*
DEFAULT_STALE_AFTER = 600.0  # the textfile timer runs every 5 minutes; serve collects every 15 s
MAX_NAMED_INSTANCES = 200  # failing nodes named in a follow-up query; more, and it asks about every node
PARALLEL_QUERIES = 4  # a Prometheus evaluates queries concurrently (--query.max-concurrency, 20 by default)
_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


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
    """Runs the queries; `recording` only notes them (answering nothing), so that they can be sent together."""

    def __init__(self, connection: Connection, matchers: str, recording: bool = False) -> None:
        self.connection, self.matchers, self.recording = connection, matchers, recording
        self.incomplete: list[str] = []
        self.recorded: list[str] = []
        self._pending: dict[str, Future] = {}

    def series(self, metric: str, *extra: str) -> str:
        return metric + "{" + ",".join(m for m in (self.matchers, *extra) if m) + "}"

    def send(self, queries: list[str], pool: ThreadPoolExecutor) -> None:
        self._pending.update((promql, pool.submit(self.connection.query, promql)) for promql in queries)

    def run(self, promql: str, required: bool = False) -> list[dict]:
        if self.recording:
            self.recorded.append(promql)
            return []
        try:
            pending = self._pending.pop(promql, None)
            return pending.result() if pending is not None else self.connection.query(promql)
        except QueryFailed as exc:
            if required:
                raise NothingToJudge(f"Prometheus did not answer: {exc}") from None
            self.incomplete.append(str(exc))
            return []


def read_prometheus(connection: Connection, selector: str = DEFAULT_SELECTOR,
                    stale_after: float = DEFAULT_STALE_AFTER) -> tuple[list[NodeFacts], list[str]]:
    """The facts of every node the selector picks, and warnings about the answers (partial, timed out)."""
    q = _Queries(connection, selector_matchers(selector))
    nodes: dict[str, NodeFacts] = {}

    def node(sample: dict) -> Optional[NodeFacts]:
        instance = sample.get("metric", {}).get("instance")
        if not instance:
            return None
        return nodes.setdefault(instance, NodeFacts(node=instance))

    targets = q.run(q.series("up"), required=True)
    for sample in targets:
        facts = node(sample)
        if facts is not None and value(sample) == 0:
            facts.silent.append((None, None, "scrape target down (up == 0): Prometheus cannot read its metrics"))
    built = q.run(f"count by (instance) ({q.series('gpudiag_build_info')})")
    gpudiag_nodes = {sample["metric"].get("instance") for sample in built}
    for sample in q.run(f"time() - max by (instance) ({q.series('gpudiag_last_collection_timestamp_seconds')})"):
        facts, age = node(sample), value(sample)
        gpudiag_nodes.add(sample["metric"].get("instance"))
        if facts is not None and age is not None and age > stale_after:
            facts.silent.append((None, None, f"exporter stale: its last complete collection was {age:.0f} s ago "
                                             f"(more than {stale_after:g} s)"))
    down = {facts.node for facts in nodes.values() if facts.silent}
    if not gpudiag_nodes and not down and not q.incomplete:  # targets that answer, none of them gpudiag
        raise NothingToJudge(f"no gpudiag series in Prometheus at {connection.url} for {selector}")
    for facts in nodes.values():
        if facts.node not in down and facts.node not in gpudiag_nodes and not q.incomplete:
            facts.silent.append((None, None, "the target answers but exports no gpudiag series"))
    if not nodes and gpudiag_nodes:  # scraped by a job the selector's `up` does not match (textfile via node_exporter)
        for instance in gpudiag_nodes:
            nodes[instance] = NodeFacts(node=instance)
    if not nodes:
        raise NothingToJudge(f"no scrape target in Prometheus at {connection.url} matches {selector}")

    # The rest depend only on the nodes found: sent together, so that Prometheus works on several at once.
    recorder = _Queries(connection, q.matchers, recording=True)
    _read_rest(recorder, lambda sample: None)
    with ThreadPoolExecutor(PARALLEL_QUERIES) as pool:
        q.send(recorder.recorded, pool)
        _read_rest(q, node)
    warnings = connection.warnings + [f"incomplete: {reason}" for reason in q.incomplete]
    return list(nodes.values()), warnings


def _read_rest(q: _Queries, node: Callable[[dict], Optional[NodeFacts]]) -> None:
    _read_gpus(q, node)
    _read_checks(q, node)
    _read_properties(q, node)
    _read_figures(q, node)


def _gpu(sample: dict) -> tuple[Optional[int], Optional[str]]:
    labels = sample.get("metric", {})
    try:
        gpu = int(labels["gpu"]) if labels.get("gpu", "") != "" else None
    except ValueError:
        gpu = None
    return gpu, labels.get("pci_bus_id") or None


def _read_gpus(q: _Queries, node: Callable[[dict], Optional[NodeFacts]]) -> None:
    for sample in q.run(f"{q.series('gpudiag_device_up')} == 0"):
        facts = node(sample)
        if facts is not None:
            gpu, bus_id = _gpu(sample)
            facts.silent.append((gpu, bus_id, "GPU does not answer its probe (gpudiag_device_up 0)"))
    models: dict[str, defaultdict] = defaultdict(lambda: defaultdict(int))
    info = q.run("max by (instance, gpu, pci_bus_id, model, vbios_version, driver_version) "
                 f"({q.series('gpudiag_gpu_info')})")
    for sample in info:
        facts, labels = node(sample), sample["metric"]
        gpu, bus_id = _gpu(sample)
        if facts is None or gpu is None:
            continue
        if bus_id:
            facts.bus_ids[gpu] = bus_id
        if labels.get("model"):
            models[facts.node][labels["model"]] += 1
        facts.gpu_property(gpu, "vbios_version", labels.get("vbios_version"))
        if labels.get("driver_version"):
            facts.properties["driver_version"] = labels["driver_version"]
    for instance, counts in models.items():
        node({"metric": {"instance": instance}}).model = min(counts, key=lambda m: (-counts[m], m))


def _read_checks(q: _Queries, node: Callable[[dict], Optional[NodeFacts]]) -> None:
    """The failing (check, GPU) pairs from gpudiag_check_ok (0: fail or unknown), a fifth of the state set's
    series; then which of them are `unknown`, asked of the failing nodes only. Warnings are not read from
    Prometheus: they change no exit code, and reading them costs a pass over a fifth of the state set."""
    failing: dict[tuple[str, str, str], Failure] = {}
    for sample in q.run(f"{q.series('gpudiag_check_ok')} == 0"):
        facts, labels = node(sample), sample["metric"]
        if facts is None or not labels.get("check"):
            continue
        gpu, _ = _gpu(sample)
        failure = Failure(check=labels["check"], status="fail", gpu=gpu)
        failing[(facts.node, labels["check"], labels.get("gpu", ""))] = failure
        facts.failures.append(failure)
    if failing:
        instances = sorted({instance for instance, _, _ in failing})
        narrow = [_is("instance", "=~", _alternation(instances))] if len(instances) <= MAX_NAMED_INSTANCES else []
        for sample in q.run(f'{q.series("gpudiag_check_status", _is("status", "=", "unknown"), *narrow)} == 1'):
            labels = sample["metric"]
            found = failing.get((labels.get("instance", ""), labels.get("check", ""), labels.get("gpu", "")))
            if found is not None:
                found.status = "unknown"
    for failure in failing.values():
        status = Status(failure.status)
        failure.action, failure.fault_code = TABLE.get(failure.check, {}).get(
            status, ("drain" if status is Status.FAIL else "watch", None))
        failure.message = "fails" if status is Status.FAIL else "could not decide (unknown): not shown healthy"
        failure.remediation = f"`gpudiag check --only {failure.check}` on the node says what was seen and what to do."


def _alternation(names: list[str]) -> str:
    """A PromQL-quoted RE2 alternation matching exactly `names`."""
    escaped = "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name) for name in names)
    return escaped.replace("\\", "\\\\").replace('"', '\\"')


def _per_gpu(q: _Queries, node: Callable[[dict], Optional[NodeFacts]], promql: str,
             store: Callable[[NodeFacts, int, dict, float], None]) -> None:
    for sample in q.run(promql):
        facts, (gpu, _), reading = node(sample), _gpu(sample), value(sample)
        if facts is not None and gpu is not None and reading is not None:
            store(facts, gpu, sample["metric"], reading)


def _read_properties(q: _Queries, node: Callable[[dict], Optional[NodeFacts]]) -> None:
    for sample in q.run(f"max by (instance, runtime_version) ({q.series('gpudiag_backend_info')})"):
        facts = node(sample)
        if facts is not None and sample["metric"].get("runtime_version"):
            facts.properties["runtime_version"] = sample["metric"]["runtime_version"]
    for sample in q.run(f"max by (instance) ({q.series('gpudiag_node_gpus', _is('source', '=', 'answering'))})"):
        facts, count = node(sample), value(sample)
        if facts is not None and count is not None:
            facts.properties["gpu_count"] = str(int(count))
    links: dict[tuple[str, int, str], dict[str, float]] = defaultdict(dict)
    for metric, part in (("gpudiag_gpu_pcie_link_generation", "generation"),
                         ("gpudiag_gpu_pcie_link_width_lanes", "width")):
        _per_gpu(q, node, f"max by (instance, gpu, kind) ({q.series(metric, _is('kind', '=', 'max'))})",
                 lambda f, gpu, labels, v, part=part: links[(f.node, gpu, labels.get("kind", ""))].update({part: v}))
    for (instance, gpu, _), link in links.items():
        node({"metric": {"instance": instance}}).gpu_property(gpu, "pcie_slot_max", pcie_link(link.get("generation"),
                                                                                               link.get("width")))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_gpu_power_limit_watts')})",
             lambda f, gpu, labels, v: f.gpu_property(gpu, "power_limit", watts(v)))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_gpu_ecc_enabled', _is('mode', '=', 'current'))})",
             lambda f, gpu, labels, v: f.gpu_property(gpu, "ecc_mode", ecc_mode(int(v))))


def _read_figures(q: _Queries, node: Callable[[dict], Optional[NodeFacts]]) -> None:
    def figure(name: str) -> Callable[[NodeFacts, int, dict, float], None]:
        def store(facts: NodeFacts, gpu: int, labels: dict, reading: float) -> None:
            key = name.format(direction=labels.get("direction", ""))
            if key in FIGURES:  # a direction this gpudiag does not know is not compared
                facts.figures[(key, gpu)] = reading

        return store

    _per_gpu(q, node, "max by (instance, gpu, direction) "
                      f"({q.series('gpudiag_active_copy_bandwidth_bytes_per_second')})", figure("copy_{direction}"))
    _per_gpu(q, node, f"min by (instance, gpu) ({q.series('gpudiag_active_p2p_bandwidth_bytes_per_second')})",
             figure("p2p_min"))
    _per_gpu(q, node, f"max by (instance, gpu) ({q.series('gpudiag_active_stress_fp32_flops')})",
             figure("stress_fp32"))
