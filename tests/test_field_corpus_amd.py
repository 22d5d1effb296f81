"""The AMD field corpus (tests/fixtures/field/amd/*.json, format: /work docs FIELD-CORPUS-FORMAT, issue 21): every
record replayed through `gpudiag check --kernel-log FILE` on a fake MI300X-class node whose GPUs carry the bus IDs
the record names, and every expectation asserted (check, status, GPU, action, fault code).

A record may add `"pci_parents": {"<gpu bus id>": ["<root port>", ...]}`: the bridges above that GPU, root port first,
for firmware-first (APEI/GHES) errors that name a port. Until the shared runner (tests/test_field_corpus.py) lands,
the records in a line format this branch does not read (`dmesg --time-format iso`, `kernel: [..]` tags) are expected
to fail here, strictly: the first run that reads them turns the xfail into a failure to remove.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudiag.cli import main
from tests.fakes.amd_node import FakeAmdGpu, FakeAmdNode
from tests.fakes.fake_amdsmi import installed
from tests.test_amd_end_to_end import node_root

CORPUS = Path(__file__).parent / "fixtures" / "field" / "amd"
# Line formats this branch's kernel_log_events.split_line reads (the others come with issue 21's items 1-4).
READ_HERE = {"dmesg", "dmesg-T", "dmesg-notime", "journalctl-short"}
DEFAULT_BUS = "0000:05:00.0"  # the node's GPU when a record names none (node-level expectations only)


def _records() -> list[tuple[str, dict, dict]]:
    found = []
    for path in sorted(CORPUS.glob("*.json")):
        source = json.loads(path.read_text())
        for record in source["records"]:
            found.append((f"{path.stem}/{record['id']}", source, record))
    return found


RECORDS = _records()


def _params():
    for name, source, record in RECORDS:
        marks = []
        judged = any(e["status"] != "pass" for e in record["expect"])
        if record["format"] not in READ_HERE and judged:
            marks.append(pytest.mark.xfail(strict=True, reason=f"{record['format']}: a line format of issue 21 item 1"))
        yield pytest.param(source, record, id=name, marks=marks)


def _node(record: dict) -> FakeAmdNode:
    buses = [e["pci_bus_id"] for e in record["expect"] if e.get("pci_bus_id")]
    parents = record.get("pci_parents", {})
    buses = list(dict.fromkeys(buses + list(parents))) or [DEFAULT_BUS]
    gpus = []
    for index, bus_id in enumerate(buses):
        domain, bus, rest = bus_id.split(":")
        assert domain == "0000" and rest == "00.0", f"the fake node places GPUs at 0000:BB:00.0, not {bus_id}"
        gpu = FakeAmdGpu(bus=int(bus, 16), index=index)
        chain = parents.get(bus_id)
        if chain:
            gpu.bridges, gpu.upstream_port = tuple(chain[:-1]), chain[-1]
        gpus.append(gpu)
    return FakeAmdNode(gpus=gpus)


def _check(tmp_path: Path, record: dict, capsys) -> list[dict]:
    node = _node(record)
    root, kernel_log = node_root(tmp_path, node, log_lines=record["log"].split("\n"))
    with installed(node):
        main(["check", "--json", "--root", str(root), "--kernel-log", str(kernel_log), "--only", "kernel_log"])
    return json.loads(capsys.readouterr().out)["results"]


def _results_for(results: list[dict], check: str, bus_id) -> list[dict]:
    return [r for r in results if r["check"] == check
            and (r["device"] or {}).get("pci_bus_id") == bus_id]


@pytest.mark.parametrize("source, record", list(_params()))
def test_field_record(tmp_path, capsys, source, record):
    results = _check(tmp_path, record, capsys)
    for expect in record["expect"]:
        bus_id = expect.get("pci_bus_id")
        found = _results_for(results, expect["check"], bus_id)
        if bus_id is None and expect["status"] == "pass":
            assert [r["status"] for r in found if r["status"] != "pass"] == [], (expect, found)
            continue
        assert len(found) == 1, (expect, [(r["check"], r["device"], r["status"]) for r in results])
        (result,) = found
        assert result["status"] == expect["status"], (expect, result["message"])
        if "action" in expect:
            assert result["action"] == expect["action"], (expect, result["message"])
        if "fault_code" in expect:
            assert result["fault_code"] == expect["fault_code"], (expect, result["message"])


def test_the_corpus_is_well_formed_and_large_enough():
    ids = [name for name, _, _ in RECORDS]
    assert len(ids) == len(set(ids))
    for name, source, record in RECORDS:
        assert source["source"].startswith("https://") and source["what"], name
        assert set(record) >= {"id", "gpu_model", "driver", "format", "log", "source_verdict", "expect"}, name
        assert record["expect"] and all({"check", "status"} <= set(e) for e in record["expect"]), name
    benign = [name for name, _, r in RECORDS if all(e["status"] == "pass" for e in r["expect"])]
    assert len(RECORDS) >= 40 and len(benign) >= 8, (len(RECORDS), len(benign))
