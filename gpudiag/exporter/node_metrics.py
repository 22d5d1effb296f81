"""Series for a whole collection: devices, GPUs seen only on the PCI bus, backends, check results, self-health."""

from __future__ import annotations

import datetime
import platform
from collections import Counter
from typing import Iterable

from gpudiag import __version__
from gpudiag.checks.active.stress_figures import StressFigures, figures_of
from gpudiag.exporter import catalog as m
from gpudiag.exporter.device_metrics import add_aer, add_device
from gpudiag.exporter.families import NO_GPU, FamilySet, gpu_labels
from gpudiag.model import STATUS_SEVERITY, CheckResult, CollectorRun, ComputeVerification, NodeSnapshot, Status
from gpudiag.report.subject import subject

# gpudiag_check_ok: what an operator can rely on. Unknown is not ok: a check that could not decide has not shown
# the GPU healthy (docs/architecture.md).
_OK_STATUSES = {Status.PASS, Status.WARN, Status.SKIP}


def add_build_info(fs: FamilySet) -> None:
    fs.add(m.BUILD_INFO, (__version__, platform.python_version()), 1)


def add_snapshot(fs: FamilySet, snapshot: NodeSnapshot) -> None:
    drivers = {b.name: b.driver_version for b in snapshot.backends}
    for device in snapshot.devices:
        fs.add(m.DEVICE_UP, gpu_labels(device), int(device.reachable))
        add_device(fs, device, drivers.get(device.source))
    _add_pci_functions(fs, snapshot)
    fs.add(m.NODE_GPUS, ("pci_bus",), len(snapshot.pci_gpus))
    # As inventory.gpu_count counts them: physical GPUs (not CPX partitions) that answered.
    fs.add(m.NODE_GPUS, ("answering",), sum(1 for d in snapshot.devices if d.reachable and not d.is_logical_partition))
    for backend in snapshot.backends:
        fs.add(m.BACKEND_UP, (backend.name, backend.vendor.value), int(backend.available))
        if backend.available:
            versions = (backend.driver_version, backend.library_version, backend.runtime_version)
            fs.add(m.BACKEND_INFO, (backend.name, backend.vendor.value) + tuple(v or "" for v in versions), 1)
    add_collector_runs(fs, snapshot.collectors)
    _add_probe_errors(fs, snapshot)
    log = snapshot.kernel_log
    if log.source is not None or log.error is not None:
        fs.add(m.KERNEL_LOG_READABLE, (), int(log.readable))
    if snapshot.active is not None:
        add_active(fs, snapshot)
    for family in m.family_modules():  # the metrics a check family adds (exporter/metrics_<family>.py)
        family.add(fs, snapshot)


_GB = 1e9


def add_active(fs: FamilySet, snapshot: NodeSnapshot) -> None:
    """What the load tests measured; a test that did not run (or a GPU that was skipped) has no series."""
    active = snapshot.active
    if active.started_at:
        fs.add(m.ACTIVE_RUN, (), datetime.datetime.fromisoformat(active.started_at).timestamp())
    devices = {d.index: d for d in snapshot.devices}
    for result in active.devices:
        device = devices.get(result.index)
        if device is None:
            continue
        ids = gpu_labels(device)
        for direction, copy in (("h2d", result.h2d), ("d2h", result.d2h)):
            if copy is not None and copy.gb_per_second is not None:
                fs.add(m.ACTIVE_COPY_BANDWIDTH, ids + (direction,), copy.gb_per_second * _GB)
            if copy is not None:
                fs.add(m.ACTIVE_LINK_GENERATION, ids + (direction,), copy.link_generation)
                fs.add(m.ACTIVE_LINK_WIDTH, ids + (direction,), copy.link_width)
        if result.memtest is not None and result.memtest.error is None:
            fs.add(m.ACTIVE_MEMTEST_BYTES, ids, result.memtest.bytes_tested)
            fs.add(m.ACTIVE_MEMTEST_MISMATCHES, ids, result.memtest.mismatched_words)
        if result.stress is not None and result.stress.fp32_tflops is not None:
            fs.add(m.ACTIVE_STRESS_FLOPS, ids, result.stress.fp32_tflops * 1e12)
        if result.stress is not None and result.stress.launches:
            _add_stress(fs, ids, figures_of(result.stress))
        if result.stress is not None and result.stress.verification is not None:
            _add_verification(fs, ids, result.stress.verification)
        if result.hbm is not None and result.hbm.gb_per_second is not None:
            fs.add(m.ACTIVE_HBM_BANDWIDTH, ids, result.hbm.gb_per_second * _GB)
    for peer in active.peers:
        source = devices.get(peer.src)
        if source is not None and peer.copy.gb_per_second is not None:
            fs.add(m.ACTIVE_P2P_BANDWIDTH, gpu_labels(source) + (str(peer.dst),), peer.copy.gb_per_second * _GB)


def _add_stress(fs: FamilySet, ids: tuple, figures: StressFigures) -> None:
    """The figures active.stress judges (checks/active/stress_figures.py); one not measured has no series."""
    if figures.tflops is not None and figures.precision:
        fs.add(m.ACTIVE_STRESS_THROUGHPUT, ids + (figures.precision,), figures.tflops * 1e12)
    fs.add(m.ACTIVE_STRESS_POWER, ids, figures.mean_power_watts)
    fs.add(m.ACTIVE_STRESS_POWER_LIMIT, ids, figures.power_limit_watts)
    for stat, mhz in (("min", figures.sm_clock_min_mhz), ("median", figures.sm_clock_median_mhz)):
        if mhz is not None:
            fs.add(m.ACTIVE_STRESS_CLOCK, ids + (stat,), mhz * 1e6)
    fs.add(m.ACTIVE_STRESS_TEMPERATURE, ids, figures.max_temperature_celsius)
    for reason in figures.throttle_reasons:
        fs.add(m.ACTIVE_STRESS_THROTTLE, ids + (reason,), 1)


def _add_verification(fs: FamilySet, ids: tuple, check: ComputeVerification) -> None:
    """What active.compute judges (gpudiag/active/stress_verify.py); nothing verified, no series."""
    if not check.launches_verified:
        return
    fs.add(m.ACTIVE_STRESS_VERIFIED, ids, check.launches_verified)
    fs.add(m.ACTIVE_STRESS_MISMATCHES, ids + ("tensor",), check.mismatched_blocks)
    fs.add(m.ACTIVE_STRESS_MISMATCHES, ids + ("stream",), check.stream_mismatches)
    for sm in check.mismatched_sms:
        fs.add(m.ACTIVE_STRESS_MISMATCH_SM, ids + (sm.location,), sm.launches)


def add_collector_runs(fs: FamilySet, runs: Iterable[CollectorRun]) -> None:
    latest = {run.name: run for run in runs}  # one series per collector, even if a part ran twice
    for name, run in latest.items():
        fs.add(m.COLLECTOR_SUCCESS, (name,), int(run.success))
        fs.add(m.COLLECTOR_DURATION, (name,), run.duration_seconds)


def add_checks(fs: FamilySet, results: Iterable[CheckResult]) -> None:
    """One series per (check, what it is about): a check that reports several findings on one GPU (one per link,
    say) shows the worst of them, since Prometheus rejects duplicate series. gpudiag_check_ok is keyed by (check,
    gpu) alone; gpudiag_check_status is the state set of the worst status per (check, GPU) and per GPU on the PCI bus
    that no library lists (its bus ID, gpu=""), one series per status; a NIC's results are the node's there (its bus
    ID is no GPU's) and, named, in gpudiag_nic_check_status, so that an alert names the NIC and port (issue 36
    item 2)."""
    worst: dict[tuple[str, str], CheckResult] = {}
    by_subject: dict[tuple[str, ...], CheckResult] = {}
    by_nic: dict[tuple[str, ...], CheckResult] = {}
    for result in results:
        _keep_worst(worst, (result.check, "" if result.device is None else str(result.device.index)), result)
        about = subject(result)
        device = result.device
        if device is not None:
            ids = (str(device.index), device.uuid or "", device.pci_bus_id or "")
        elif about is not None and not about.is_nic:
            ids = ("", "", about.bus or "")
        else:
            ids = ("", "", "")
        _keep_worst(by_subject, (result.check,) + ids, result)
        if about is not None and about.is_nic:
            port = "" if about.port is None else str(about.port)
            _keep_worst(by_nic, (result.check, about.nic or "", about.bus or "", port), result)
    for key, result in worst.items():
        fs.add(m.CHECK_OK, key, int(result.status in _OK_STATUSES))
    for spec, kept in ((m.CHECK_STATUS, by_subject), (m.NIC_CHECK_STATUS, by_nic)):
        for ids, result in kept.items():
            for status in Status:
                fs.add(spec, ids + (status.value,), int(status == result.status))


def _keep_worst(kept: dict, key: tuple, result: CheckResult) -> None:
    previous = kept.get(key)
    if previous is None or STATUS_SEVERITY[result.status] > STATUS_SEVERITY[previous.status]:
        kept[key] = result


def _add_pci_functions(fs: FamilySet, snapshot: NodeSnapshot) -> None:
    """AER counters for every GPU function on the bus, and `device_up 0` for a GPU that is on the bus but that no
    vendor library enumerates (driver not loaded, or the device dropped out of the library's list)."""
    by_bus_id = {d.pci_bus_id: d for d in snapshot.devices if d.pci_bus_id}
    covered = set(by_bus_id) | {d.physical_pci_bus_id for d in snapshot.devices if d.physical_pci_bus_id}
    for pci in snapshot.pci_gpus:
        device = by_bus_id.get(pci.pci_bus_id)
        ids = gpu_labels(device) if device is not None else ("", "", pci.pci_bus_id)
        if pci.pci_bus_id not in covered:
            fs.add(m.DEVICE_UP, ids, 0)
        add_aer(fs, ids, pci)


def _add_probe_errors(fs: FamilySet, snapshot: NodeSnapshot) -> None:
    counts: Counter[tuple[str, ...]] = Counter()
    for device in snapshot.devices:
        for error in device.errors:
            counts[gpu_labels(device) + (error.kind.value,)] += 1
    for error in snapshot.errors:
        counts[NO_GPU + (error.kind.value,)] += 1
    for labels, count in counts.items():
        fs.add(m.PROBE_ERRORS, labels, count)
