"""The live view's power (gpudiag/report/live.py; issue 36, item 1): the mean of the driver's power samples since the
previous collection where the backend read one, with the span it covers in power_average_seconds; else the driver's
power reading (draw_watts), and power_average_seconds null."""

from __future__ import annotations

from gpudiag.report.live import FIELDS, gpu_rows
from tests.support.snapshots import nvidia_h200_node


def test_a_gpu_with_a_mean_since_the_previous_collection_shows_the_mean():
    snapshot = nvidia_h200_node()
    power = snapshot.devices[0].power
    power.draw_watts, power.average_watts, power.average_seconds = 706.2, 575.0, 1.02  # the load's first second
    row = gpu_rows(snapshot)[0]
    assert (row["power_watts"], row["power_average_seconds"]) == (575.0, 1.02)


def test_without_one_the_row_shows_the_draw_and_says_it_is_no_mean():
    snapshot = nvidia_h200_node()
    snapshot.devices[0].power.draw_watts = 81.9  # the first collection, an AMD GPU, a GPU without a sample buffer
    row = gpu_rows(snapshot)[0]
    assert (row["power_watts"], row["power_average_seconds"]) == (81.9, None)


def test_every_row_has_every_field_in_order():
    snapshot = nvidia_h200_node()
    snapshot.devices[1].power.average_watts, snapshot.devices[1].power.average_seconds = 80.0, 1.0
    for row in gpu_rows(snapshot):
        assert tuple(row) == FIELDS
