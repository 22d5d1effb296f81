"""The stress verification as recorded on the lab H200 (tests/fixtures/h200/recorded/verify-2/, tools/lab_verify.sh
phase 2, driver 580.159.04): determinism over 100 launches, its cost, the figures beside torch, the clean level-2 and
level-3 runs, and the 10 + 10 runs with a validation-only fault injected — each must say what the issue asked."""

from __future__ import annotations

import json

import pytest

from gpudiag.checks.active.stress_figures import figures_of
from gpudiag.model import ActiveResults, StressResult, from_dict
from tests.support.paths import FIXTURES

LAB = FIXTURES / "h200" / "recorded" / "verify-2"
INJECTED_SMS = (17, 42, 5, 99, 131, 0, 64, 77, 120, 33)  # tools/lab_verify.sh, in run order


def verdict(name: str, check: str) -> dict:
    report = json.loads((LAB / name).read_text())
    return next(r for r in report["results"] if r["check"] == check)


def test_100_launches_gave_the_same_bits_on_every_block_of_every_sm():
    record = json.loads((LAB / "determinism.json").read_text())
    for outcome in record["determinism"]:
        assert outcome["launches"] == 100 and outcome["identical_on_every_block_and_launch"], outcome["kernel"]
        assert outcome["distinct_signature_sets"] == 1 and outcome["blocks_with_more_than_one_result"] == 0
        assert outcome["distinct_smids"] == outcome["multiprocessors"] == 132
        assert outcome["stream_mismatches"] == 0 and outcome["mismatched_blocks"] == 0
        assert len(set(outcome["signature_set"])) > 1  # the samples make the signatures depend on the products
        assert set(outcome["injection"]["differing_blocks_on_sms"]) == {17}
    wgmma = record["determinism"][0]
    assert (wgmma["kernel"], wgmma["grid"], wgmma["copy_warps"]) == ("gpudiag_wgmma_bf16", 132, 4)


def test_the_verification_costs_under_2_percent_of_the_stress_time():
    (cost,) = json.loads((LAB / "determinism.json").read_text())["cost"]
    assert cost["launch_cost"] + cost["reference_cost_of_30_s"] <= 0.02
    assert cost["launch_cost"] == pytest.approx(0.01023)


def test_wgmma_beside_torch_holds_the_throughput_and_the_power():
    record = json.loads((LAB / "bench.json").read_text())
    ours = from_dict(ActiveResults, record["gpudiag"][0]["active"]).devices[0]
    torch = figures_of(from_dict(StressResult, record["torch"]["0"]["stress"]))
    mine = figures_of(ours.stress)
    assert ours.stress.kernel == "gpudiag_wgmma_bf16"
    assert mine.tflops / torch.tflops >= 0.9  # 674.26 / 658.7
    assert mine.mean_power_watts / torch.mean_power_watts >= 0.95  # 692.6 / 691.4
    assert ours.hbm.gb_per_second / record["torch"]["0"]["copy_gb_per_second"] >= 0.9  # 1970.8 / 2107.4
    check = ours.stress.verification
    assert check.launches_verified == ours.stress.launches and check.mismatched_blocks == check.stream_mismatches == 0


@pytest.mark.parametrize("name", ["check-level2.json", "check-level3.json"])
def test_the_clean_runs_pass_with_every_result_verified(name):
    compute = verdict(name, "active.compute")
    assert compute["status"] == "pass", compute["message"]
    assert compute["observed"]["mismatched_blocks"] == 0 and compute["observed"]["stream_mismatches"] == 0
    assert compute["observed"]["hot_reference_matches"] is True
    assert verdict(name, "active.stress")["status"] == "pass"
    assert verdict(name, "active.memtest")["status"] == "pass"


def test_level_3_ran_its_60_seconds_and_the_level_3_patterns():
    stress = verdict("check-level3.json", "active.stress")
    assert stress["observed"]["seconds"] >= 60
    assert "in 12 passes" in verdict("check-level3.json", "active.memtest")["message"]


@pytest.mark.parametrize("run", range(1, 11))
def test_every_injected_accumulator_flip_fails_naming_gpu_0_and_its_sm(run):
    compute = verdict(f"inject-sm-{run}.json", "active.compute")
    sm = INJECTED_SMS[run - 1]
    assert compute["status"] == "fail" and compute["fault_code"] == "GPUDIAG-ACTIVE-COMPUTE-MISMATCH"
    assert compute["message"].startswith("GPU 0 (0000:00:06.0): 1 block result(s) differed")
    assert f"on SM {sm} (1 launch)" in compute["message"]
    assert [s["location"] for s in compute["observed"]["mismatched_sms"]] == [f"SM {sm}"]


@pytest.mark.parametrize("run", range(1, 11))
def test_every_injected_stream_flip_fails_naming_gpu_0_and_the_address(run):
    compute = verdict(f"inject-stream-{run}.json", "active.compute")
    observed = compute["observed"]
    assert compute["status"] == "fail" and compute["fault_code"] == "GPUDIAG-ACTIVE-STREAM-MISMATCH"
    assert compute["message"].startswith("GPU 0 (0000:00:06.0): ")
    assert observed["stream_mismatches"] >= 1 and observed["stream_flipped_bits_mask"] == 1 << 7
    assert f"{observed['stream_first_error_address']:#x} flipped" in observed["validation_fault"]
