"""The field corpus replayed (issue 21): every record of tests/fixtures/field/**/*.json, verbatim kernel-log lines
from public sources and the lab H200, through `gpudiag check --kernel-log FILE --json` on a fake node (the fake NVML
library, or the fake libamd_smi.so for AMD records) whose GPUs carry the bus IDs the record's expectations name.
Each expectation must be met by the result it names (check, GPU / NVSwitch / node-level bus ID, status, action,
fault code, distinct events); each `absent` entry must have no result that is not a pass. One test id per record."""

from __future__ import annotations

import re

import pytest

from tests.support.field_corpus import FIELD, REQUIRED, Record, records, replay
from tests.support.paths import REPO

RECORDS = records()
BUS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


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


# Records of issue 32's outside set that gpudiag reads wrong today, each with why (docs/field-corpus.md lists them with
# the figures). Strict: a record that comes to be read right fails here until it leaves this table. Issue 32 stays open
# while any is here; the table is no expectation met.
READ_WRONG = {
    "rp-ext-129-mlx5-load-one-failed": "mlx5 probe failures: no check reads NIC records other than flaps",
    "tinycore-9-mlx5-handle-hca-cap-probe-failed": "the same: an mlx5 probe failure",
}


def _with_known_wrong(record: Record):
    reason = READ_WRONG.get(record.id)
    return pytest.param(record, id=record.id, marks=[pytest.mark.xfail(strict=True, reason=reason)] if reason else [])


def test_every_record_read_wrong_is_in_the_corpus():
    assert set(READ_WRONG) <= {r.id for r in RECORDS}


@pytest.mark.parametrize("record", [_with_known_wrong(r) for r in RECORDS])
def test_record(record: Record, tmp_path):
    reading = replay(record, tmp_path)
    assert reading.right, "\n".join(reading.problems)


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


@pytest.mark.slow
def test_the_readings_the_page_shows_are_todays():
    """docs/field-corpus.md shows how gpudiag reads every record (tests/fixtures/field/readings.json): the stored
    readings must be what gpudiag does now, so a fix or a regression shows on the page (issue 32)."""
    import json
    import subprocess
    import sys

    stored = json.loads((FIELD / "readings.json").read_text())["records"]
    code = ("import json, sys; sys.path.insert(0, 'tools'); import gen_field_corpus_doc as g; "
            "print(json.dumps(g.replay_all()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    fresh = json.loads(done.stdout.splitlines()[-1])
    changed = sorted(i for i in set(stored) | set(fresh) if stored.get(i) != fresh.get(i))
    assert not changed, f"readings changed for {changed[:10]}: run python3 tools/gen_field_corpus_doc.py --replay"
