"""screen.coverage and screen.result (gpudiag/checks/screen.py; docs/screening.md "Coverage") over the screens'
record: skipped without screening, unknown when it cannot be read, overdue and never-verified GPUs warned, a failed
screen failed with the drain action until a verified screen clears it."""

from __future__ import annotations

from gpudiag.checks import run_checks
from gpudiag.expect.profile import load_expectations
from gpudiag.model import ErrorKind, ProbeError, Status
from gpudiag.model.screen import ERROR, PREEMPTED, ScreeningInfo, ScreenRun
from tests.support.snapshots import nvidia_h200_node
from tests.support.screen_records import DAY, NOW, failed_on, never_verified, verified, overdue, screened_node


def judged(snapshot, check: str, *params: str):
    return {r.device.index if r.device else None: r
            for r in run_checks(snapshot, load_expectations(None, list(params)), only=[check])}


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
    snapshot.screening.state.gpus[3].record(verified(snapshot.devices[3].pci_bus_id, NOW + 100, 3))
    assert judged(snapshot, "screen.result")[3].status is Status.PASS


def test_a_screen_that_could_not_run_warns():
    def edit(state):
        state.gpus[1].record(ScreenRun(state.gpus[1].pci_bus_id, NOW, NOW + 2, ERROR,
                                       "cuInit failed: CUDA_ERROR_NO_DEVICE (100)", index=1))
    result = judged(screened_node(edit), "screen.result")[1]
    assert result.status is Status.WARN and "CUDA_ERROR_NO_DEVICE" in result.message


