"""The NVIDIA backend started ahead of the collector: NVML opened and each GPU probed on a thread of its own from the
moment its code is imported, while the collecting process imports the rest of the probe and reads the host
(gpudiag/cli/check/early_collect.py, the vendor child of a cold `gpudiag check --direct`).

The GPUs' reads are the longest chain of a cold check, and mostly time in the driver (C calls that release the
GIL): on the lab H100 the vendor child spent 54 ms importing, then 20 ms opening NVML and 38 ms probing the GPU, one
after the other. Here they overlap. In interleaved A/Bs on the lab H100 (tests/fixtures/h100/recorded/
lab-2026-12-06c/) the check took, with the thread and without it: 140.6 and 146.3 ms (shipped/b/, medians of 21),
139.9 and 127.9 (shipped/a/, medians of 9), 181.6 and 202.0 and 162.1 both (earlier arrangements, final/ and
head_start/): on one GPU, from 20 ms quicker to 12 ms slower (its calls wait for the GIL while the collector reads
the host), 6 ms quicker in the longest A/B. Letting the thread finish before the collector imports the rest was no
better (196.2 and 161.7 ms), nor a 0.5 ms GIL switch interval (193.9 against 179.2; switch_interval/).

The collector still makes every decision: it asks `open`, `device_count`, `probe_device` and `probe_peers` as of an
NvmlBackend, each bounded by its own deadline, and gets the outcome the thread had or will have for that call,
exactly as the backend returns or raises it (a lost GPU's DeviceLost with the identity read before it). The thread
makes the backend's calls in the collector's order (open, then each GPU in turn) and no call the collector would not
make; a call the thread has not begun when the collector asks for it (the thread is still in an earlier GPU, hung
there) is the collector's own, made directly, as without this module; the thread then stops, so that no call is
made twice. While the collector waits, its tracker names the call the thread is in: a hung GPU is reported by
its call, as always.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from gpudiag.model import BackendInfo, DeviceSnapshot, PeerLink, Vendor
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.backend import NvmlBackend

OPEN = "open"
# How often a waiting collector copies the thread's tracker into its own (for a hung call's name).
MIRROR_SECONDS = 0.02


class _Pending:
    """One backend call made on the thread: its tracker while it runs, then its value or what it raised."""

    def __init__(self) -> None:
        self.tracker = CallTracker()
        self.finished = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None

    def run(self, call: Callable[[CallTracker], Any]) -> None:
        try:
            self.value = call(self.tracker)
        except BaseException as exc:  # noqa: BLE001 - handed to the collector, which asked for this call
            self.error = exc
        finally:
            self.finished.set()

    def result(self, tracker: CallTracker) -> Any:
        while not self.finished.wait(MIRROR_SECONDS):
            tracker.current, tracker.partial = self.tracker.current, self.tracker.partial
        tracker.current, tracker.partial = None, self.tracker.partial
        tracker.completed += self.tracker.completed
        if self.error is not None:
            raise self.error
        return self.value


class PrefetchedNvml:
    """An NvmlBackend whose calls began on a thread before the collector asked for them (see the module's text)."""

    name = NvmlBackend.name
    vendor = Vendor.NVIDIA
    power_samples = False  # a one-shot check's: no mean power since a previous probe (power_samples.py)

    def __init__(self, link_errors: bool = True) -> None:
        self.link_errors = link_errors
        self._backend = NvmlBackend(link_errors=link_errors)
        self._lock = threading.Lock()
        self._begun: dict = {}  # call (OPEN or a GPU's index) -> the thread's _Pending, until the collector takes it
        self._taken: set = set()  # calls the collector made itself: the thread makes none of them
        threading.Thread(target=self._run, name="nvml-prefetch", daemon=True).start()

    # -- the thread --------------------------------------------------------------------------------------------

    def _run(self) -> None:
        opened = self._begin(OPEN)
        if opened is None:
            return
        opened.run(self._backend.open)
        if opened.error is not None or not opened.value.available:
            return
        for index in range(self._backend.device_count()):
            pending = self._begin(index)
            if pending is None:
                return  # the collector went on without the thread: the rest are its own
            pending.run(lambda tracker, index=index: self._backend.probe_device(index, tracker))

    def _begin(self, call) -> Optional[_Pending]:
        with self._lock:
            if call in self._taken:
                return None
            pending = self._begun[call] = _Pending()
            return pending

    # -- the collector's calls ---------------------------------------------------------------------------------

    def _take(self, call) -> Optional[_Pending]:
        """The thread's call, begun or done; None where the thread has not begun it: then it is the caller's."""
        with self._lock:
            pending = self._begun.pop(call, None)
            if pending is None:
                self._taken.add(call)
            return pending

    def open(self, tracker: CallTracker) -> BackendInfo:
        pending = self._take(OPEN)
        return self._backend.open(tracker) if pending is None else pending.result(tracker)

    def device_count(self) -> int:
        return self._backend.device_count()

    def probe_device(self, index: int, tracker: CallTracker) -> DeviceSnapshot:
        pending = self._take(index)
        return self._backend.probe_device(index, tracker) if pending is None else pending.result(tracker)

    def probe_peers(self, devices: list[DeviceSnapshot], tracker: CallTracker) -> list[PeerLink]:
        return self._backend.probe_peers(devices, tracker)

    def close(self) -> None:
        self._backend.close()
