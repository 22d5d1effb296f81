"""The field corpus replayed (issue 21): every record of tests/fixtures/field/**/*.json, verbatim kernel-log lines
from public sources and the lab H200, through `gpudiag check --kernel-log FILE --json` on a fake node (the fake NVML
library, or the fake libamd_smi.so for AMD records) whose GPUs carry the bus IDs the record's expectations name.
Each expectation must be met by the result it names (check, GPU / NVSwitch / node-level bus ID, status, action,
fault code, distinct events); each `absent` entry must have no result that is not a pass. One test id per record."""

from __future__ import annotations

import json
import re

import pytest

from gpudiag.cli import app as cli
from tests.support.field_corpus import FIELD, REQUIRED, Record, check, gpus_named, matches, records, vendor_of
from tests.support.paths import REPO

RECORDS = records()
BUS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _nvidia_root(tmp_path, buses: list[str]):
    from tests.support.fakes.fake_nvml import HGX_BUS_IDS, FakeGpu, FakeNode
    from tests.support.nvidia_node import sysfs_for

    fillers = [f"0000:{b.lower()[9:]}" for b in HGX_BUS_IDS if f"0000:{b.lower()[9:]}" not in buses]
    chosen = (buses + fillers)[:max(2, len(buses))]  # two at least: an NVSwitch fabric (kernel_log.sxid runs)
    gpus = [
        FakeGpu(
            bus_id=f"0000{bus}" if len(bus) == 12 else bus,
            uuid=f"GPU-3f6e2a1b-8c4d-4e5f-9a0b-1c2d3e4f5a{i:02x}",
            serial=f"16548240001{i:02d}",
            minor_number=i,
        )
        for i, bus in enumerate(chosen)
    ]
    node = FakeNode(gpus=gpus)
    sysfs_for(node, tmp_path)
    from tests.support.fakes.fake_nvml import installed

    return installed(node), tmp_path


def _amd_root(tmp_path, buses: list[str], parents: dict[str, list[str]]):
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


def test_the_corpus_is_large_enough_and_every_record_is_well_formed():
    assert len(RECORDS) >= 150, len(RECORDS)
    ids = [r.id for r in RECORDS]
    assert len(ids) == len(set(ids)), "record ids must be unique across the corpus"
    for record in RECORDS:
        assert record.source.startswith(("https://", "lab:")), record.source_file
        for key in REQUIRED:
            assert key in record.data, (record.id, key)
        assert record.data["log"].strip() and record.data["expect"], record.id
        for expect in record.data["expect"] + record.data.get("absent", []):
            bus = expect.get("pci_bus_id")
            assert bus is None or BUS.match(bus), (record.id, bus)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.id)
def test_record(record: Record, tmp_path, capsys):
    log = tmp_path / "kernel.log"
    log.write_text(record.data["log"] + "\n", encoding="utf-8")
    buses = gpus_named(record)
    if vendor_of(record) == "amd":
        fake, root = _amd_root(tmp_path / "node", buses, record.data.get("pci_parents", {}))
    else:
        fake, root = _nvidia_root(tmp_path / "node", buses)
    with fake:
        code = cli.main(["check", "--json", "--root", str(root), "--kernel-log", str(log), "--only", "kernel_log"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    results = json.loads(out)["results"]
    problems = []
    for expect in record.data["expect"]:
        found = [r for r in results if matches(r, expect)]
        if not found and expect.get("pci_bus_id") is None and expect["status"] == "pass":
            # benign lines that name no GPU: nothing of that check may be other than a pass, on any GPU
            problems += [f"{r['check']} {r['status']}: {r['message']}" for r in results
                         if r["check"] == expect["check"] and r["status"] != "pass"]
            continue
        if not found:
            problems.append(f"no {expect['check']} result for {expect.get('pci_bus_id')}: "
                            f"{[(r['check'], r['status'], r['message']) for r in results]}")
            continue
        problems += [f"{expect['check']} {expect.get('pci_bus_id')}: {why} — {r['message']}"
                     for r in found if (why := check(r, expect))]
    for absent in record.data.get("absent", []):
        problems += [f"unexpected {r['check']} {r['status']}: {r['message']}" for r in results
                     if matches(r, absent) and r["status"] != "pass"]
    assert not problems, "\n".join(problems)


def test_the_corpus_covers_both_vendors_formats_and_benign_lines():
    formats = {r.data["format"] for r in RECORDS}
    for needed in ("dmesg", "dmesg-iso", "dmesg-x", "dmesg-ctime", "dmesg-raw", "kmsg", "syslog", "talosctl"):
        assert needed in formats, needed
    benign = [r for r in RECORDS if all(e["status"] == "pass" for e in r.data["expect"])]
    assert len(benign) >= 10
    assert {p.name for p in FIELD.iterdir() if p.is_dir()} >= {"nvidia", "amd", "amdsmi"}
    assert len([r for r in RECORDS if r.vendor == "amd"]) >= 40


def test_the_corpus_page_is_what_the_corpus_says():
    import subprocess
    import sys
    
    tool = REPO / "tools" / "gen_field_corpus_doc.py"
    done = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, "docs/field-corpus.md is out of date: run python3 tools/gen_field_corpus_doc.py"
