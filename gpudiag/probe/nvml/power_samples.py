"""The mean power of an NVIDIA GPU since the previous probe, from the driver's own power samples, asked only by a
collector that probes again and again (`gpudiag top`, `gpudiag serve`: CollectOptions.power_samples), never by a
one-shot check.

The driver samples the board's power every ~20 ms into a buffer that `nvmlDeviceGetSamples(handle,
NVML_TOTAL_POWER_SAMPLES, lastSeenTimeStamp)` reads: each sample a timestamp (µs) and a value (mW), those newer than
`lastSeenTimeStamp` only, NVML_ERROR_NOT_FOUND where there is none (on an H100: value type unsigned int, one sample
every 20 ms, about 2.4 s held, timestamps in the host's Unix time; tests/fixtures/h100/recorded/device-2026-12-06/).
Their mean covers exactly the time since the previous probe, whatever top's interval, up to the buffer's span.
nvmlDeviceGetPowerUsage (draw_watts) is itself a one-second average on Ampere and later but GA100 (NVML's
documentation), and instantaneous before: at `top -d 1` on an H100 the two are nearly the same quantity (a median
0.43 W apart), and `nvidia-smi dmon`'s pwr fits nvmlDeviceGetPowerUsage read at dmon's own moment at least as well as
this mean (0.75 W against 1.62 W on average; that recording's README).

The first probe of a GPU asks with lastSeenTimeStamp 0 and keeps only the newest sample's timestamp, reporting no
mean: the buffer then holds samples from an earlier time than this collector has watched (how far back depends on
the driver's buffer), so their mean is no "since the previous probe". Asking nothing on the first probe and
remembering the host's clock instead would save that call, but would assume that the samples' timestamps are the
host's Unix time (as the lab's were) — the buffer's own timestamp assumes nothing. Each later probe asks for the
samples newer than the kept timestamp, reports their mean and the span they cover, and keeps the newest. The span
runs from the previous probe's newest sample to this one's; where the buffer ran over between two probes (its oldest
new sample is more than two sample periods after the kept one: the lab H100's held 119 samples, 2.4 s, and a service
collects every 15 s unless asked sooner), it is the span of the samples the buffer still held, from one period
before the oldest of them, so that the mean is never said to cover time it does not.
"""

from __future__ import annotations

from typing import Any, Optional

from gpudiag.model import DeviceSnapshot
from gpudiag.probe.nvml.call import ABSENT, NOT_FOUND, PYTHON_ERROR, NvmlCall

# nvmlValueType_t → the c_nvmlValue_t member holding a sample of that type (power samples: UNSIGNED_INT, mW).
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
SOURCE = "nvml.nvmlDeviceGetSamples"


class PowerSamples:
    """The newest power sample's timestamp seen of each GPU (by index, with the UUID it had): another GPU at the
    same index starts afresh."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Optional[str], int]] = {}

    def read(self, call: NvmlCall, handle: Any, device: DeviceSnapshot) -> None:
        """Sets device.power.average_watts and average_seconds from the samples since the previous probe, or
        leaves them None: first probe, no newer sample (NOT_FOUND), no sample buffer (NOT_SUPPORTED, a driver
        without the call), or a failure, which is recorded on the device as any optional read's is."""
        kept = self._seen.get(device.index)
        since = kept[1] if kept is not None and kept[0] == device.uuid else 0
        answer, code, message = call.attempt("nvmlDeviceGetSamples", handle, call.nvml.NVML_TOTAL_POWER_SAMPLES,
                                             since)
        if code is not None:
            if code not in ABSENT and code != NOT_FOUND:
                call.record(SOURCE, code, message)
            return
        value_type, samples = answer
        member = VALUE_MEMBERS.get(value_type)
        if member is None:
            call.record(SOURCE, PYTHON_ERROR, f"nvmlDeviceGetSamples: power samples of unknown value type "
                                              f"{value_type}")
            return
        points = sorted((int(s.timeStamp), float(getattr(s.sampleValue, member))) for s in samples
                        if int(s.timeStamp) > since)
        if not points:
            return
        self._seen[device.index] = (device.uuid, points[-1][0])
        if not since:
            return  # the first probe: the buffer's samples reach back before it (see the module's text)
        milliwatts = sum(value for _, value in points) / len(points)
        device.power.average_watts = round(milliwatts / 1000.0, 3)
        device.power.average_seconds = round(covered_us(since, [stamp for stamp, _ in points]) / 1e6, 6)

    def forget(self, index: int) -> None:
        self._seen.pop(index, None)

    def clear(self) -> None:
        self._seen.clear()


def covered_us(since: int, stamps: list[int]) -> float:
    """The span (µs) that samples taken at `stamps` (ascending, all after `since`) stand for: from `since` to the
    newest, or where the buffer lost samples in between, from one sample period before the oldest kept."""
    newest, oldest = stamps[-1], stamps[0]
    if len(stamps) >= 2:
        period = (newest - oldest) / (len(stamps) - 1)
        if oldest - since > 2 * period:
            return newest - oldest + period
    return float(newest - since)
