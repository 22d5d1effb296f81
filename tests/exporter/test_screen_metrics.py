"""The screen family's metrics (gpudiag/exporter/metrics_screen.py) from the screens' record."""

from __future__ import annotations

from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.node_metrics import add_snapshot
from gpudiag.model import ErrorKind, ProbeError
from gpudiag.model.screen import ScreeningInfo
from tests.support.screen_records import DAY, NOW, failed_on, never_verified, overdue, screened_node
from tests.support.snapshots import nvidia_h200_node


def metrics(snapshot) -> str:
    fs = MetricSet()
    add_snapshot(fs, snapshot)  # as the exporter renders them (the family's module found by its name)
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
    assert "gpudiag_screen_" not in metrics(snapshot)
    snapshot.screening = ScreeningInfo(error=ProbeError("screening", ErrorKind.ERROR, "not JSON"))
    assert "gpudiag_screen_" not in metrics(snapshot)


