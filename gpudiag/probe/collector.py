"""The probe layer's front door: one call collects a whole NodeSnapshot within a deadline.

Order of work, each part bounded by what is left of `timeout_seconds`:
1. the host (sysfs/procfs): which GPUs are on the PCI bus decides which vendor libraries are worth opening;
2. the kernel log, concurrently with the vendor libraries being opened;
3. every device of every open backend, one after the other (NVML serialises anyway), each on its own thread
   with a bounded turn: one hung GPU leaves that GPU unreachable and named, the others are reported in full;
4. GPU pairs (topology, P2P), then the processes on the GPUs described through psutil.

A check family adds a probe part of its own as a module part.py in its sub-package gpudiag/probe/<name>/ (beside the
family's other probe modules), found by its name (no step to wire here): `collect(snapshot, options, until)` reads the
part on its own thread beside the vendor probes (step 2), from the host and PCI facts already in `snapshot`, and returns
its value; `store(snapshot, value, error)` then puts the value in the snapshot, or, when the part failed or missed the
deadline, says so there (value None, a ProbeError). Such a part is optional (one of PROBE_PARTS), collected when a
selected check's family names it (gpudiag/checks/family.py `probe_parts`). How to add one:
docs/adding-a-check-family.md.

`Collector` keeps the vendor libraries open between collections (the exporter); `collect()` is the one-shot form
(`gpudiag check`).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.util
import logging
import os
import time
from dataclasses import field
from pathlib import Path
from typing import Callable, Optional

from gpudiag import DEFAULT_DEADLINE_SECONDS, __version__
from gpudiag.model import (
    BackendInfo,
    CollectorRun,
    DeviceSnapshot,
    ErrorKind,
    NodeSnapshot,
    ProbeError,
    Vendor,
)
from gpudiag.model.records import dataclass
from gpudiag.probe import deadline, index
from gpudiag.probe.amdgpu import ras_threshold as amdgpu_ras_threshold
from gpudiag.probe.base import Backend, DeviceLost
from gpudiag.probe.standins import lost_device, outcome_error, place_unidentified, unreachable_device
from gpudiag.probe.vendor_backends import VENDOR_BACKENDS, VENDOR_PYTHON_MODULE

log = logging.getLogger(__name__)

# A backend that could not be opened is retried no sooner than this, doubling up to the maximum (a driver that is
# loaded after the exporter started is picked up; a missing one is not hammered every scrape).
REOPEN_BACKOFF_SECONDS = 15.0
REOPEN_BACKOFF_MAX_SECONDS = 300.0


# The kernel log scan stops this long before the collection's deadline, so that its partial result is in hand when
# the collector stops waiting for it.
KERNEL_LOG_MARGIN_SECONDS = 0.25


# The probe parts families add: a sub-package <name>/ of the package with a module part.py, by name -> module (module
# docstring), as tools/gen_registry_index.py found them (index.py). Nothing is imported until the part is collected.
FAMILY_PARTS: dict[str, str] = dict(index.FAMILY_PARTS)
# Optional parts of a collection, each costly enough to skip when nothing will judge it (`check --only pcie`).
PROBE_PARTS = frozenset({"kernel_log", "peers", "link_errors"}) | frozenset(FAMILY_PARTS)


@dataclass
class CollectOptions:
    """What to collect and how: root, kernel-log source, deadline and the optional probe parts."""
    root: Path = Path("/")
    kernel_log_file: Optional[Path] = None
    timeout_seconds: float = DEFAULT_DEADLINE_SECONDS
    read_kernel_log: bool = True
    parts: frozenset = PROBE_PARTS  # which of PROBE_PARTS to collect
    # Where `gpudiag serve` keeps its journal, read for earlier boots' faults (probe/kernel_log/boot_history.py); None:
    # not read.
    state_dir: Optional[Path] = None
    journalctl: Optional[str] = None  # the program to read the systemd journal with; None: journalctl on PATH
    # What a probe part carries from one collection to the next of the Collector these options belong to (part name
    # -> the part's own object, e.g. the last NIC counters): a one-shot `gpudiag check` starts with none.
    part_state: dict = field(default_factory=dict, repr=False, compare=False)
    # An NVIDIA backend made ahead (a cold direct check's vendor child's, over gpudiag/probe/nvml/ahead_answers.py) to
    # use instead of a new one, where it reads what these options ask (the NVLink error counters or not).
    nvml_backend: Optional[Backend] = field(default=None, repr=False, compare=False)
    power_samples: bool = False  # ask for PowerInfo.average_watts: a Collector that collects again (top, serve)

    def __post_init__(self) -> None:
        unknown = set(self.parts) - PROBE_PARTS
        if unknown:
            raise ValueError(f"unknown probe part(s) {sorted(unknown)}; known: {sorted(PROBE_PARTS)}")


class _BackendSlot:
    """One vendor's chain of backends (amdsmi → sysfs) and its reopen schedule."""

    def __init__(self, vendor: Vendor, backends: list[Backend]):
        self.vendor = vendor
        self.chain = backends
        self.active: Optional[Backend] = None
        self.infos: list[BackendInfo] = []
        self.next_attempt = 0.0
        self.backoff = REOPEN_BACKOFF_SECONDS
        # Opens and peer probes still hung from an earlier collection, by name: never start a second one.
        self.in_flight: dict[str, deadline.Outcome] = {}
        # Device probes still hung from an earlier collection, by device index: never start a second one.
        self.hung: dict[int, deadline.Outcome] = {}

    def due(self, now: float) -> bool:
        return self.active is None and now >= self.next_attempt

    def failed_open(self, now: float) -> None:
        self.next_attempt = now + self.backoff
        self.backoff = min(self.backoff * 2, REOPEN_BACKOFF_MAX_SECONDS)


class Collector:
    def __init__(self, options: Optional[CollectOptions] = None):
        self.options = options or CollectOptions()
        self._slots: dict[Vendor, _BackendSlot] = {}
        # Earlier boots do not change while this one lasts: read once, complete, per boot (the service collects
        # every few seconds).
        self._boot_history = None

    # -- public -----------------------------------------------------------------------------------------------

    def collect(self) -> NodeSnapshot:
        started = time.monotonic()
        until = started + self.options.timeout_seconds
        snapshot = NodeSnapshot(
            hostname=os.uname().nodename,  # socket.gethostname()'s answer, without socket
            collected_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            gpudiag_version=__version__,
        )
        from gpudiag.probe import host

        cpu = host.CpuSampler()
        cpu.start()

        self._collect_host(snapshot, until)
        kernel_log_job = self._start_kernel_log(until, snapshot.host.boot_id, snapshot.host.boot_time)
        part_jobs = self._start_family_parts(snapshot, until)
        self._open_backends(snapshot, until)
        self._collect_devices(snapshot, until)
        amdgpu_ras_threshold.refine_defaults(snapshot)
        self._collect_peers(snapshot, until)
        self._finish_kernel_log(snapshot, kernel_log_job, until)
        self._finish_family_parts(snapshot, part_jobs, until)

        snapshot.host.cpu_percent, snapshot.host.per_cpu_percent = cpu.finish()
        _local_cpus_from_sysfs(snapshot)
        # Process names and owners go through psutil, and owners through NSS (LDAP/sssd can hang): bounded too.
        described = deadline.run_one(lambda t: self._describe_processes(snapshot), max(0.5, _remaining(until)),
                                     "processes")
        if not described.done or described.error is not None:
            self._record_run(snapshot, "processes", described)
        if snapshot.host.hostname:
            snapshot.hostname = snapshot.host.hostname
        snapshot.duration_seconds = round(time.monotonic() - started, 4)
        return snapshot

    def reprobe(self, device: DeviceSnapshot, timeout_seconds: float = 5.0) -> DeviceSnapshot:
        """A fresh reading of one device through its open backend (the load tests watch clocks, temperatures and
        ECC counters with it), bounded like every vendor call; an unreachable stand-in if it misses the deadline."""
        slot = self._slots.get(device.vendor)
        if slot is None or slot.active is None:
            raise RuntimeError(f"no open backend for {device.vendor} devices")
        backend = slot.active
        outcome = deadline.run_one(lambda t: backend.probe_device(device.index, t), timeout_seconds, "reprobe")
        if outcome.done and outcome.error is None:
            return outcome.value
        if outcome.done and isinstance(outcome.error, DeviceLost):
            return lost_device(device.vendor, backend.name, device.index, outcome)
        return unreachable_device(device.vendor, backend.name, device.index, outcome)

    def kernel_events(self, timeout_seconds: float = 5.0) -> Optional[list]:
        """A fresh scan of the kernel log (KernelEvent list), or None when it is not read or not readable: the load
        tests compare the events before and after the stress to find Xids / resets the load caused."""
        if not self.options.read_kernel_log and self.options.kernel_log_file is None:
            return None
        from gpudiag.probe.kernel_log import reader as kernel_log

        info = kernel_log.read_kernel_log(self.options.root, self.options.kernel_log_file,
                                          until=time.monotonic() + timeout_seconds)
        return info.events if info.readable else None

    def close(self) -> None:
        for slot in self._slots.values():
            if slot.active is not None:
                try:
                    slot.active.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    log.debug("closing %s failed", slot.active.name, exc_info=True)
                slot.active = None

    def __enter__(self) -> "Collector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- parts ------------------------------------------------------------------------------------------------

    def _collect_host(self, snapshot: NodeSnapshot, until: float) -> None:
        from gpudiag.probe import host

        def work(tracker: deadline.CallTracker) -> None:
            tracker.enter("sysfs")
            snapshot.host, host_errors = host.probe_host(self.options.root)
            snapshot.pci_gpus, pci_errors = host.probe_pci_gpus(self.options.root)
            snapshot.errors.extend(host_errors + pci_errors)
            tracker.leave()

        outcome = deadline.run_one(work, _remaining(until), "host")
        self._record_run(snapshot, "host", outcome)

    def _start_kernel_log(self, until: float, boot_id: Optional[str] = None,
                          boot_time: Optional[float] = None) -> Optional[Callable[[float], deadline.Outcome]]:
        """The log scan runs on its own thread beside the vendor probes. It stops itself a little before the
        collection's deadline (then its result says it is incomplete), so that it neither outlives the collection
        nor makes the probes wait: its patterns are linear and its lines capped (kernel_log/events.py), so it holds
        the GIL only in short slices. Earlier boots (boot_history.py: the service's journal, `journalctl`) are read
        on a thread of their own beside it, not after it: a cold check waits for the longer of the two, not their
        sum (issue 36, item 9). Both are the one part "kernel_log", which fails if either does."""
        if "kernel_log" not in self.options.parts or (
            not self.options.read_kernel_log and self.options.kernel_log_file is None
        ):
            return None
        from gpudiag.probe.kernel_log import reader as kernel_log

        stop_at = until - min(KERNEL_LOG_MARGIN_SECONDS, self.options.timeout_seconds / 10)
        history = None
        if self.options.kernel_log_file is None:  # a saved log may be another node's: its history is not this one's
            def read_history(tracker: deadline.CallTracker) -> None:
                tracker.enter("boot_history")
                self._read_boot_history(boot_id, boot_time, stop_at)
                tracker.leave()

            history = deadline.start(read_history, "boot_history")
        scan = deadline.start(lambda tracker: kernel_log.read_kernel_log(
            self.options.root, self.options.kernel_log_file, until=stop_at), "kernel_log")
        return scan if history is None else lambda wait_until: _both(scan(wait_until), history(wait_until))

    def _read_boot_history(self, boot_id: Optional[str], boot_time: Optional[float], until: float) -> None:
        from gpudiag.probe.kernel_log.boot_history import read_boot_history

        cached = self._boot_history
        if cached is not None and cached.current_boot == boot_id and not cached.cut_short:
            return
        self._boot_history = read_boot_history(self.options.root, self.options.state_dir, boot_id, boot_time, until,
                                               self.options.journalctl)

    def _finish_kernel_log(self, snapshot: NodeSnapshot, job, until: float) -> None:
        if job is None:
            return
        outcome = job(until)
        self._record_run(snapshot, "kernel_log", outcome)
        if outcome.done and outcome.error is None:
            snapshot.kernel_log = outcome.value
            snapshot.boot_history = self._boot_history
        else:
            snapshot.kernel_log.error = outcome_error("kernel_log", outcome)

    def _start_family_parts(self, snapshot: NodeSnapshot, until: float) -> dict:
        """Start every selected part a family added (FAMILY_PARTS), each on its own thread, bounded by `until`."""
        jobs = {}
        for name, module_name in FAMILY_PARTS.items():
            if name in self.options.parts:
                part = importlib.import_module(module_name)
                jobs[name] = (part, deadline.start(lambda t, p=part: p.collect(snapshot, self.options, until), name))
        return jobs

    def _finish_family_parts(self, snapshot: NodeSnapshot, jobs: dict, until: float) -> None:
        for name, (part, wait) in jobs.items():
            outcome = wait(until)
            self._record_run(snapshot, name, outcome)
            if outcome.done and outcome.error is None:
                part.store(snapshot, outcome.value, None)
            else:  # fail closed: the part's checks see that it was not read, never an empty reading
                part.store(snapshot, None, outcome_error(name, outcome))

    def _open_backends(self, snapshot: NodeSnapshot, until: float) -> None:
        """Open each relevant vendor's backend chain (or reuse the open one), recording what every link said."""
        vendors_on_bus = {gpu.vendor for gpu in snapshot.pci_gpus}
        now = time.monotonic()
        for vendor, make in VENDOR_BACKENDS.items():
            if not self._relevant(vendor, vendors_on_bus):
                continue
            slot = self._slots.get(vendor)
            if slot is None:
                slot = self._slots[vendor] = _BackendSlot(vendor, make(self.options))
            if slot.due(now):
                slot.infos = []
                for backend in slot.chain:
                    outcome = _run_unless_hung(slot, f"open:{backend.name}", backend.open, until)
                    info = outcome.value if outcome.done and outcome.error is None else BackendInfo(
                        name=backend.name, vendor=vendor, error=outcome_error(f"{backend.name}.open", outcome)
                    )
                    # An open that returned without raising but left the library unusable is a failure too.
                    snapshot.collectors.append(CollectorRun(
                        name=f"open:{backend.name}", success=info.available,
                        duration_seconds=round(outcome.elapsed_seconds, 4),
                        error=None if info.available else (info.error.message if info.error else "not available"),
                    ))
                    slot.infos.append(info)
                    if info.available:
                        slot.active = backend
                        slot.backoff = REOPEN_BACKOFF_SECONDS
                        break
                else:
                    slot.failed_open(now)
            snapshot.backends.extend(slot.infos)

    def _relevant(self, vendor: Vendor, vendors_on_bus: set[Vendor]) -> bool:
        """A vendor's libraries are opened when its GPUs are on the PCI bus, when they were opened before, or —
        where the PCI bus cannot be seen at all (some containers) — when its Python binding is installed."""
        if vendor in vendors_on_bus or vendor in self._slots:
            return True
        if vendors_on_bus:
            return False
        return importlib.util.find_spec(VENDOR_PYTHON_MODULE[vendor]) is not None

    def _collect_devices(self, snapshot: NodeSnapshot, until: float) -> None:
        jobs: dict[tuple[Vendor, int], Callable] = {}
        stuck: list[DeviceSnapshot] = []
        for vendor, slot in self._slots.items():
            if slot.active is None:
                continue
            backend = slot.active
            count_outcome = deadline.run_one(lambda t, b=backend: b.device_count(), _remaining(until), "count")
            if not count_outcome.done or count_outcome.error is not None:
                snapshot.errors.append(outcome_error(f"{backend.name}.device_count", count_outcome))
                continue
            for gpu in range(count_outcome.value):
                previous = slot.hung.get(gpu)
                if previous is not None and previous.still_running:
                    stuck.append(unreachable_device(vendor, backend.name, gpu, previous, still_hung=True))
                    continue
                slot.hung.pop(gpu, None)
                jobs[(vendor, gpu)] = lambda t, b=backend, i=gpu: b.probe_device(i, t)

        started = time.monotonic()
        outcomes = deadline.run_in_turn(jobs, _remaining(until))
        devices: list[DeviceSnapshot] = []
        for (vendor, gpu), outcome in outcomes.items():
            backend = self._slots[vendor].active
            if outcome.done and outcome.error is None:
                devices.append(outcome.value)
            elif outcome.done and isinstance(outcome.error, DeviceLost):
                devices.append(lost_device(vendor, backend.name, gpu, outcome))
            elif outcome.done:
                log.warning("probing %s device %d failed", backend.name, gpu, exc_info=outcome.error,
                            extra={"bound": ("probe failed", backend.name, gpu)})  # each collection: bounded
                devices.append(unreachable_device(vendor, backend.name, gpu, outcome))
            elif outcome.started:
                self._slots[vendor].hung[gpu] = outcome
                devices.append(unreachable_device(vendor, backend.name, gpu, outcome))
            else:
                devices.append(unreachable_device(vendor, backend.name, gpu, outcome))
        devices.extend(stuck)
        snapshot.devices = sorted(devices, key=lambda d: (d.vendor.value, d.index))
        place_unidentified(snapshot.devices, snapshot.pci_gpus)
        for vendor, slot in self._slots.items():
            if slot.active is None:
                continue
            mine = [d for d in snapshot.devices if d.vendor == vendor]
            snapshot.collectors.append(
                CollectorRun(
                    name=slot.active.name,
                    success=all(d.reachable for d in mine),
                    duration_seconds=round(time.monotonic() - started, 4),
                    error=next((e.message for d in mine for e in d.errors if not d.reachable), None),
                )
            )

    def _collect_peers(self, snapshot: NodeSnapshot, until: float) -> None:
        if "peers" not in self.options.parts:
            return
        for vendor, slot in self._slots.items():
            reachable = [d for d in snapshot.devices if d.vendor == vendor and d.reachable]
            if slot.active is None or len(reachable) < 2:
                continue
            backend = slot.active
            outcome = _run_unless_hung(slot, "peers", lambda t: backend.probe_peers(reachable, t), until)
            self._record_run(snapshot, f"peers:{backend.name}", outcome)
            if outcome.done and outcome.error is None:
                snapshot.peers.extend(outcome.value)
            else:
                snapshot.errors.append(outcome_error(f"{backend.name}.peers", outcome))

    def _describe_processes(self, snapshot: NodeSnapshot) -> None:
        from gpudiag.probe import host

        processes = [p for d in snapshot.devices for p in (d.processes or [])]
        if processes:
            host.describe_processes(processes)

    @staticmethod
    def _record_run(snapshot: NodeSnapshot, name: str, outcome: deadline.Outcome) -> None:
        error = None
        if not outcome.done or outcome.error is not None:
            error = outcome_error(name, outcome).message
        snapshot.collectors.append(
            CollectorRun(name=name, success=error is None, duration_seconds=round(outcome.elapsed_seconds, 4),
                         error=error)
        )


def collect(options: Optional[CollectOptions] = None) -> NodeSnapshot:
    """One-shot collection (`gpudiag check`): open, collect, close."""
    with Collector(options) as collector:
        return collector.collect()


# ---------------------------------------------------------------------------------------------------------------


def _local_cpus_from_sysfs(snapshot: NodeSnapshot) -> None:
    """A GPU's local CPUs come from the kernel (sysfs local_cpulist) unless its backend said otherwise."""
    from gpudiag.probe.pci import parse_cpulist

    for device in snapshot.devices:
        pci = snapshot.pci_gpu(device.physical_pci_bus_id or device.pci_bus_id)
        if device.cpu_affinity is None and pci is not None and pci.local_cpulist:
            try:
                device.cpu_affinity = parse_cpulist(pci.local_cpulist) or None
            except ValueError:
                snapshot.errors.append(ProbeError("sysfs:local_cpulist", ErrorKind.ERROR,
                                                  f"unparsable {pci.local_cpulist!r}"))


def _run_unless_hung(slot: _BackendSlot, name: str, fn: Callable, until: float) -> deadline.Outcome:
    """Run `fn` under the deadline, unless the same call from an earlier collection is still hung in the library:
    then that earlier outcome is returned as it stands (a second call would only pile up behind the first)."""
    previous = slot.in_flight.get(name)
    if previous is not None and previous.still_running:
        return previous
    outcome = deadline.run_one(fn, _remaining(until), name)
    if outcome.done:
        slot.in_flight.pop(name, None)
    else:
        slot.in_flight[name] = outcome
    return outcome


def _both(scan: deadline.Outcome, history: deadline.Outcome) -> deadline.Outcome:
    """The kernel-log part's one outcome from its two threads: the scan's value once both finished without error;
    else the scan's failure, or the history's (its tracker names boot_history), as when one thread did both."""
    elapsed = max(scan.elapsed_seconds, history.elapsed_seconds)
    for outcome in (scan, history):
        if not outcome.done or outcome.error is not None:
            return dataclasses.replace(outcome, elapsed_seconds=elapsed) if outcome.done else outcome
    return dataclasses.replace(scan, elapsed_seconds=elapsed)


def _remaining(until: float) -> float:
    return max(0.0, until - time.monotonic())
