"""The field corpus (tests/fixtures/field/<vendor>/*.json, the format in docs/field-corpus.md): loading its records,
and replaying one through `gpudiag check --kernel-log FILE` on a fake node whose GPUs carry the bus IDs its
expectations name. Shared by tests/probe/kernel_log/test_field_corpus.py and tools/gen_field_corpus_doc.py."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional

from tests.support.paths import FIXTURES

FIELD = FIXTURES / "field"
NVIDIA_CHECKS = ("kernel_log.xid", "kernel_log.sxid")
AMD_CHECKS = ("kernel_log.amdgpu_errors",)
GPU_CHECKS = ("kernel_log.xid", "kernel_log.amdgpu_errors")  # their pci_bus_id is a GPU's
REQUIRED = ("id", "format", "log", "source_verdict", "expect")
# Kernel-log records, by vendor; field/amdsmi/ holds amd-smi outputs, replayed by
# tests/probe/amdsmi/test_field_outputs.py.
KERNEL_LOG_DIRS = ("nvidia", "amd")


@dataclass(frozen=True)
class Record:
    source_file: Path
    source: str
    what: str
    data: dict
    corpus_set: Optional[str] = None  # the document's `set`: which collection it came in (e.g. issue-32's)

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def vendor(self) -> str:
        return self.source_file.parent.name


def records() -> list[Record]:
    out = []
    for path in sorted(p for vendor in KERNEL_LOG_DIRS for p in (FIELD / vendor).glob("*.json")):
        document = json.loads(path.read_text())
        for data in document["records"]:
            out.append(Record(path, document["source"], document["what"], data, document.get("set")))
    return out


def gpus_named(record: Record) -> list[str]:
    """The GPU bus IDs the fake node must carry: those the GPU checks' expectations name, unless marked as not in
    the inventory (a GPU that fell off the bus before the driver listed it)."""
    named = []
    for expect in record.data["expect"] + record.data.get("absent", []):
        bus = expect.get("pci_bus_id")
        if expect["check"] in GPU_CHECKS and bus and expect.get("in_inventory", True) and bus not in named:
            named.append(bus)
    named += [bus for bus in record.data.get("pci_parents", {}) if bus not in named]  # GPUs below a port a line names
    return named


def vendor_of(record: Record) -> str:
    checks = {e["check"] for e in record.data["expect"]}
    return "amd" if checks & set(AMD_CHECKS) else "nvidia"


def matches(result: dict, expect: dict) -> bool:
    """Whether a JSON result is the one an expectation names: its check, and its GPU (by bus ID), its NVSwitch (an
    SXid result's observed.nvswitch_pci_bus_id) or, for a GPU outside the inventory or none named, the node-level
    result that carries that bus ID (observed.pci_bus_id; null: the line named no GPU)."""
    if result["check"] != expect["check"]:
        return False
    bus = expect.get("pci_bus_id")
    observed = result.get("observed") or {}
    if expect["check"] == "kernel_log.sxid" and bus is not None:
        return observed.get("nvswitch_pci_bus_id") == bus
    device = result.get("device")
    if device is not None:
        return bus is not None and device.get("pci_bus_id") == bus
    if "pci_bus_id" in observed:
        return observed["pci_bus_id"] == bus
    return bus is None


def check(result: dict, expect: dict) -> Optional[str]:
    """What differs between a matched result and its expectation, or None."""
    wrong = []
    for key in ("status", "action", "fault_code"):
        if key in expect and result.get(key) != expect[key]:
            wrong.append(f"{key} {result.get(key)!r}, expected {expect[key]!r}")
    events = (result.get("observed") or {}).get("events") or {}
    if "events" in expect and sum(events.values()) != expect["events"]:
        wrong.append(f"{sum(events.values())} event(s) {events}, expected {expect['events']}")
    return "; ".join(wrong) or None


def summary(record: Record) -> dict[str, Any]:
    """One row of docs/field-corpus.md."""
    first = record.data["expect"][0] if record.data["expect"] else {}
    return {"id": record.id, "vendor": record.vendor, "format": record.data["format"],
            "gpu_model": record.data.get("gpu_model"), "driver": record.data.get("driver"),
            "check": first.get("check"), "status": first.get("status"), "action": first.get("action"),
            "source": record.source, "file": record.source_file.name}


class Reading(NamedTuple):
    """How gpudiag read one record: what differs from its expectations (empty: read right), and whether any of it
    is a false alarm (a non-pass where the record expects a pass, or a result its `absent` list forbids)."""
    problems: list[str]
    false_alarm: bool

    @property
    def right(self) -> bool:
        return not self.problems


def _nvidia_root(tmp_path: Path, buses: list[str], parents: Optional[dict[str, list[str]]] = None):
    """An HGX-class node with a GPU at each named bus; `parents` (a record's `pci_parents`) puts a GPU below the
    bridges it names, root port first, in the sysfs tree gpudiag reads a GPU's bridges from."""
    from tests.support.fakes.fake_nvml import HGX_BUS_IDS, FakeGpu, FakeNode, installed
    from tests.support.nvidia_node import sysfs_for

    fillers = [f"0000:{b.lower()[9:]}" for b in HGX_BUS_IDS if f"0000:{b.lower()[9:]}" not in buses]
    chosen = (buses + fillers)[:max(2, len(buses))]  # two at least: an NVSwitch fabric (kernel_log.sxid runs)
    gpus = [FakeGpu(bus_id=f"0000{bus}" if len(bus) == 12 else bus,
                    uuid=f"GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a{i:02x}", serial=f"16548240001{i:02d}",
                    minor_number=i)
            for i, bus in enumerate(chosen)]
    node = FakeNode(gpus=gpus)
    sysfs_for(node, tmp_path, parents)
    return installed(node), tmp_path


def _amd_root(tmp_path: Path, buses: list[str], parents: dict[str, list[str]]):
    """An MI300X-class node with a GPU at each named bus (the fake places GPUs at 0000:BB:00.0); `parents` (a
    record's `pci_parents`) gives a GPU the bridges above it, root port first, for errors that name a port."""
    from tests.probe.amdsmi.test_end_to_end import node_root
    from tests.support.fakes.amd_node import MI300X_BUSES, FakeAmdGpu, FakeAmdNode
    from tests.support.fakes.fake_amdsmi import installed

    for bus in buses:
        assert bus.startswith("0000:") and bus.endswith(":00.0"), f"the fake AMD node cannot place a GPU at {bus}"
    numbers = [int(b.split(":")[1], 16) for b in buses]
    numbers += [n for n in MI300X_BUSES if n not in numbers]
    gpus = [FakeAmdGpu(bus=n, index=i) for i, n in enumerate(numbers[:max(1, len(buses))])]
    for gpu, bus in zip(gpus, buses):
        chain = parents.get(bus)
        if chain:
            gpu.bridges, gpu.upstream_port = tuple(chain[:-1]), chain[-1]
    node = FakeAmdNode(gpus=gpus)
    root, _ = node_root(tmp_path, node)
    return installed(node), root


def replay(record: Record, tmp_path: Path) -> Reading:
    """`gpudiag check --kernel-log FILE --json --only kernel_log` over the record on a fake node whose GPUs carry
    the bus IDs it names, and what differs from its expectations."""
    from gpudiag.cli import app as cli

    log = tmp_path / "kernel.log"
    log.write_text(record.data["log"] + "\n", encoding="utf-8")
    buses = gpus_named(record)
    if vendor_of(record) == "amd":
        fake, root = _amd_root(tmp_path / "node", buses, record.data.get("pci_parents", {}))
    else:
        fake, root = _nvidia_root(tmp_path / "node", buses, record.data.get("pci_parents", {}))
    out = io.StringIO()
    with fake, contextlib.redirect_stdout(out):
        code = cli.main(["check", "--json", "--root", str(root), "--kernel-log", str(log), "--only", "kernel_log"])
    if code not in (0, 1):
        return Reading([f"exit {code}: {out.getvalue()[:300]}"], False)
    results = json.loads(out.getvalue())["results"]
    problems, false_alarm = [], False
    for expect in record.data["expect"]:
        found = [r for r in results if matches(r, expect)]
        if not found and expect.get("pci_bus_id") is None and expect["status"] == "pass":
            # benign lines that name no GPU: nothing of that check may be other than a pass, on any GPU
            alarms = [f"{r['check']} {r['status']}: {r['message']}" for r in results
                      if r["check"] == expect["check"] and r["status"] != "pass"]
            problems += alarms
            false_alarm = false_alarm or bool(alarms)
            continue
        if not found:
            problems.append(f"no {expect['check']} result for {expect.get('pci_bus_id')}: "
                            f"{[(r['check'], r['status'], r['message']) for r in results]}")
            continue
        for r in found:
            why = check(r, expect)
            if why:
                problems.append(f"{expect['check']} {expect.get('pci_bus_id')}: {why} — {r['message']}")
                false_alarm = false_alarm or (expect["status"] == "pass" and r["status"] != "pass")
    for absent in record.data.get("absent", []):
        alarms = [f"unexpected {r['check']} {r['status']}: {r['message']}" for r in results
                  if matches(r, absent) and r["status"] != "pass"]
        problems += alarms
        false_alarm = false_alarm or bool(alarms)
    return Reading(problems, false_alarm)
