"""What the screens' record says, everywhere it is read (docs/screening.md "Coverage"): the checks screen.coverage and
screen.result, the gpudiag_screen_* metrics, and `gpudiag fleet`'s never-screened and overdue GPUs, from reports
(made by gpudiag's own checks and JSON report) and from Prometheus (a stand-in answering the exporter's series)."""

from __future__ import annotations

import dataclasses
import json

from gpudiag.checks import run_checks
from gpudiag.exporter import metrics_screen
from gpudiag.exporter.families import FamilySet
from gpudiag.expect.profile import load_expectations
from gpudiag.model import ErrorKind, ProbeError, SmMismatch, Status
from gpudiag.model.screen import (ERROR, FAILED, PREEMPTED, VERIFIED, ScreenGpu, ScreeningInfo, ScreenRun,
                                  ScreenState)
from gpudiag.report.json_report import report_dict
from tests.fleet_support import run
from tests.prometheus_stand_in import healthy, stand_in  # noqa: F401 - stand_in: a fixture
from tests.prometheus_stand_in import sample as _sample
from tests.prometheus_stand_in import success as _success
from tests.acceptance_nodes import nvidia_h200_8x
from tests.snapshots import nvidia_h200_node

DAY = 86400.0
NOW = 1_800_000_000.0


def _verified(bus: str, at: float, gpu: int) -> ScreenRun:
    return ScreenRun(bus, at - 60, at, VERIFIED, "600 stress launches verified bit for bit", index=gpu,
                     tests=["hbm", "memtest", "stress"], launches_verified=600, memory_tested_bytes=4 * 10**9,
                     memory_total_bytes=80 * 10**9, footprint_bytes=3 * 2**30)


def screened_node(edit=None):
    """The 8-GPU H200 snapshot with a week-policy record: every GPU verified a day ago, unless `edit` says."""
    snapshot = nvidia_h200_8x()
    state = ScreenState(every_seconds=7 * DAY, updated_at=NOW)
    for device in snapshot.devices:
        gpu = ScreenGpu(device.pci_bus_id, device.uuid, device.index, first_seen=NOW - 30 * DAY)
        gpu.record(_verified(device.pci_bus_id, NOW - DAY, device.index))
        state.gpus.append(gpu)
    if edit is not None:
        edit(state)
    snapshot.screening = ScreeningInfo(path="/var/lib/gpudiag/screen/state.json", state=state, read_at=NOW)
    return snapshot


def judged(snapshot, check: str, *params: str):
    return {r.device.index if r.device else None: r
            for r in run_checks(snapshot, load_expectations(None, list(params)), only=[check])}


def never_verified(index: int):
    def edit(state: ScreenState) -> None:
        gpu = state.gpus[index]
        gpu.last_verified = gpu.last_completed = gpu.last_run = None
        gpu.runs = {}
    return edit


def overdue(index: int, days: float):
    def edit(state: ScreenState) -> None:
        gpu = state.gpus[index]
        gpu.last_verified = NOW - days * DAY
        gpu.record(ScreenRun(gpu.pci_bus_id, NOW - 3600, NOW - 3590, PREEMPTED, "a job opened the GPU (pid 4242)",
                             index=index, preempted_by=[4242], yield_seconds=0.6))
    return edit


def failed_on(index: int, sm: int = 17):
    def edit(state: ScreenState) -> None:
        gpu = state.gpus[index]
        gpu.record(ScreenRun(gpu.pci_bus_id, NOW - 600, NOW - 540, FAILED,
                             f"3 tensor result(s) differed from their siblings' on SM {sm}", index=index,
                             launches_verified=40, mismatched_blocks=3,
                             mismatched_sms=[SmMismatch(f"SM {sm}", sm, 3, 1)],
                             memory_mismatched_words=2))
    return edit


# -- the checks ---------------------------------------------------------------------------------------------------

def test_a_node_without_screening_skips_and_an_unreadable_record_is_unknown():
    snapshot = nvidia_h200_node()
    snapshot.screening = ScreeningInfo(path="/var/lib/gpudiag/screen/state.json", read_at=NOW)
    (result,) = judged(snapshot, "screen.coverage").values()
    assert result.status is Status.SKIP and "gpudiag-screen.timer" in result.message
    snapshot.screening.error = ProbeError("screening", ErrorKind.ERROR, "state.json: not JSON")
    for check in ("screen.coverage", "screen.result"):
        (result,) = judged(snapshot, check).values()
        assert result.status is Status.UNKNOWN and result.fault_code == "GPUDIAG-SCREEN-UNREADABLE"


def test_coverage_passes_within_the_period_and_warns_past_it_or_never():
    snapshot = screened_node(lambda s: (overdue(2, 9)(s), never_verified(5)(s)))
    snapshot.screening.state.gpus[5].first_seen = NOW - 8 * DAY
    results = judged(snapshot, "screen.coverage")
    assert {i: r.status for i, r in results.items()} == {**{i: Status.PASS for i in range(8)}, 2: Status.WARN,
                                                        5: Status.WARN}
    assert results[2].message.startswith("overdue: last verified 9.0 d ago") and "preempted" in results[2].message
    assert results[5].message.startswith("never verified in the 8.0 d")
    assert (results[2].action, results[2].fault_code) == ("watch", "GPUDIAG-SCREEN-OVERDUE")
    # the profile's period decides: with screen_every=10d GPU 2 is within it
    assert judged(snapshot, "screen.coverage", "screen_every=10d")[2].status is Status.PASS


def test_a_failed_screen_fails_the_gpu_names_the_sm_and_drains_until_verified_again():
    snapshot = screened_node(failed_on(3))
    results = judged(snapshot, "screen.result")
    failed = results[3]
    assert (failed.status, failed.action, failed.fault_code) == (Status.FAIL, "drain", "GPUDIAG-SCREEN-WRONG-RESULTS")
    assert "SM 17" in failed.message and failed.observed["mismatched_sms"] == ["SM 17"]
    assert all(r.status is Status.PASS for i, r in results.items() if i != 3)
    # a later preempted screen judges nothing: the failure stands
    snapshot.screening.state.gpus[3].record(ScreenRun(snapshot.devices[3].pci_bus_id, NOW, NOW + 5, PREEMPTED, "job"))
    assert judged(snapshot, "screen.result")[3].status is Status.FAIL
    # a verified screen after the repair clears it
    snapshot.screening.state.gpus[3].record(_verified(snapshot.devices[3].pci_bus_id, NOW + 100, 3))
    assert judged(snapshot, "screen.result")[3].status is Status.PASS


def test_a_screen_that_could_not_run_warns():
    def edit(state):
        state.gpus[1].record(ScreenRun(state.gpus[1].pci_bus_id, NOW, NOW + 2, ERROR,
                                       "cuInit failed: CUDA_ERROR_NO_DEVICE (100)", index=1))
    result = judged(screened_node(edit), "screen.result")[1]
    assert result.status is Status.WARN and "CUDA_ERROR_NO_DEVICE" in result.message


# -- the metrics --------------------------------------------------------------------------------------------------

def metrics(snapshot) -> str:
    fs = FamilySet()
    metrics_screen.add(fs, snapshot)
    return fs.exposition().decode()


def value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_say_when_each_gpu_was_verified_when_it_is_due_and_how_its_last_screen_ended():
    text = metrics(screened_node(lambda s: (overdue(2, 9)(s), never_verified(5)(s), failed_on(6)(s))))
    assert value(text, "gpudiag_screen_last_verified_timestamp_seconds", gpu="0") == NOW - DAY
    assert value(text, "gpudiag_screen_due_timestamp_seconds", gpu="0") == NOW + 6 * DAY
    assert value(text, "gpudiag_screen_overdue_seconds", gpu="0") == 0
    assert value(text, "gpudiag_screen_overdue_seconds", gpu="2") == 2 * DAY
    assert value(text, "gpudiag_screen_last_verified_timestamp_seconds", gpu="5") is None  # never: no series
    assert value(text, "gpudiag_screen_overdue_seconds", gpu="5") == 23 * DAY  # due a week after first seen
    assert value(text, "gpudiag_screen_last_result", gpu="2", result="preempted") == 1
    assert value(text, "gpudiag_screen_last_result", gpu="2", result="verified") == 0
    assert value(text, "gpudiag_screen_preemptions_total", gpu="2") == 1
    assert value(text, "gpudiag_screen_runs_total", gpu="2", result="verified") == 1
    assert value(text, "gpudiag_screen_last_yield_seconds", gpu="2") == 0.6
    assert value(text, "gpudiag_screen_mismatches", gpu="6", kind="tensor") == 3
    assert value(text, "gpudiag_screen_mismatches", gpu="6", kind="memory") == 2
    assert value(text, "gpudiag_screen_mismatch_sm_launches", gpu="6", sm="SM 17") == 3
    assert value(text, "gpudiag_screen_mismatches", gpu="0", kind="tensor") == 0
    assert value(text, "gpudiag_screen_memory_tested_ratio", gpu="0") == 0.05
    assert "gpudiag_screen_every_seconds 604800\n" in text


def test_no_series_without_screening_or_with_an_unreadable_record():
    snapshot = nvidia_h200_node()
    assert metrics(snapshot) == ""
    snapshot.screening = ScreeningInfo(error=ProbeError("screening", ErrorKind.ERROR, "not JSON"))
    assert metrics(snapshot) == ""


# -- the fleet ----------------------------------------------------------------------------------------------------

def report_of(snapshot, hostname: str) -> dict:
    snapshot = dataclasses.replace(snapshot, hostname=hostname)
    return report_dict(snapshot, run_checks(snapshot, None))


def test_fleet_from_reports_lists_never_screened_and_overdue_gpus(capsys, tmp_path):
    never_new = never_verified(4)
    nodes = {"n1": screened_node(), "n2": screened_node(lambda s: (overdue(2, 9)(s), never_new(s)))}
    nodes["n2"].screening.state.gpus[4].first_seen = NOW - DAY  # never screened, not due for six days
    for name, snapshot in nodes.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(report_of(snapshot, name)))
    code, out, _ = run(capsys, str(tmp_path), "--json")
    found = {n["node"]: [(f["kind"], f["gpu"], f["screening"]) for f in n["findings"]
                         if f["check"] == "screen.coverage"] for n in json.loads(out)["nodes"]}
    assert found == {"n1": [], "n2": [("screening", 2, "overdue"), ("unscreened", 4, "never screened (not due yet)")]}
    code, text, _ = run(capsys, str(tmp_path))
    assert "NOT PROVEN BY A SCREEN LATELY (1 node(s))" in text
    assert "n2 GPU 2 (0000:4c:00.0): screen.coverage: overdue: overdue: last verified 9.0 d ago" in text


def test_fleet_from_prometheus_lists_never_screened_and_overdue_gpus(capsys, stand_in):
    def answers(promql, headers):
        if promql.startswith("up{"):
            return _success([_sample(1, instance="n1:9858"), _sample(1, instance="n2:9858")])
        if healthy(promql, "n1:9858"):
            return _success(healthy(promql, "n1:9858", "n2:9858"))
        if "gpudiag_screen_last_verified_timestamp_seconds" in promql:
            return _success([_sample(NOW - DAY, instance="n1:9858", gpu="0"),
                             _sample(NOW - 9 * DAY, instance="n2:9858", gpu="0")])
        if "gpudiag_screen_overdue_seconds" in promql:
            return _success([_sample(0, instance="n1:9858", gpu="0"), _sample(2 * DAY, instance="n2:9858", gpu="0"),
                             _sample(3 * DAY, instance="n2:9858", gpu="1"), _sample(0, instance="n2:9858", gpu="2")])
        return _success([])

    code, out, _ = run(capsys, "--prometheus", stand_in(answers).url, "--json")
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    found = {n: [(f["kind"], f["gpu"], f["screening"]) for f in node["findings"]] for n, node in nodes.items()}
    assert found == {"n1:9858": [], "n2:9858": [("screening", 0, "overdue"), ("screening", 1, "never screened"),
                                                ("unscreened", 2, "never screened (not due yet)")]}
    assert nodes["n2:9858"]["status"] == "warn" and nodes["n1:9858"]["status"] == "pass" and code == 0
