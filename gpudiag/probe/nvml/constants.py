"""Board constants of an NVIDIA GPU, read once per GPU by a collector that stays open (the exporter, the service).

The maximum clocks and the temperature thresholds come from the board and its VBIOS, yet NVML answers them slowly.
On the lab H200 the three nvmlDeviceGetMaxClockInfo calls took 5.4–7.7 ms and the four
nvmlDeviceGetTemperatureThreshold calls 1.4–1.8 ms of the ~47 ms a freshly opened probe spends in NVML; through a
collector kept open, about 6 ms of a 22 ms collection (tests/fixtures/h200/recorded/nvml-calls-per-probe.txt,
service-collection-profile-before-constants.txt). With them kept, such a collection took 13 ms, 9 of them in NVML
(direct-breakdown.txt). The service collects once a second while checks go through it: these were the largest part of
each collection that never changes.

A kept value is keyed by the GPU's index and UUID: another GPU at the same index is read afresh, and two GPUs that
report the same UUID (a fault of its own) still get their own values. It is forgotten when the GPU is lost or the
library closed, and read again after MAX_AGE_SECONDS, so that a VBIOS flashed under a running service shows within
minutes. Only answers are kept: a call that failed is made again, and its failure recorded again, at the next
collection. The firmware versions are not constants here: an operator reads them right after a flash.
A one-shot `gpudiag check` opens the library once and gains nothing from this, nor loses anything.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from gpudiag.probe.nvml.call import NvmlCall

# The NVML calls whose answers are kept: nothing the node's work or an operator's setting changes.
CONSTANT_CALLS = frozenset({"nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetTemperatureThreshold"})


class BoardConstants:
    MAX_AGE_SECONDS = 600.0
    # 8 GPUs × 7 values, with room to spare; a driver that reports a new UUID at every probe cannot grow it further.
    MAX_ENTRIES = 1024

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._kept: dict[tuple, tuple[float, Any]] = {}

    def read(self, call: "NvmlCall", index: int, uuid: Optional[str], function: str, handle: Any, *args: Any) -> Any:
        """`call(function, handle, *args)`, or what it answered for this GPU less than MAX_AGE_SECONDS ago."""
        if function not in CONSTANT_CALLS or not uuid:
            return call(function, handle, *args)
        key = (index, uuid, function, args)  # not the handle: NVML hands out a new one after a reopen
        now = self._clock()
        kept = self._kept.get(key)
        if kept is not None and now - kept[0] < self.MAX_AGE_SECONDS:
            return kept[1]
        value = call(function, handle, *args)
        if value is None:  # unsupported or failed: asked again next time
            self._kept.pop(key, None)
        else:
            if len(self._kept) >= self.MAX_ENTRIES:
                self._kept.clear()
            self._kept[key] = (now, value)
        return value

    def forget(self, index: int) -> None:
        """A lost GPU may come back from a reset with another VBIOS: read its constants again."""
        for key in [key for key in list(self._kept) if key[0] == index]:
            self._kept.pop(key, None)

    def clear(self) -> None:
        self._kept.clear()
