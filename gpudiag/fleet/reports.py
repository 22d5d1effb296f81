"""Source: `gpudiag check --format json` reports (files, a directory of them, or `-`: a stream of reports).

Each report is read through gpudiag.fileio's bounded reader (regular files only, a size cap, bounded nesting) and
reduced to a NodeFacts at once, so memory grows with the fleet's facts, not with its reports. A stream (standard
input: `srun ... gpudiag check --format json | gpudiag fleet -`) holds concatenated or newline-delimited reports;
each is bounded like a file, and the stream as a whole by STREAM_MAX_BYTES.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from typing import IO, Any, Iterable, Iterator, Optional

from gpudiag.fileio import DocumentError, nesting_exceeds, read_json, read_text
from gpudiag.fleet.model import FIRMWARE_PREFIX, Failure, NodeFacts, NothingToJudge, SourceError, ecc_mode, watts

REPORT_MAX_BYTES = 16 << 20  # an 8-GPU level-2 report is ~100 KB; a kernel log full of events can grow it
STREAM_MAX_BYTES = 4 << 30  # 2,000 nodes of the largest reports stay well inside
MAX_FILES = 100_000
STDIN = "-"
EXPECTED_MAX_BYTES = 4 << 20  # --nodes: 100,000 hostnames
EMPTY = object()  # an empty report file
_CHUNK = 1 << 20

# active.* check → the figure it measures, and how to read it from `observed` (scaled to B/s, FLOP/s)
_FIGURES = {
    "active.pcie_h2d_bandwidth": ("copy_h2d", "gb_per_second", 1e9),
    "active.pcie_d2h_bandwidth": ("copy_d2h", "gb_per_second", 1e9),
    "active.stress": ("stress_fp32", "fp32_tflops", 1e12),
}


def read_reports(paths: Iterable[str], stdin: Optional[IO[bytes]] = None,
                 expected: Optional[list[str]] = None) -> tuple[list[NodeFacts], list[str]]:
    """The facts of every report under `paths`; one per hostname (the newest `collected_at` when a host has
    several, with a warning). An empty report file is its node (the file's name) gone silent: `srun --output
    reports/%N.json` leaves one where gpudiag crashed or was killed. `expected` (hostnames) names the nodes that
    should have reported: a missing one is silent. SourceError for a bad path or report, NothingToJudge when none
    was found."""
    latest: dict[str, tuple[str, NodeFacts]] = {}
    duplicates: Counter = Counter()
    for origin, report in _documents(paths, stdin):
        if report is EMPTY:
            name = os.path.basename(origin)[:-len(".json")] if origin.endswith(".json") else os.path.basename(origin)
            facts, collected_at = NodeFacts(node=name, silent=[(None, None, f"its report {origin} is empty: "
                                                                "gpudiag wrote nothing there (crashed, killed, or "
                                                                "never ran)")]), ""
        else:
            facts, collected_at = node_facts(report, origin)
        previous = latest.get(facts.node)
        if previous is not None:
            duplicates[facts.node] += 1
            if previous[0] > collected_at:
                continue
        latest[facts.node] = (collected_at, facts)
    if not latest:
        raise NothingToJudge("no gpudiag reports found")
    warnings = [f"{host}: {count + 1} reports, judged the newest" for host, count in sorted(duplicates.items())]
    nodes = [facts for _, facts in latest.values()]
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
    """Hostnames, one a line (`scontrol show hostnames "$SLURM_JOB_NODELIST"`, `kubectl get nodes -o name`); blank
    lines and #comments are skipped; `node/` prefixes as kubectl prints them are dropped."""
    try:
        text = read_text(path, EXPECTED_MAX_BYTES)
    except DocumentError as exc:
        raise SourceError(f"--nodes {path}: {exc}") from None
    hosts = [line.split("#", 1)[0].strip().removeprefix("node/") for line in text.splitlines()]
    hosts = [host for host in hosts if host]
    if not hosts:
        raise SourceError(f"--nodes {path}: no hostname in it")
    return hosts


def _documents(paths: Iterable[str], stdin: Optional[IO[bytes]]) -> Iterator[tuple[str, Any]]:
    for path in paths:
        if path == STDIN:
            yield from read_stream(stdin, "standard input")
        elif os.path.isdir(path):
            files = sorted(entry.path for entry in os.scandir(path) if entry.name.endswith(".json"))
            if len(files) > MAX_FILES:
                raise SourceError(f"{path}: more than {MAX_FILES} reports")
            for file in files:
                yield file, _read_file(file)
        else:
            yield path, _read_file(path)


def _read_file(path: str) -> Any:
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size == 0:
            return EMPTY
    except OSError:
        pass  # read_json says what is wrong with it
    try:
        return read_json(path, REPORT_MAX_BYTES)
    except DocumentError as exc:
        raise SourceError(f"{path}: {exc}") from None


def read_stream(stream: Optional[IO[bytes]], name: str) -> Iterator[tuple[str, Any]]:
    """Concatenated (or newline-delimited) JSON documents; each at most REPORT_MAX_BYTES, all STREAM_MAX_BYTES."""
    if stream is None:
        raise SourceError(f"{name}: no stream to read")
    decoder = json.JSONDecoder()
    buffer, total, count, eof = "", 0, 0, False
    pending = b""
    while True:
        buffer = buffer.lstrip()
        if buffer:
            try:
                document, end = decoder.raw_decode(buffer)
            except RecursionError:
                raise SourceError(f"{name}: report {count + 1}: nested too deeply") from None
            except ValueError as exc:
                if eof or len(buffer) > REPORT_MAX_BYTES:
                    what = "too large" if len(buffer) > REPORT_MAX_BYTES else f"not JSON: {exc}"
                    raise SourceError(f"{name}: report {count + 1}: {what}") from None
            else:
                count += 1
                if nesting_exceeds(document, 64):
                    raise SourceError(f"{name}: report {count}: nested too deeply")
                buffer = buffer[end:]
                yield f"{name} (report {count})", document
                continue
        if eof:
            return
        chunk = stream.read(_CHUNK)
        total += len(chunk)
        if total > STREAM_MAX_BYTES:
            raise SourceError(f"{name}: more than {STREAM_MAX_BYTES >> 30} GiB")
        if not chunk:
            eof = True
            chunk = b""
        data = pending + chunk
        try:  # a multi-byte character may straddle two chunks
            text, pending = data.decode("utf-8"), b""
        except UnicodeDecodeError as exc:
            if exc.start < len(data) - 3 or eof:
                raise SourceError(f"{name}: not UTF-8 text") from None
            text, pending = data[:exc.start].decode("utf-8"), data[exc.start:]
        buffer += text


# -- one report → NodeFacts -------------------------------------------------------------------------------------


def node_facts(report: Any, origin: str) -> tuple[NodeFacts, str]:
    """The facts a `gpudiag check --format json` report holds (schema_version 1), and when it was collected."""
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise SourceError(f"{origin}: not a gpudiag check report (no results list)")
    if report.get("schema_version") != 1:
        raise SourceError(f"{origin}: schema_version {report.get('schema_version')!r}, this gpudiag reads 1")
    hostname = report.get("hostname")
    if not isinstance(hostname, str) or not hostname.strip():
        raise SourceError(f"{origin}: the report names no hostname")
    facts = NodeFacts(node=hostname.strip())
    models: Counter = Counter()
    indices = set()
    for result in report["results"]:
        if not isinstance(result, dict) or not isinstance(result.get("check"), str):
            raise SourceError(f"{origin}: a result without a check ID")
        device = result.get("device") if isinstance(result.get("device"), dict) else None
        gpu = device.get("index") if device and isinstance(device.get("index"), int) else None
        if gpu is not None:
            indices.add(gpu)
            if isinstance(device.get("pci_bus_id"), str):
                facts.bus_ids[gpu] = device["pci_bus_id"]
            if isinstance(device.get("model"), str):
                models[device["model"]] += 1
        _judged(facts, result, gpu)
        _properties(facts, result, gpu)
    facts.model = min(models, key=lambda m: (-models[m], m)) if models else None
    if "gpu_count" not in facts.properties and indices:
        facts.properties["gpu_count"] = str(len(indices))
    collected_at = report.get("collected_at")
    return facts, collected_at if isinstance(collected_at, str) else ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _judged(facts: NodeFacts, result: dict, gpu: Optional[int]) -> None:
    status = result.get("status")
    if status in ("fail", "unknown"):
        device = result.get("device") or {}
        facts.failures.append(Failure(
            check=result["check"], status=status, gpu=gpu, pci_bus_id=device.get("pci_bus_id") or None,
            action=_text(result.get("action")) or ("drain" if status == "fail" else "watch"),
            fault_code=result.get("fault_code") if isinstance(result.get("fault_code"), str) else None,
            message=_text(result.get("message")), remediation=_text(result.get("remediation"))))
    elif status == "warn":
        facts.warnings.append(result["check"])


def _properties(facts: NodeFacts, result: dict, gpu: Optional[int]) -> None:
    check, observed, status = result["check"], result.get("observed"), result.get("status")
    if not isinstance(observed, dict):
        return
    if check == "driver.library":
        for name in ("driver_version", "runtime_version"):
            if isinstance(observed.get(name), str) and observed[name]:
                facts.properties[name] = observed[name]
        if isinstance(observed.get("device_count"), int):
            facts.properties["gpu_count"] = str(observed["device_count"])
    elif check == "firmware.vbios_consistent":  # {version: [GPU indices]}
        for version, members in observed.items():
            for index in members if isinstance(members, list) else ():
                if isinstance(index, int):
                    facts.gpu_property(index, "vbios_version", version)
    elif check == "firmware.versions_consistent" and status == "pass":  # {component: version}, alike on every GPU
        for index in sorted(facts.bus_ids):
            for component, version in observed.items():
                if isinstance(version, str):
                    facts.gpu_property(index, FIRMWARE_PREFIX + component, version)
    elif gpu is None:
        return
    elif check == "pcie.link_generation":
        # The slot's maximum: what the platform allows (BIOS setting, riser, retimer). The GPU's own maximum is its
        # model's, and the exporter does not always have it (sysfs vs NVML), so it is not compared.
        slot_max = observed.get("slot_max")
        facts.gpu_property(gpu, "pcie_slot_max", slot_max if isinstance(slot_max, str) else None)
    elif check == "power.limit":
        facts.gpu_property(gpu, "power_limit", watts(observed.get("limit_watts")))
    elif check == "ecc.mode":
        facts.gpu_property(gpu, "ecc_mode", ecc_mode(observed.get("enabled")))
    elif check == "inventory.partition_mode":
        facts.gpu_property(gpu, "partition_mode", json.dumps(observed, sort_keys=True))
    elif check == "active.p2p_bandwidth" and isinstance(observed.get("gb_per_second"), (int, float)):
        value = observed["gb_per_second"] * 1e9
        key = ("p2p_min", gpu)
        facts.figures[key] = min(value, facts.figures.get(key, value))
    elif check in _FIGURES:
        figure, field, scale = _FIGURES[check]
        if isinstance(observed.get(field), (int, float)) and not isinstance(observed.get(field), bool):
            facts.figures[(figure, gpu)] = observed[field] * scale


