"""The NVIDIA backend's calls for a cold `gpudiag check --direct`, made in a process of their own ahead of the
collector that uses them (gpudiag/cli/check/early_collect.py forks it first; gpudiag/probe/nvml/channel.py joins the
two): `serve` runs in that process, `PrefetchedNvml` is the collector's NVIDIA backend.

The GPUs' reads are the longest chain of a cold check, and mostly time in the driver. They began on a thread of the
collecting process, beside its imports and its reading of the host; there the NVML process's Python work took turns
with those on one GIL: on the lab H100 NVML's open and the GPU's probe took 67 ms there (80 to 147 ms of the
check), against some 27 ms with nothing beside them (tests/fixtures/h100/recorded/lab-2026-12-06d/). In a process
of their own they have an interpreter to themselves: that process imports only the model and the backend, and its
early thread starts NVML meanwhile (gpudiag/probe/nvml/early.py).

The collector still makes every decision: it asks `open`, `device_count`, `probe_device` and `probe_peers` as of an
NvmlBackend, each bounded by its own deadline, and gets the outcome the NVML process had or will have for that
call, exactly as the backend returned or raised it there (a lost GPU's DeviceLost with the identity read before
it). The NVML process makes the backend's calls in the collector's order (open, each GPU in turn, the peers of the
reachable ones) and no other (where the collector opens no NVML at all, no NVIDIA GPU being on the PCI bus, what
it made goes unread, and it is ended with the check); a call it has not begun when the collector asks for it (it
is still in an earlier GPU, hung there) is the collector's own, made directly, as without this module, and the
NVML process then begins no other, so that no call is made twice. While the collector waits, its tracker names
the call the NVML process is in (a call still running after MIRROR_SECONDS is reported with the identity read so
far): a hung GPU is reported by its call, as always. Where the NVML process dies, a call it had begun fails (fail
closed), and the calls after it are the collector's own.
"""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any, Callable, Optional

from gpudiag.model import BackendInfo, DeviceSnapshot, PeerLink, Vendor
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.nvml.backend import NvmlBackend
from gpudiag.probe.nvml.channel import OPEN, NvmlChannel

# The calls' numbers: the open (OPEN, 0), then GPU i's probe (i + 1), then the peers (the GPU count + 1).
# How long a call runs in the NVML process before its progress (the NVML call it is in, the identity read so far)
# is sent to the collector, and how often a waiting collector copies it into its own tracker.
MIRROR_SECONDS = 0.02


def _gpu(index: int) -> int:
    return index + 1


# -- the NVML process ----------------------------------------------------------------------------------------------


class CollectorGone(Exception):
    """The collector's end of the channel is closed: nothing more is asked."""


def serve(channel: NvmlChannel, link_errors: bool = True, finish: Callable[[], Any] = list) -> None:
    """In the NVML process: open NVML, probe each GPU, then the peers of the reachable ones (two at least), each
    answer sent as it comes, until the collector makes a call itself; then `finish()`'s value, sent last (the
    process's own marks, for bench/check_vs_nvidia_smi.py).

    Each call's successor is begun before the call's answer is sent: the collector asks for it as soon as it has
    that answer, and finds it the NVML process's, never one it must make itself (opening NVML in its own process)."""
    backend = NvmlBackend(link_errors=link_errors)
    answering = _Answering(channel)
    devices: list = []
    try:
        step = (OPEN, backend.open) if channel.begin(OPEN) else None
        while step is not None:
            call, work = step
            answer = answering.run(call, work)
            step = _after(call, answer[0], backend, devices)
            if step is not None and not channel.begin(step[0]):
                step = None  # the collector made that call itself: it makes the rest too
            answering.send(("done", call, answer))
    except CollectorGone:
        return
    finally:
        answering.send(("end", None, finish()), quiet=True)


def _after(call: int, value: Any, backend: NvmlBackend, devices: list) -> Optional[tuple]:
    """The call the collector asks for after `call` (whose value is `value`, None where it raised), and its work;
    None after the last."""
    if call == OPEN:
        if not (isinstance(value, BackendInfo) and value.available) or not backend.device_count():
            return None
        return _gpu(0), lambda tracker: backend.probe_device(0, tracker)
    count = backend.device_count()
    if call > count:
        return None  # the peers were the last
    devices.append(value)
    if call < count:
        return _gpu(call), lambda tracker, index=call: backend.probe_device(index, tracker)
    reachable = [d for d in devices if isinstance(d, DeviceSnapshot) and d.reachable]
    if len(reachable) < 2:
        return None
    return _gpu(count), lambda tracker: _peers(backend, reachable, tracker)


def _peers(backend: NvmlBackend, reachable: list[DeviceSnapshot], tracker: CallTracker) -> tuple:
    """The peers, with the errors the call recorded on each GPU (the collector records them on its own copies) and
    the GPUs it was made for."""
    before = {d.index: len(d.errors) for d in reachable}
    peers = backend.probe_peers(reachable, tracker)
    return peers, {d.index: d.errors[before[d.index]:] for d in reachable}, sorted(before)


class _Answering:
    """Runs the calls and sends their answers; a thread of its own sends the progress of a call that runs long."""

    def __init__(self, channel: NvmlChannel) -> None:
        self._channel = channel
        self._lock = threading.Lock()  # one answer on the pipe at a time
        self._running: Optional[tuple] = None  # (call, tracker) while a call runs
        threading.Thread(target=self._watch, name="nvml-progress", daemon=True).start()

    def run(self, call: int, work: Callable[[CallTracker], Any]) -> tuple:
        """The call's answer: (its value or None, what it raised or None, calls completed, the partial snapshot
        where it raised)."""
        tracker = CallTracker()
        self._running = (call, tracker)
        value: Any = None
        error: Optional[BaseException] = None
        try:
            value = work(tracker)
        except Exception as exc:  # noqa: BLE001 - the collector's, as the backend raised it
            error = exc
        self._running = None
        return value, error, tracker.completed, tracker.partial if error else None

    def send(self, message: tuple, quiet: bool = False) -> None:
        try:
            data = pickle.dumps(message)
        except Exception as exc:  # noqa: BLE001 - an answer that cannot be pickled: its text still reaches it
            if message[0] != "done":
                return
            data = pickle.dumps(("done", message[1], (None, RuntimeError(f"{type(exc).__name__}: {exc}"), 0, None)))
        try:
            with self._lock:
                self._channel.send(data)
        except OSError as exc:
            if not quiet:
                raise CollectorGone() from exc

    def _watch(self) -> None:
        seen = told = None
        while True:
            time.sleep(MIRROR_SECONDS)
            running = self._running
            if running is None:
                seen = None
                continue
            call, tracker = running
            now = (call, tracker.current, tracker.completed)
            if now == seen and now != told:
                try:
                    self.send(("progress", call, (tracker.current, tracker.partial)), quiet=True)
                except Exception:  # noqa: BLE001 - the partial snapshot changed while pickled: the next look sends it
                    continue
                told = now
            seen = now


# -- the collector -------------------------------------------------------------------------------------------------


class _Pending:
    """One call made in the NVML process: what it is in while it runs, then its value or what it raised."""

    def __init__(self) -> None:
        self.finished = threading.Event()
        self.current: Optional[str] = None
        self.partial: Any = None
        self.completed = 0
        self.value: Any = None
        self.error: Optional[BaseException] = None

    def finish(self, value: Any, error: Optional[BaseException], completed: int, partial: Any) -> None:
        self.value, self.error, self.completed, self.partial = value, error, completed, partial
        self.current = None
        self.finished.set()

    def result(self, tracker: CallTracker) -> Any:
        while not self.finished.wait(MIRROR_SECONDS):
            tracker.current, tracker.partial = self.current, self.partial
        tracker.current, tracker.partial = None, self.partial
        tracker.completed += self.completed
        if self.error is not None:
            raise self.error
        return self.value


class PrefetchedNvml:
    """An NvmlBackend whose calls are made in the NVML process before the collector asks (see the module's text)."""

    name = NvmlBackend.name
    vendor = Vendor.NVIDIA
    power_samples = False  # a one-shot check's: no mean power since a previous probe (power_samples.py)

    def __init__(self, channel: NvmlChannel, link_errors: bool = True) -> None:
        self.link_errors = link_errors
        self.finished_with: Any = None  # what the NVML process sent last (serve's `finish`), once it came
        self._channel = channel
        self._backend = NvmlBackend(link_errors=link_errors)  # for the calls the NVML process did not begin
        self._opened_here = False
        self.made_here: list[int] = []  # the calls the NVML process had not begun when asked, made here
        self._count: Optional[int] = None
        self._lock = threading.Lock()
        self._answers: dict[int, _Pending] = {}
        self._end_came = threading.Event()
        threading.Thread(target=self._receive, name="nvml-answers", daemon=True).start()

    def _receive(self) -> None:
        while True:
            try:
                data = self._channel.receive()
                kind, call, payload = pickle.loads(data) if data is not None else ("gone", None, None)
            except Exception:  # noqa: BLE001 - a torn answer: the process died writing it
                kind, call, payload = "gone", None, None
            if kind == "end":
                self.finished_with = payload
                self._end_came.set()
                continue
            if kind == "gone":
                break
            pending = self._pending(call)
            if kind == "progress":
                pending.current, pending.partial = payload
            else:
                pending.finish(*payload)
        with self._lock:
            self._channel.gone = True
            for pending in self._answers.values():
                if not pending.finished.is_set():
                    pending.finish(None, _ended_without_answer(), 0, pending.partial)
        self._end_came.set()

    def _pending(self, call: int) -> _Pending:
        with self._lock:
            pending = self._answers.get(call)
            if pending is None:
                pending = self._answers[call] = _Pending()
                if self._channel.gone:
                    pending.finish(None, _ended_without_answer(), 0, None)
            return pending

    def _call(self, call: int, tracker: CallTracker, own: Callable[[CallTracker], Any]) -> Any:
        if self._channel.take(call):
            return self._pending(call).result(tracker)
        self.made_here.append(call)
        return own(tracker)

    def _own(self, tracker: CallTracker) -> NvmlBackend:
        """This process's own NvmlBackend, opened on its first call."""
        if not self._opened_here:
            info = self._backend.open(tracker)
            if not info.available:
                raise RuntimeError(f"NVML could not be opened in the collecting process: "
                                   f"{info.error.message if info.error else 'not available'}")
            self._opened_here = True
        return self._backend

    def open(self, tracker: CallTracker) -> BackendInfo:
        def own(tracker: CallTracker) -> BackendInfo:
            info = self._backend.open(tracker)
            self._opened_here = info.available
            return info

        info = self._call(OPEN, tracker, own)
        self._count = info.device_count if info.available else None
        return info

    def device_count(self) -> int:
        return self._count

    def probe_device(self, index: int, tracker: CallTracker) -> DeviceSnapshot:
        return self._call(_gpu(index), tracker, lambda tracker: self._own(tracker).probe_device(index, tracker))

    def probe_peers(self, devices: list[DeviceSnapshot], tracker: CallTracker) -> list[PeerLink]:
        mine = sorted(d.index for d in devices if d.vendor == self.vendor and d.reachable)
        if self._channel.take(_gpu(self._count or 0)):
            peers, added, made_for = self._pending(_gpu(self._count or 0)).result(tracker)
            if made_for == mine:
                for device in devices:
                    device.errors.extend(added.get(device.index, []))
                return peers
        self.made_here.append(_gpu(self._count or 0))
        own = self._own(tracker)
        own.open_handles([d for d in devices if d.vendor == self.vendor and d.reachable], tracker)
        return own.probe_peers(devices, tracker)

    def wait_for_end(self, seconds: float) -> None:
        """Give the NVML process's last message `seconds` to come (it follows its last answer at once)."""
        self._end_came.wait(seconds)

    def close(self) -> None:
        if self._opened_here:
            self._backend.close()


def _ended_without_answer() -> RuntimeError:
    return RuntimeError("the NVML process ended without answering this call")
