"""The field corpus (tests/fixtures/field/<vendor>/*.json, the format in docs/field-corpus.md): loading its records,
and replaying one through `gpudiag check --kernel-log FILE` on a fake node whose GPUs carry the bus IDs its
expectations name. Shared by tests/probe/kernel_log/test_field_corpus.py and tools/gen_field_corpus_doc.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

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
            out.append(Record(path, document["source"], document["what"], data))
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
