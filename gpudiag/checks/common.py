"""What every check shares: the `Check` record, result constructors, and the rules for a device or a value a check
cannot judge.

Those rules, because a health tool must not lie:
- an unreachable device gives `unknown` with the probe's reason, never a pass;
- a value that is None gives `unknown` when a probe error explains it, `skip` ("not supported") when none does;
- every non-pass result carries observed, expected, a message and a remediation (the constructors require them).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from gpudiag.checks.verdicts import LOST, UNREACHABLE, with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import (
    CheckResult,
    DeviceRef,
    DeviceSnapshot,
    ErrorKind,
    NodeSnapshot,
    PciGpu,
    ProbeError,
    Status,
    Vendor,
)
from gpudiag.model.records import dataclass

CheckFn = Callable[[NodeSnapshot, Expectations], list[CheckResult]]
VENDOR_NAMES = {Vendor.NVIDIA: "NVIDIA", Vendor.AMD: "AMD"}


@dataclass(frozen=True)
class Check:
    """A registered check: its ID, the function that judges, and its one-line summary."""
    id: str  # stable dotted ID: the JSON `check`, the metric label, the profile key, the --only/--skip value
    run: CheckFn
    summary: str  # one line for `--list` and the docs

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]


# ---------------------------------------------------------------------------------------------------------------
# Result constructors. `device` is the snapshot of the GPU the fact belongs to, or None for a node-level fact.


def _result(check_id: str, status: Status, device: Optional[DeviceSnapshot], message: str, observed: Any,
            expected: Any, remediation: str) -> CheckResult:
    ref = DeviceRef.of(device) if device is not None else None
    return CheckResult(check_id, status, message, ref, observed, expected, remediation)


def passed(check_id: str, device: Optional[DeviceSnapshot], message: str, *, observed: Any = None,
           expected: Any = None) -> CheckResult:
    return _result(check_id, Status.PASS, device, message, observed, expected, "")


def skipped(check_id: str, device: Optional[DeviceSnapshot], message: str) -> CheckResult:
    return _result(check_id, Status.SKIP, device, message, None, None, "")


def warned(check_id: str, device: Optional[DeviceSnapshot], message: str, *, observed: Any, expected: Any,
           remediation: str) -> CheckResult:
    return _result(check_id, Status.WARN, device, message, observed, expected, remediation)


def failed(check_id: str, device: Optional[DeviceSnapshot], message: str, *, observed: Any, expected: Any,
           remediation: str) -> CheckResult:
    return _result(check_id, Status.FAIL, device, message, observed, expected, remediation)


def unknown(check_id: str, device: Optional[DeviceSnapshot], message: str, *, observed: Any, expected: Any,
            remediation: str) -> CheckResult:
    return _result(check_id, Status.UNKNOWN, device, message, observed, expected, remediation)


def verdict(check_id: str, status: Status, device: Optional[DeviceSnapshot], message: str, *, observed: Any,
            expected: Any, remediation: str) -> CheckResult:
    """A result whose status was computed (warn or fail by severity); pass drops the remediation."""
    return _result(check_id, status, device, message, observed, expected,
                   "" if status == Status.PASS else remediation)


# ---------------------------------------------------------------------------------------------------------------
# Vendor-specific commands that remediations quote.


def reset_command(device: DeviceSnapshot) -> str:
    if device.vendor == Vendor.NVIDIA:
        return f"nvidia-smi -r -i {device.index}"
    return f"amd-smi reset --gpureset -g {device.index}"


def kernel_log_command(vendor: Vendor) -> str:
    return "dmesg -T | grep -i -e NVRM -e Xid" if vendor == Vendor.NVIDIA else "dmesg -T | grep -i amdgpu"


def query_command(device: DeviceSnapshot, nvidia_sections: str, amd_args: str) -> str:
    """The vendor CLI line that shows what a check judged, for the operator to confirm it."""
    if device.vendor == Vendor.NVIDIA:
        return f"nvidia-smi -q -i {device.index} -d {nvidia_sections}"
    return f"amd-smi {amd_args} -g {device.index}"


# ---------------------------------------------------------------------------------------------------------------
# Devices a check cannot judge


def _error_text(error: ProbeError) -> str:
    return f"{error.source}: {error.kind}: {error.message}"


# What to do for a GPU that fell off the bus, said alike by the lost GPU's results and by Xid 79's
# (checks/kernel_log/xid_catalog.py). NVIDIA's Xid catalog gives Xid 79 the immediate action RESTART_BM, a restart of
# the bare-metal node ("Analyzing Xid Errors with the Xid Catalog", docs.nvidia.com/deploy/xid-errors/
# analyzing-xid-catalog.html, as docs/vendor-api.md §11 restates it), and its GPU debug guidelines drain the node
# (docs.nvidia.com/deploy/gpu-debug-guidelines, "Xid messages"). A GPU reset is no answer: `nvidia-smi -r` goes
# through the driver, which can no longer reach the GPU (NVML answers NVML_ERROR_GPU_IS_LOST, "the GPU has fallen
# off the bus or has otherwise become inaccessible"); and a warm reboot may leave the slot's link down, hence a cold
# boot. (Before issue 36 the lost GPU's block said "reset it" and its Xid 79 line "power-cycle".)
OFF_THE_BUS = ("Drain the node and power-cycle it (cold boot, not a warm reboot: a GPU reset cannot reach a GPU off "
               "the bus, and a warm reboot may not bring it back). Then check pcie.aer, reseat the GPU and its "
               "riser/cable and check its power; a GPU that falls off again is an RMA candidate.")


def unreachable(check_id: str, device: DeviceSnapshot) -> CheckResult:
    """`unknown`: the GPU did not answer, so the check could not judge it. Lost (off the bus): OFF_THE_BUS, action
    reboot; hung (a call past its deadline) or failing otherwise: reset it first, action reset."""
    lost = any(e.kind == ErrorKind.GPU_LOST for e in device.errors)
    if device.vendor == Vendor.NVIDIA:
        confirm = (f"`nvidia-smi -q -i {device.pci_bus_id or device.index}` and `{kernel_log_command(device.vendor)}`"
                   f" (Xid 79: the GPU fell off the bus)")
    else:
        confirm = f"`amd-smi list` and `{kernel_log_command(device.vendor)}`"
    if lost:
        remediation = f"Confirm with {confirm}. {OFF_THE_BUS}"
    else:
        remediation = (f"Confirm with {confirm}. If no process holds the GPU, reset it (`{reset_command(device)}`); "
                       f"if the reset fails or the GPU is missing from `lspci`, power-cycle the node (cold boot, not a "
                       f"warm reboot) and reseat the GPU and its riser/cable. A GPU that drops off again is an RMA "
                       f"candidate.")
    return with_verdict(unknown(
        check_id, device, f"{device.label} did not answer its vendor library; this check could not be judged",
        observed={"reachable": False, "errors": [_error_text(e) for e in device.errors]},
        expected="the device answers its vendor library", remediation=remediation,
    ), *(LOST if lost else UNREACHABLE))


# Timeouts and lost devices end a device's probe early: every value read after them is missing for that reason,
# whatever call it was. Other errors explain only the values of the call that failed.
_DEVICE_WIDE_ERRORS = (ErrorKind.TIMEOUT, ErrorKind.GPU_LOST)


def errors_about(device: DeviceSnapshot, topics: Iterable[str]) -> list[ProbeError]:
    """Probe errors that may explain a missing value. Probe errors name the vendor call or file they came from
    (`nvml.nvmlDeviceGetEccMode`, `amdsmi.amdsmi_get_gpu_metrics_info`, `sysfs:/sys/…/aer_dev_fatal`; see
    docs/vendor-api.md), so a check matches them by the words its data travels under."""
    return [e for e in device.errors if e.kind in _DEVICE_WIDE_ERRORS or any(_names(e.source, t) for t in topics)]


def _names(source: str, topic: str) -> bool:
    """`topic` occurs in `source`; a topic ending in "$" must end it (a whole batch call, not one of its items)."""
    source, topic = source.lower(), topic.lower()
    return source.endswith(topic[:-1]) if topic.endswith("$") else topic in source


# NVML reads ECC, remapping, retirement and replay counters in one nvmlDeviceGetFieldValues batch: when the whole
# batch fails, its error explains all of them (a failed single field names itself, e.g. `[NVML_FI_DEV_ECC_CURRENT]`).
FIELD_BATCH = "nvml.nvmlDeviceGetFieldValues$"
# Throttle / clock-event reasons: NVML clock-event reasons, amdsmi violation status or gpu_metrics.
THROTTLE_TOPICS = ("clocksevent", "clocks_event", "throttle", "violation", "metrics")


PERMISSION_REMEDIATION = ("Run gpudiag as root, or give its user access to the device nodes (/dev/nvidia*; /dev/kfd "
                          "and /dev/dri/renderD* through the render and video groups).")


def _probe_error_remediation(errors: list[ProbeError]) -> str:
    kinds = {e.kind for e in errors}
    if ErrorKind.NO_PERMISSION in kinds:
        return PERMISSION_REMEDIATION
    if kinds & set(_DEVICE_WIDE_ERRORS):
        return ("The driver stopped answering for this GPU: check the kernel log for Xid / amdgpu reset messages "
                "and reset the GPU or reboot the node before trusting it.")
    return "Re-run with verbose logging to see the failing call, and check the kernel log for driver errors."


def not_available(check_id: str, device: DeviceSnapshot, what: str, topics: Iterable[str]) -> CheckResult:
    """`what` is None on `device`: unknown if a probe error explains it, otherwise the device does not support it."""
    errors = errors_about(device, topics)
    if errors:
        return unknown(
            check_id, device, f"{what} of {device.label} could not be read",
            observed={"errors": [_error_text(e) for e in errors]}, expected=f"{what} readable",
            remediation=_probe_error_remediation(errors),
        )
    reasons = unsupported_reasons(device, topics)
    why = f": {'; '.join(reasons)}" if reasons else ""
    return skipped(check_id, device,
                   f"{what} is not supported on {device.label} ({device.name or 'unknown model'}){why}")


def unsupported_reasons(device: DeviceSnapshot, topics: Iterable[str]) -> list[str]:
    """Why the platform does not report a value, as the probe recorded it (DeviceSnapshot.unsupported)."""
    topics = tuple(topics)
    return list(dict.fromkeys(reason for source, reason in device.unsupported.items()
                              if any(_names(source, t) for t in topics)))


def driver_health_missing(check_id: str, device: DeviceSnapshot, attribute: str, what: str,
                          topics: Iterable[str]) -> Optional[CheckResult]:
    """The result for a DeviceSnapshot.driver_health value that is absent (None when it is there): skip when nothing
    read the driver's verdicts (a snapshot recorded by an older gpudiag) or the driver lacks it, unknown when a probe
    error explains it."""
    if device.driver_health is None:
        return skipped(check_id, device, f"the driver's health verdicts of {device.label} were not read (a snapshot "
                                         f"recorded by an older gpudiag)")
    if getattr(device.driver_health, attribute) is None:
        return not_available(check_id, device, what, topics)
    return None


def physical_devices(snapshot: NodeSnapshot) -> list[DeviceSnapshot]:
    """The devices that stand for a physical GPU (an AMD partition other than the first is left out, so that CPX
    mode does not repeat a physical fact eight times)."""
    return [d for d in snapshot.devices if not d.is_logical_partition]


def for_each_device(snapshot: NodeSnapshot, check_id: str,
                    judge: Callable[[DeviceSnapshot], CheckResult],
                    vendor: Optional[Vendor] = None, partitions: bool = False) -> list[CheckResult]:
    """Run `judge` on each reachable physical device (of `vendor`, when given; every partition too with
    `partitions`, for facts that belong to a partition, like its processes); unreachable ones are unknown.
    With no device to judge, one node-level skip says so."""
    candidates = snapshot.devices if partitions else physical_devices(snapshot)
    devices = [d for d in candidates if vendor is None or d.vendor == vendor]
    if not devices:
        scope = f"{VENDOR_NAMES[vendor]} GPU" if vendor else "GPU"
        return [skipped(check_id, None, f"no {scope} enumerated by a vendor library on this node")]
    return [judge(device) if device.reachable else unreachable(check_id, device) for device in devices]


def device_check(check_id: str, summary: str, judge: Callable[[DeviceSnapshot, Expectations], CheckResult],
                 vendor: Optional[Vendor] = None, partitions: bool = False) -> Check:
    """A check made of one judgement per device (see for_each_device)."""
    return Check(check_id, lambda snapshot, expect: for_each_device(
        snapshot, check_id, lambda device: judge(device, expect), vendor, partitions), summary)


# ---------------------------------------------------------------------------------------------------------------
# GPUs as the PCI bus and the vendor libraries see them together


@dataclass
class PhysicalGpu:
    """One physical GPU: its library view, its PCI view, or both."""

    device: Optional[DeviceSnapshot]
    pci: Optional[PciGpu]

    @property
    def pci_bus_id(self) -> Optional[str]:
        return self.pci.pci_bus_id if self.pci else self.device.pci_bus_id if self.device else None

    @property
    def label(self) -> str:
        if self.device is not None:
            return self.device.label
        return f"GPU at {self.pci_bus_id} (on the PCI bus, not enumerated by a vendor library)"


def physical_gpus(snapshot: NodeSnapshot) -> list[PhysicalGpu]:
    devices = physical_devices(snapshot)
    by_bus = {d.pci_bus_id: d for d in devices}
    # A PCI function that carries a logical partition is part of its physical GPU, not a GPU of its own.
    # (Where all partitions report function .0, that function is the physical GPU's own: it stays.)
    partitions = {d.pci_bus_id for d in snapshot.devices if d.is_logical_partition} - set(by_bus)
    gpus = [PhysicalGpu(by_bus.get(p.pci_bus_id), p) for p in snapshot.pci_gpus if p.pci_bus_id not in partitions]
    on_bus = {p.pci_bus_id for p in snapshot.pci_gpus}
    gpus += [PhysicalGpu(d, None) for d in devices if d.pci_bus_id not in on_bus]
    return gpus


def for_each_gpu(snapshot: NodeSnapshot, check_id: str, judge: Callable[[PhysicalGpu], CheckResult],
                 sysfs_only: bool = False) -> list[CheckResult]:
    """Run `judge` on each physical GPU, on the PCI bus or enumerated. A GPU that does not answer its library is
    unknown, unless the judgement reads only sysfs (`sysfs_only`), which a lost GPU still answers."""
    gpus = physical_gpus(snapshot)
    if not gpus:
        return [skipped(check_id, None, "no GPU on this node")]
    return [unreachable(check_id, g.device) if not sysfs_only and g.device and not g.device.reachable else judge(g)
            for g in gpus]


def device_for_bus_id(snapshot: NodeSnapshot, pci_bus_id: Optional[str]) -> Optional[DeviceSnapshot]:
    """The physical device at a bus ID (a logical partition's bus ID leads to its physical GPU)."""
    device = next((d for d in snapshot.devices if d.pci_bus_id == pci_bus_id), None)
    if device is not None and device.is_logical_partition:
        return next((d for d in physical_devices(snapshot) if d.pci_bus_id == device.physical_pci_bus_id), device)
    return device


def vendors_present(snapshot: NodeSnapshot) -> set[Vendor]:
    """Vendors with a GPU on the PCI bus or enumerated by a library."""
    return {p.vendor for p in snapshot.pci_gpus} | {d.vendor for d in snapshot.devices}


def generation_width(generation: Optional[int], width: Optional[int]) -> str:
    """`Gen4 x16`, with `?` for what is not known."""
    return f"Gen{generation if generation is not None else '?'} x{width if width is not None else '?'}"
