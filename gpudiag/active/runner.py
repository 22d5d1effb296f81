"""One run of the load tests over a node: which GPUs, in which order, within which time.

The tests run on a worker thread while the calling thread watches the deadline and Ctrl-C: a call hung inside the
driver cannot be interrupted, so the caller must be free to give up on it and report which call it was. On the
deadline or Ctrl-C the tests are asked to stop; each ends at its next step and frees what it took (Resources), and
the runtime's contexts are released. Order: PCIe copies one GPU at a time (GPUs sharing a switch or a root port
would otherwise share its bandwidth), then the GPU pairs, then the memory test and the stress on all GPUs at once
(the stress as a node, as a job would load it: power and cooling are shared).
"""

from __future__ import annotations

import copy
import datetime
import logging
import threading
import time
from typing import Callable, Optional

from gpudiag.active.bandwidth import host_copies, peer_matrix
from gpudiag.active.eta import PACES, STRESS_OVERHEAD_SECONDS, Remaining
from gpudiag.active.hbm import hbm_bandwidth
from gpudiag.active.memtest import memtest
from gpudiag.active.options import ActiveOptions
from gpudiag.active.plan import runtime_ordinals, size_text, skip_reason
from gpudiag.active.runtime import GpuCallError, GpuRuntime, RuntimeUnavailable
from gpudiag.active.session import Control, Progress, Session
from gpudiag.active.stress import stress
from gpudiag.model import (
    ActiveDevice,
    ActiveResults,
    CopyBandwidth,
    DeviceSnapshot,
    ErrorKind,
    HbmBandwidth,
    MemtestResult,
    NodeSnapshot,
    ProbeError,
    StressResult,
    Vendor,
)
from gpudiag.probe.deadline import CallTracker

log = logging.getLogger(__name__)

Planned = tuple[ActiveDevice, DeviceSnapshot, int]  # result entry, snapshot device, runtime ordinal


def default_runtime(vendor: Vendor, tracker: CallTracker) -> GpuRuntime:
    if vendor == Vendor.NVIDIA:
        from gpudiag.active.cuda import CudaRuntime

        return CudaRuntime(tracker)
    from gpudiag.active.hip import HipRuntime

    return HipRuntime(tracker)


def run_active(snapshot: NodeSnapshot, options: Optional[ActiveOptions] = None,
               control: Optional[Control] = None) -> ActiveResults:
    """Load the idle GPUs of `snapshot` with the tests in `options`; never raises for a GPU or runtime problem
    (those are in the results). KeyboardInterrupt stops the tests, frees the GPUs, then propagates. `control`: the
    caller's, to stop the tests from elsewhere (a screen's SIGTERM handler: active/screen/worker.py)."""
    options = options or ActiveOptions()
    began = time.monotonic()
    results = ActiveResults(tests=list(options.tests),
                            started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    control = control or Control(until=None)
    if control.until is None and options.deadline_seconds is not None:
        control.until = began + options.deadline_seconds
    progress = Progress(options.progress, Remaining(control.until))
    trackers: list[CallTracker] = []
    done = threading.Event()

    def work() -> None:
        try:
            _work(snapshot, options, results, control, progress, trackers)
        finally:
            done.set()

    threading.Thread(target=work, name="gpudiag-active", daemon=True).start()
    try:
        finished = _supervise(done, control, options)
    except KeyboardInterrupt:
        control.request_stop("interrupted")
        progress.say("interrupted: stopping the load and freeing the GPUs")
        done.wait(options.grace_seconds)
        raise
    if not finished:
        hung = ", ".join(t.current for t in trackers if t.current) or "an unknown call"
        results = copy.deepcopy(results)  # the abandoned worker may still write to its own copy
        results.errors.append(ProbeError("active", ErrorKind.TIMEOUT, (
            f"the load tests did not stop within {options.grace_seconds:g} s of the deadline: stuck in {hung}. The GPU "
            f"stopped answering; check the kernel log for Xid / amdgpu reset messages. gpudiag's GPU memory is "
            f"released when the process exits.")))
    results.duration_seconds = round(time.monotonic() - began, 3)
    return results


def _supervise(done: threading.Event, control: Control, options: ActiveOptions) -> bool:
    """Wait for the tests; past the deadline, ask them to stop and wait `grace_seconds` more. False: abandoned.

    An Event, not Thread.join: a KeyboardInterrupt that lands inside join() makes CPython (3.9-3.12, the bpo-45274
    fix) mark the still-running thread as stopped, after which join() no longer waits for it."""
    while not done.wait(0.2):  # short waits: Ctrl-C is delivered to this thread between them
        if control.until is not None and time.monotonic() >= control.until:
            control.request_stop("deadline reached")
            return done.wait(options.grace_seconds)
    return True


def _work(snapshot: NodeSnapshot, options: ActiveOptions, results: ActiveResults, control: Control,
          progress: Progress, trackers: list[CallTracker]) -> None:
    if not snapshot.devices:
        results.errors.append(ProbeError("active", ErrorKind.NOT_FOUND,
                                         "no GPU was enumerated by a vendor library: nothing to test"))
    factory: Callable[[Vendor, CallTracker], GpuRuntime] = options.runtime_factory or default_runtime
    by_vendor: dict[Vendor, list[DeviceSnapshot]] = {}
    for device in snapshot.devices:
        by_vendor.setdefault(device.vendor, []).append(device)
    for vendor, devices in by_vendor.items():
        tracker = CallTracker()
        trackers.append(tracker)
        entries = [ActiveDevice(index=d.index, pci_bus_id=d.pci_bus_id) for d in devices]
        results.devices.extend(entries)
        try:
            runtime = factory(vendor, tracker)
        except (RuntimeUnavailable, GpuCallError) as exc:
            results.errors.append(exc.probe_error())
            progress.say(f"{vendor} GPUs not tested: {exc}")
            for entry in entries:
                _fail_untested(entry, options, exc.probe_error())
            continue
        session = Session(runtime, options, control, progress)
        try:
            _run_vendor(session, devices, entries, results)
        except (RuntimeUnavailable, GpuCallError) as exc:  # enumeration failed: no GPU of this vendor is testable
            results.errors.append(exc.probe_error())
            for entry in entries:
                _fail_untested(entry, options, exc.probe_error())
        finally:
            try:
                runtime.close()
            except Exception as exc:  # noqa: BLE001 - the results stand; say that a context may linger
                log.warning("closing the %s runtime failed: %s", runtime.name, exc)


def _run_vendor(session: Session, devices: list[DeviceSnapshot], entries: list[ActiveDevice],
                results: ActiveResults) -> None:
    runtime, options, progress = session.runtime, session.options, session.progress
    label = f"{runtime.name} {runtime.version() or ''}".strip()
    ordinals = runtime_ordinals(runtime, runtime.device_count())
    planned: list[Planned] = []
    for device, entry in zip(devices, entries):
        entry.runtime = label
        reason = skip_reason(device, options)
        if reason is None and device.pci_bus_id not in ordinals:
            reason = f"the {runtime.name} runtime does not see it (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES?)"
        if reason is None:
            try:
                reason = _claim(session, ordinals[device.pci_bus_id])
            except (RuntimeUnavailable, GpuCallError) as exc:  # every test of this GPU says why it did not run
                _fail_untested(entry, options, exc.probe_error())
                progress.say(f"GPU {device.index} ({device.pci_bus_id}) could not be opened: {exc}")
                continue
        if reason:
            entry.skipped = reason
            progress.say(f"GPU {device.index} ({device.pci_bus_id}) skipped: {reason}")
        else:
            planned.append((entry, device, ordinals[device.pci_bus_id]))
    remaining = progress.remaining
    remaining.plan(_phases(options, planned))
    if "pcie" in options.tests:
        remaining.begin("pcie")
        for done, (entry, device, ordinal) in enumerate(planned, 1):
            entry.h2d, entry.d2h = host_copies(session, ordinal, device)
            links = {(c.link_generation, c.link_width) for c in (entry.h2d, entry.d2h) if c.link_generation}
            seen = f", link under load Gen{max(links)[0]} x{max(links)[1]}" if links else ""
            remaining.advance("pcie", done / len(planned))
            progress.say(f"GPU {device.index}: host->device {entry.h2d.gb_per_second} GB/s, "
                         f"device->host {entry.d2h.gb_per_second} GB/s{seen}")
    if "p2p" in options.tests and len(planned) >= 2:
        remaining.begin("p2p")
        results.peers.extend(peer_matrix(session, [(entry.index, ordinal) for entry, _, ordinal in planned]))
    if "hbm" in options.tests:
        remaining.begin("hbm")
        _on_each(planned, lambda entry, device, ordinal: setattr(entry, "hbm", hbm_bandwidth(session, ordinal, device)))
    if "memtest" in options.tests:
        remaining.begin("memtest")
        _on_each(planned, lambda entry, device, ordinal: setattr(entry, "memtest", memtest(session, ordinal, device)))
    if "stress" in options.tests:
        remaining.begin("stress")
        before = _kernel_events(session)
        _on_each(planned, lambda entry, device, ordinal: setattr(entry, "stress", stress(session, ordinal, device)))
        _attach_new_events(planned, before, _kernel_events(session) if before is not None else None)


def _phases(options: ActiveOptions, planned: list[Planned]) -> list[tuple[str, float]]:
    """The phases this run will go through and how long each should take at PACES (active/eta.py): the host copies
    and the pairs one after the other, the rest on every GPU at once."""
    count = len(planned)
    if not count:
        return []
    copies = 1 + options.copy_batches * options.copy_repeats  # a warm-up copy, then the timed batches
    largest = max((d.memory.total_bytes or 0) if d.memory else 0 for _, d, _ in planned)
    sweeps = 2 + (4 if options.memtest_inversions else 0)  # fill and check; moving inversions add four
    phases = [
        ("pcie", "pcie" in options.tests, count * 2 * copies * options.copy_bytes / PACES["copy"]),
        ("p2p", "p2p" in options.tests and count >= 2,
         count * (count - 1) * 2 * copies * options.p2p_bytes / PACES["copy"]),
        ("hbm", "hbm" in options.tests,
         (1 + options.copy_batches * options.hbm_repeats) * 2 * options.hbm_bytes / PACES["hbm"]),
        ("memtest", "memtest" in options.tests,
         options.memtest_passes * sweeps * options.memtest_fraction * largest / PACES["memtest"]),
        ("stress", "stress" in options.tests, options.stress_seconds + STRESS_OVERHEAD_SECONDS),
    ]
    return [(name, seconds) for name, wanted, seconds in phases if wanted]


MAX_STRESS_EVENTS = 20  # per GPU: a flood of Xids says enough in its first lines


def _kernel_events(session: Session) -> Optional[list]:
    reader = session.options.kernel_events
    if reader is None:
        return None
    try:
        return reader()
    except Exception as exc:  # noqa: BLE001 - the stress is judged without the log; say why
        session.progress.say(f"the kernel log could not be read around the stress: {exc}")
        return None


def _attach_new_events(planned: list[Planned], before: Optional[list], after: Optional[list]) -> None:
    """Events of each loaded GPU (by bus ID) that the log shows after the stress and did not before."""
    if before is None or after is None:
        return
    seen = {(e.timestamp_seconds, e.message) for e in before}
    new = [e for e in after if (e.timestamp_seconds, e.message) not in seen]
    for entry, device, _ in planned:
        if entry.stress is None:
            continue
        mine = [e for e in new if e.pci_bus_id and e.pci_bus_id == device.pci_bus_id]
        entry.stress.kernel_events = [f"{e.kind}{'' if e.code is None else ' ' + str(e.code)}: {e.message[:200]}"
                                      for e in mine[:MAX_STRESS_EVENTS]]


def _claim(session: Session, ordinal: int) -> Optional[str]:
    """Open the GPU and look at its memory once more: the snapshot may be minutes old, and a job in another
    container shows no process. A GPU found busy is let go at once."""
    session.runtime.use(ordinal)
    free, total = session.runtime.memory_info()
    if total - free > session.options.busy_memory_bytes:
        session.runtime.release(ordinal)
        return f"busy with another job, not disturbed: {size_text(total - free)} of its memory is already in use"
    return None


def _fail_untested(entry: ActiveDevice, options: ActiveOptions, error: ProbeError) -> None:
    """Every requested test of this GPU carries `error`: a check then says why it could not judge."""
    if "pcie" in options.tests:
        entry.h2d, entry.d2h = CopyBandwidth(error=error), CopyBandwidth(error=error)
    if "hbm" in options.tests:
        entry.hbm = HbmBandwidth(error=error)
    if "memtest" in options.tests:
        entry.memtest = MemtestResult(passes_requested=options.memtest_passes, error=error)
    if "stress" in options.tests:
        entry.stress = StressResult(seconds_requested=options.stress_seconds, error=error)


def _on_each(planned: list[Planned], work: Callable[[ActiveDevice, DeviceSnapshot, int], None]) -> None:
    """`work` on every GPU at once, one thread each (each thread makes its GPU current for itself)."""
    def guarded(entry: ActiveDevice, device: DeviceSnapshot, ordinal: int) -> None:
        try:
            work(entry, device, ordinal)
        except Exception:  # noqa: BLE001 - the tests record their own errors; this is a bug, keep the others
            log.exception("load test on GPU %d failed", device.index)

    threads = [threading.Thread(target=guarded, args=item, name=f"gpudiag-active-gpu{item[1].index}", daemon=True)
               for item in planned]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
