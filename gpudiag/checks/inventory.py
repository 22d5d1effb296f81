"""inventory.*: are all the GPUs there: the PCI bus against the vendor libraries, and against the expected count."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from gpudiag.checks import amd_platform
from gpudiag.checks.common import (
    VENDOR_NAMES,
    Check,
    for_each_device,
    failed,
    kernel_log_command,
    not_available,
    passed,
    physical_devices,
    skipped,
    unknown,
    unreachable,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, PciGpu, Status, Vendor

_LIST_COMMAND = {Vendor.NVIDIA: "nvidia-smi -L", Vendor.AMD: "amd-smi list"}
GPUS_VISIBLE = "inventory.gpus_visible"
GPU_COUNT = "inventory.gpu_count"
GPU_MODEL = "inventory.gpu_model"
PARTITION_MODE = "inventory.partition_mode"


def _missing_gpu(pci: PciGpu) -> CheckResult:
    return failed(
        GPUS_VISIBLE, None,
        f"GPU at {pci.pci_bus_id} is on the PCI bus but its vendor library does not enumerate it (it failed to "
        f"initialise or fell off the bus)",
        observed={"pci_bus_id": pci.pci_bus_id, "driver": pci.driver, "device_id": pci.device_id},
        expected="every GPU on the PCI bus is enumerated by its vendor library",
        remediation=(f"Confirm with `{_LIST_COMMAND[pci.vendor]}` and `{kernel_log_command(pci.vendor)}` (NVIDIA "
                     f"Xid 79 or RmInitAdapter failures; amdgpu init failures). Try a GPU reset or a cold power cycle; "
                     f"if it stays missing, reseat the GPU and its riser/cable and check the slot's power. A GPU that "
                     f"keeps disappearing is an RMA candidate."),
    )


def _unenumerated(snapshot: NodeSnapshot, pci: PciGpu) -> CheckResult:
    if any(b.available for b in snapshot.backends if b.vendor == pci.vendor):
        return _missing_gpu(pci)
    return unknown(GPUS_VISIBLE, None, f"GPU at {pci.pci_bus_id}: no {VENDOR_NAMES[pci.vendor]} library is "
                                       f"available to enumerate it",
                   observed={"pci_bus_id": pci.pci_bus_id}, expected="a vendor library enumerates it",
                   remediation=f"Fix the driver first (driver.library), then confirm with "
                               f"`{_LIST_COMMAND[pci.vendor]}`.")


def _enumerated(device: DeviceSnapshot, on_bus: set[str]) -> CheckResult:
    if not device.reachable:
        # For this check the lost GPU is the finding itself, not a reason to give up on judging it.
        lost = unreachable(GPUS_VISIBLE, device)
        return failed(GPUS_VISIBLE, device, f"{device.label} is enumerated but no longer answers its driver",
                      observed=lost.observed, expected="every enumerated GPU answers", remediation=lost.remediation)
    listed = device.pci_bus_id in on_bus
    where = "is on the PCI bus and enumerated" if listed else "is enumerated (the PCI scan did not list it)"
    return passed(GPUS_VISIBLE, device, f"{device.label} {where} by {device.source}",
                  observed={"enumerated": True, "on_pci_bus": listed})


def gpus_visible(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    devices = physical_devices(snapshot)
    if not snapshot.pci_gpus and not devices:
        return [skipped(GPUS_VISIBLE, None, "no GPU on the PCI bus or in any vendor library")]
    if not snapshot.pci_gpus:
        return [unknown(GPUS_VISIBLE, None, f"the PCI scan found no GPU while the vendor libraries enumerate "
                                            f"{len(devices)}: cannot cross-check",
                        observed={"pci_bus": 0, "libraries": len(devices)}, expected="the PCI scan sees every GPU",
                        remediation="Check that /sys/bus/pci is readable (or the --root tree is complete) and re-run.")]
    enumerated = {d.pci_bus_id for d in snapshot.devices} | {d.physical_pci_bus_id for d in snapshot.devices}
    on_bus = {p.pci_bus_id for p in snapshot.pci_gpus}
    return ([_unenumerated(snapshot, pci) for pci in snapshot.pci_gpus if pci.pci_bus_id not in enumerated]
            + [_enumerated(device, on_bus) for device in devices])


def gpu_count(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    expected = expect.expected_gpu_count
    if expected is None:
        return [skipped(GPU_COUNT, None, "no expected GPU count configured (expected_gpu_count)")]
    counts = {"pci_bus": len(snapshot.pci_gpus),
              "enumerated": sum(1 for d in physical_devices(snapshot) if d.reachable)}
    if min(counts.values()) >= expected:
        return [passed(GPU_COUNT, None, f"{expected} GPU(s) present as expected", observed=counts, expected=expected)]
    return [failed(GPU_COUNT, None, f"expected {expected} GPU(s); {counts['pci_bus']} on the PCI bus, "
                                    f"{counts['enumerated']} answering their driver",
                   observed=counts, expected=expected,
                   remediation=("Fewer GPUs on the PCI bus than expected means a GPU, riser, cable or baseboard is "
                                "not detected at all: check the BMC's hardware inventory and event log, reseat, and "
                                "confirm with `lspci -d 10de:` (NVIDIA) / `lspci -d 1002:` (AMD). If only the driver's "
                                "count is short, inventory.gpus_visible names the GPU that failed."))]


def model_matches(name: str, wanted: str) -> bool:
    """Case-insensitive; `wanted` may carry shell wildcards ("AMD Instinct MI300X*")."""
    return fnmatchcase(name.strip().lower(), wanted.strip().lower())


def _model(device: DeviceSnapshot, wanted: str) -> CheckResult:
    if device.name is None:
        return not_available(GPU_MODEL, device, "GPU model name", ("name", "asic", "board"))
    observed = {"model": device.name, "board_part_number": device.board_part_number}
    if model_matches(device.name, wanted):
        return passed(GPU_MODEL, device, f"{device.label} is a {device.name}", observed=observed, expected=wanted)
    return failed(GPU_MODEL, device, f"{device.label} is a {device.name}, not the expected {wanted}",
                  observed=observed, expected=wanted,
                  remediation=(f"This node does not carry the GPUs its profile describes: check that the right "
                               f"profile is applied to it, and the purchase order / asset record against "
                               f"`{_LIST_COMMAND[device.vendor]}`. A single odd GPU is a wrong replacement part."))


def _partition_expectations(device: DeviceSnapshot, expect: Expectations) -> dict[str, tuple[Any, Any]]:
    """Setting → (expected, observed) for the partition settings that apply to this GPU's vendor."""
    if device.vendor == Vendor.NVIDIA:
        wanted = {"mig_enabled": (expect.expected_mig_enabled, device.mig_enabled)}
    else:
        wanted = {"compute_partition": (expect.expected_compute_partition, device.compute_partition),
                  "memory_partition": (expect.expected_memory_partition, device.memory_partition)}
    return {name: pair for name, pair in wanted.items() if pair[0] is not None}


def _partition_fix(device: DeviceSnapshot, expected: dict[str, Any]) -> str:
    if device.vendor == Vendor.NVIDIA:
        mode = 1 if expected.get("mig_enabled") else 0
        return (f"Set it with `nvidia-smi -i {device.index} -mig {mode}` and reset the GPU (`nvidia-smi -r -i "
                f"{device.index}`) with no process on it; confirm with `nvidia-smi -q -i {device.index} | grep -A2 "
                f"'MIG Mode'`.")
    commands = [f"`amd-smi set -g {device.index} --{name.replace('_', '-')} {value}`"
                for name, value in expected.items()]
    return (f"Set it with {' and '.join(commands)} with no process on the GPU (a memory-partition change reloads "
            f"the driver); make it persistent the way the site does (amdgpu module options or a boot-time unit). "
            f"Confirm with `amd-smi partition -g {device.index}`.")


def gpu_model(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    wanted = expect.expected_gpu_model
    if wanted is None:
        return [skipped(GPU_MODEL, None, "no expected GPU model configured (expected_gpu_model)")]
    return for_each_device(snapshot, GPU_MODEL, lambda device: _model(device, wanted))


def _partition(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    settings = _partition_expectations(device, expect)
    if not settings:
        return skipped(PARTITION_MODE, device, f"no partition mode configured for {VENDOR_NAMES[device.vendor]} "
                                               f"GPUs")
    expected = {name: wanted for name, (wanted, _) in settings.items()}
    observed = {name: seen for name, (_, seen) in settings.items()}
    if all(seen is None for seen in observed.values()):
        return not_available(PARTITION_MODE, device, "partition mode", ("partition", "mig"))
    wrong = {name: seen for name, seen in observed.items() if seen != expected[name]}
    if not wrong:
        listing = ", ".join(f"{name} {value}" for name, value in observed.items())
        return passed(PARTITION_MODE, device, f"{device.label}: {listing}", observed=observed, expected=expected)
    listing = "; ".join(f"{name} {seen}, expected {expected[name]}" for name, seen in wrong.items())
    return failed(PARTITION_MODE, device, f"{device.label}: {listing}", observed=observed, expected=expected,
                  remediation=(f"A GPU in another partition mode than its siblings exposes a different number or size "
                               f"of GPUs to the scheduler. {_partition_fix(device, expected)}"))


def partition_mode(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    wanted = (expect.expected_compute_partition, expect.expected_memory_partition, expect.expected_mig_enabled)
    if all(setting is None for setting in wanted):
        return [skipped(PARTITION_MODE, None, "no partition mode configured (expected_compute_partition, "
                                              "expected_memory_partition, expected_mig_enabled)")]
    return for_each_device(snapshot, PARTITION_MODE, lambda device: _partition(device, expect))


CHECKS = (
    Check(GPUS_VISIBLE, gpus_visible, "every GPU on the PCI bus is enumerated and answering its library"),
    Check(GPU_COUNT, gpu_count, "the node has the expected number of GPUs"),
    Check(GPU_MODEL, gpu_model, "each GPU is the profile's model"),
    Check(PARTITION_MODE, partition_mode,
          "each GPU runs the profile's partition mode (AMD compute/memory, NVIDIA MIG)"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "inventory.gpus_visible": {F: ("reboot", "GPUDIAG-INVENTORY-GPU-MISSING")},
    "inventory.gpu_count": {F: ("drain", "GPUDIAG-INVENTORY-GPU-COUNT")},
    "inventory.gpu_model": {F: ("drain", "GPUDIAG-INVENTORY-MODEL-MISMATCH")},
    "inventory.partition_mode": {F: ("drain", "GPUDIAG-INVENTORY-PARTITION-MISMATCH")},
    # A partition held by another driver comes back when the holder is gone and amdgpu reloads.
    "inventory.partitions": {F: ("reboot", "GPUDIAG-INVENTORY-PARTITION-MISSING")},
}
_REFERENCE = {
    "inventory.gpus_visible": (
        "the GPUs on the PCI bus against those the vendor library enumerates and that answer it",
        "Confirm with nvidia-smi / amd-smi and the kernel log. A GPU lost off the bus (Xid 79): drain the node and "
        "power-cycle it (cold boot; a GPU reset cannot reach it). One that hung: reset it, power-cycle if that fails. "
        "Reseat it; one that drops again is an RMA candidate."),
    "inventory.gpu_count": (
        "the number of GPUs on the PCI bus and enumerated",
        "Fewer GPUs than the node should have: a GPU, riser, cable or baseboard is missing or dead; check `lspci`, "
        "the BMC's inventory and the kernel log, then reseat or replace."),
    "inventory.gpu_model": (
        "each GPU's model name",
        "The node carries other GPUs than its profile describes: check the profile and the node's build."),
    "inventory.partition_mode": (
        "AMD compute and memory partition modes, NVIDIA MIG mode",
        "Set the profile's partition mode (`amd-smi set --compute-partition/--memory-partition`, `nvidia-smi -mig`) "
        "and reset or reload as the vendor requires."),
    "inventory.partitions": (
        "the partitions (DRM nodes) a partitioned AMD GPU shows against what its compute mode implies",
        "A partition held by another driver or process is missing: stop the holder and reload amdgpu, or reboot."),
}
_SETTINGS = {
    "inventory.gpu_count": ("expected_gpu_count",),
    "inventory.gpu_model": ("expected_gpu_model",),
    "inventory.partition_mode": ("expected_compute_partition", "expected_memory_partition", "expected_mig_enabled"),
}
FAMILY = Family(
    "inventory", order=20, checks=CHECKS + amd_platform.INVENTORY_CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
