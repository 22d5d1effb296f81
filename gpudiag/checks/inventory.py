"""inventory.*: are all the GPUs there: the PCI bus against the vendor libraries, and against the expected count."""

from __future__ import annotations

from gpudiag.checks.common import (
    VENDOR_NAMES,
    Check,
    failed,
    kernel_log_command,
    passed,
    physical_devices,
    skipped,
    unknown,
    unreachable,
)
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, PciGpu, Vendor

_LIST_COMMAND = {Vendor.NVIDIA: "nvidia-smi -L", Vendor.AMD: "amd-smi list"}
GPUS_VISIBLE = "inventory.gpus_visible"
GPU_COUNT = "inventory.gpu_count"


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


CHECKS = (
    Check(GPUS_VISIBLE, gpus_visible, "every GPU on the PCI bus is enumerated and answering its library"),
    Check(GPU_COUNT, gpu_count, "the node has the expected number of GPUs"),
)
