"""Checks of what only AMD Instinct nodes report: the gpu_metrics table version and the partitions a partition mode
implies (the PCIe link's recovery and NAK counters are pcie.link_recovery, in pcie.py).

- driver.gpu_metrics_version: amdsmi decodes gpu_metrics tables up to the version it was built for (7.0.2: v1.8).
  A newer driver (v1.9 on 2026 kernels) publishes a table it cannot read, and the values in it (power, PCIe and
  XGMI metrics, violation accumulators) vanish, so the checks on them skip. Skipping is right for a value a part
  does not have; for a library too old for its driver it hides checks that should run, so it warns.
- inventory.partitions: in CPX mode an MI300X, MI325X or MI355X shows 8 logical GPUs. Fewer means a partition was
  not enumerated (the known 63-of-64 case: another driver holds one of the partition's DRM nodes).
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import (
    Check,
    device_check,
    failed,
    for_each_device,
    not_available,
    passed,
    skipped,
    warned,
)
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, Vendor

METRICS_VERSION = "driver.gpu_metrics_version"
PARTITIONS = "inventory.partitions"

METRICS_SOURCE = "amdsmi.amdsmi_get_gpu_metrics_info"
# Logical GPUs per physical GPU in each compute partition mode. CPX is one per XCD: 8 on MI300X / MI325X / MI355X
# (AMD "GPU partitioning" docs); MI300A has 6 XCDs and is not judged here.
_PARTITIONS_PER_MODE = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}


# ---------------------------------------------------------------------------------------------------------------
# driver.gpu_metrics_version


def _missing_metrics(device: DeviceSnapshot) -> list[str]:
    """The gpu_metrics-derived values this device did not report."""
    missing = {"power draw": device.power.draw_watts is None, "XGMI link status": not device.links,
               "PCIe counters": device.pcie.replay_count is None,
               "throttle/violation status": device.clocks.throttle_reasons is None}
    return [name for name, absent in missing.items() if absent]


def _metrics_version(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    if device.metrics_version is None:
        return not_available(METRICS_VERSION, device, "gpu_metrics table version", ("metrics",))
    version = f"gpu_metrics v{device.metrics_version}"
    skew = device.unsupported.get(METRICS_SOURCE)
    if skew is None:
        return passed(METRICS_VERSION, device, f"{device.label}: {version}, decoded by amdsmi",
                      observed={"metrics_version": device.metrics_version}, expected="a table amdsmi decodes")
    missing = _missing_metrics(device)
    return warned(METRICS_VERSION, device,
                  f"{device.label}: {version} is newer than amdsmi decodes; checks on "
                  f"{', '.join(missing) or 'its values'} skip",
                  observed={"metrics_version": device.metrics_version, "missing": missing},
                  expected="a gpu_metrics table the installed amdsmi decodes",
                  remediation=(f"{skew}. Install the amd-smi-lib (ROCm) release that matches the amdgpu driver, "
                               f"then re-run; confirm with `amd-smi metric -g {device.index}` (N/A values) and "
                               f"`amd-smi version`."))


# ---------------------------------------------------------------------------------------------------------------
# inventory.partitions


def _expected_partitions(device: DeviceSnapshot) -> Optional[int]:
    if device.compute_partition is None:
        return None
    return _PARTITIONS_PER_MODE.get(device.compute_partition.upper())


def partitions(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    groups: dict[str, list[DeviceSnapshot]] = {}
    for device in snapshot.devices:
        if device.physical_pci_bus_id is not None:
            groups.setdefault(device.physical_pci_bus_id, []).append(device)

    def judge(device: DeviceSnapshot) -> CheckResult:
        if device.physical_pci_bus_id is None:  # the sysfs fallback does not enumerate partitions
            return skipped(PARTITIONS, device, f"{device.label}: partitions are enumerated only through amdsmi")
        if "MI300A" in (device.name or ""):  # it reports its mode; only the count per mode is not known here
            return skipped(PARTITIONS, device, f"{device.label}: an MI300A's partition count is not judged (6 XCDs, "
                                               f"not the 8 of MI300X / MI325X / MI355X)")
        wanted = _expected_partitions(device)
        if wanted is None:
            return not_available(PARTITIONS, device, "compute partition mode", ("partition",))
        seen = sorted(d.partition_id or 0 for d in groups[device.physical_pci_bus_id])
        observed = {"mode": device.compute_partition, "partitions": len(seen), "partition_ids": seen}
        expected = f"{wanted} partition(s) in {device.compute_partition}"
        if len(seen) < wanted:
            absent = sorted(set(range(wanted)) - set(seen))
            return failed(PARTITIONS, device,
                          f"{device.label}: {len(seen)} of {wanted} {device.compute_partition} partitions enumerated; "
                          f"missing: {', '.join(map(str, absent))}",
                          observed=observed, expected=expected,
                          remediation=(f"A partition whose DRM node another driver or process holds is not "
                                       f"enumerated, and the scheduler sees fewer GPUs. Find the holder "
                                       f"(`lsof /dev/dri/card* /dev/dri/renderD*`, `ls -l /sys/class/drm/`), stop it, "
                                       f"and reload amdgpu or reboot; confirm with `amd-smi list` and "
                                       f"`amd-smi partition -g {device.index}`."))
        return passed(PARTITIONS, device, f"{device.label}: {len(seen)} {device.compute_partition} partition(s)",
                      observed=observed, expected=expected)

    return for_each_device(snapshot, PARTITIONS, judge, vendor=Vendor.AMD)



DRIVER_CHECKS = (
    device_check(METRICS_VERSION, "the installed amdsmi decodes the driver's gpu_metrics table (AMD)",
                 _metrics_version, vendor=Vendor.AMD),
)
INVENTORY_CHECKS = (
    Check(PARTITIONS, partitions, "each partitioned GPU shows every partition its mode implies (AMD)"),
)
