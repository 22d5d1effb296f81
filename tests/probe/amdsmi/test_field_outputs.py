"""amd-smi outputs pasted in public ROCm threads (tests/fixtures/field/amdsmi/*.json, issue 21 item 6), replayed
through the real amdsmi 7.0.2 wrapper over the fake libamd_smi.so.

A record cannot be replayed byte for byte (the fake is a library, not the amd-smi CLI), so each one names the few
knobs of the fake node that its output pins, each with the `evidence`: the text of the output that shows that value.
The test asserts the evidence is in the output, applies the knobs to an MI300X-class fake node (MI350/MI355X when
the record names one) and asserts the record's expectations on the checks. One approximation is stated where it is
made: the R9700 (Navi 48) report's always-set TEMP_HOTSPOT throttler bit is replayed as an active socket-thermal
violation on an MI300X-class fake (amdsmi reports both through the same throttle status; the fake has no Navi part).
"""

from __future__ import annotations

import json

import pytest

from gpudiag.model import Status
from tests.probe.amdsmi.test_real_nodes import check
from tests.support.fakes import amd_node
from tests.support.fakes.fake_amdsmi_identity import GARBAGE_BDF
from tests.support.paths import FIXTURES

CORPUS = FIXTURES / "field" / "amdsmi"


def _records():
    for path in sorted(CORPUS.glob("*.json")):
        source = json.loads(path.read_text())
        for record in source["records"]:
            yield pytest.param(source, record, id=f"{path.stem}/{record['id']}")


RECORDS = list(_records())


def _garbage_bdf(_gpu, value):
    domain, bus, rest = value.split(":")
    device, function = rest.split(".")
    assert (int(domain, 16), int(bus, 16), int(device, 16), int(function)) == GARBAGE_BDF


# knob -> how it is set on each GPU of the fake node
GPU_KNOBS = {
    "garbage_bdf": _garbage_bdf,  # what the fake answers without libdrm; the knob only checks it is the same
    "power_watts": lambda gpu, value: setattr(gpu, "power_watts", value),
    "gfx_clock_mhz": lambda gpu, value: gpu.clocks_mhz.__setitem__(0, tuple(value)),
    "violations": lambda gpu, value: setattr(gpu, "violations", set(value)),
    "hotspot_celsius": lambda gpu, value: setattr(gpu.temperatures["hotspot"], "current", value),
}


def _node(record: dict) -> amd_node.FakeAmdNode:
    node = amd_node.mi355x_node() if "MI35" in record["gpu_model"] else amd_node.mi300x_node()
    for knob in record["replay"]:
        name, value = knob["knob"], knob["value"]
        if name == "libdrm_missing":
            node.libdrm_missing = value
        elif name.startswith("acc_"):
            for gpu in node.gpus:
                gpu.violation_counters[name] = value
        else:
            for gpu in node.gpus:
                GPU_KNOBS[name](gpu, value)
    return node


def test_the_corpus_has_records_and_each_names_its_source():
    assert len(RECORDS) >= 4
    for param in RECORDS:
        source, record = param.values
        assert source["source"].startswith("https://") and source["what"]
        assert record["output"] and record["source_verdict"] and record["expect"] and record["replay"]


@pytest.mark.parametrize("source, record", RECORDS)
def test_amdsmi_record(tmp_path, source, record):
    for knob in record["replay"]:
        assert knob["evidence"] in record["output"], f"{knob['knob']}: {knob['evidence']!r} is not in the output"
    _, results = check(tmp_path, _node(record))
    for expect in record["expect"]:
        gpu = expect["gpu"]
        found = [r for r in results if r.check == expect["check"]
                 and (r.device is None if gpu is None else r.device is not None and r.device.index == gpu)]
        assert len(found) == 1, f"{expect['check']} on GPU {gpu}: {[(r.check, r.device) for r in found]}"
        (result,) = found
        assert result.status == Status(expect["status"]), f"{expect['check']}: {result.status} {result.message}"
        if "says" in expect:
            assert expect["says"] in result.message, f"{expect['check']}: {result.message}"
