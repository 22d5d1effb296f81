"""topology.fabric: on NVSwitch systems (HGX/DGX H100, H200, B200), each GPU's fabric is set up and healthy.

Until nvidia-fabricmanager has programmed the NVSwitches and registered a GPU in the fabric, CUDA refuses the GPU
with error 802 (cudaErrorSystemNotReady) while NVML, the NVLinks and `nvidia-smi` look healthy. The driver reports
the GPU's fabric state (nvmlDeviceGetGpuFabricInfoV: not started / in progress / completed), the outcome of the
set-up (an NVML return code) and, on newer drivers, a health summary and mask. GPUs outside an NVSwitch fabric (PCIe
cards, a VM or slice without NVSwitch) report NOT_SUPPORTED and are skipped.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Optional

from gpudiag.checks.common import (
    Check,
    driver_health_missing,
    failed,
    for_each_device,
    passed,
    skipped,
    unknown,
    warned,
)
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, FabricInfo, NodeSnapshot, Vendor

FABRIC = "topology.fabric"
_TOPICS = ("fabric",)
_SETTING_UP = ("not_started", "in_progress")
# Health-mask fields whose value means the fabric is not fully usable (NVML_GPU_FABRIC_HEALTH_MASK_*). Partition
# assignment and the global fabric manager's connection are shown in `observed` but not judged: a GPU outside any
# partition is normal on a shared-NVSwitch system.
_BAD_HEALTH = {"degraded_bandwidth": "true", "route_recovery": "true", "route_unhealthy": "true",
               "access_timeout_recovery": "true"}
_BAD_SUMMARIES = ("unhealthy", "limited_capacity")


def _confirm(device: DeviceSnapshot) -> str:
    return f"`nvidia-smi -q -i {device.index} | grep -A8 Fabric` (State: Completed, Status: Success)"


def _remediation(device: DeviceSnapshot) -> str:
    return (f"CUDA refuses this GPU (error 802, 'system not yet initialized') until the fabric is up. Check the "
            f"fabric manager: `systemctl status nvidia-fabricmanager` and its log /var/log/fabricmanager.log; its "
            f"version must match the driver's exactly (`nv-fabricmanager --version` against `nvidia-smi`'s Driver "
            f"Version; a driver upgrade without the matching fabric-manager package is the usual cause). Start or "
            f"restart it (`systemctl restart nvidia-fabricmanager`); if it reports NVSwitch or NVLink training "
            f"errors, reset the GPUs or reboot the node. Confirm with {_confirm(device)}.")


def uptime_seconds(snapshot: NodeSnapshot) -> Optional[float]:
    """Seconds from boot to the snapshot, where both are known."""
    if snapshot.host.boot_time is None or not snapshot.collected_at:
        return None
    try:
        collected = datetime.fromisoformat(snapshot.collected_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return max(0.0, collected - snapshot.host.boot_time)


def _not_set_up(device: DeviceSnapshot, fabric: FabricInfo, observed: dict, uptime: Optional[float],
                grace: float) -> CheckResult:
    what = ("the fabric manager has not started setting up its NVSwitch fabric" if fabric.state == "not_started"
            else "its NVSwitch fabric is still being set up")
    expected = f"fabric state completed within {grace:.0f} s of boot"
    if uptime is not None and uptime < grace:
        # Evidence that the node has just booted: the fabric manager may simply not be done yet.
        return with_verdict(warned(
            FABRIC, device, f"{device.label}: {what}, {uptime:.0f} s after boot (allowed {grace:.0f} s)",
            observed=observed, expected=expected,
            remediation=f"Wait for the fabric manager and re-check; if it does not complete, "
                        f"{_remediation(device)}"), "watch", "GPUDIAG-FABRIC-SETTING-UP")
    since = f" {uptime:.0f} s after boot" if uptime is not None else " (time since boot unknown)"
    code = "GPUDIAG-FABRIC-NOT-STARTED" if fabric.state == "not_started" else "GPUDIAG-FABRIC-NOT-COMPLETED"
    return with_verdict(failed(FABRIC, device, f"{device.label}: {what}{since}", observed=observed,
                               expected=expected, remediation=_remediation(device)), "drain", code)


def _judge(device: DeviceSnapshot, snapshot: NodeSnapshot, expect: Expectations) -> CheckResult:
    missing = driver_health_missing(FABRIC, device, "fabric", "NVSwitch fabric state", _TOPICS)
    if missing is not None:
        return missing
    fabric = device.driver_health.fabric
    if fabric.state == "not_supported":
        return skipped(FABRIC, device, f"{device.label} is not part of an NVSwitch fabric (a PCIe card, or a VM or "
                                       f"slice without NVSwitch): nothing for a fabric manager to set up")
    uptime = uptime_seconds(snapshot)
    # What the driver reported (fields it left empty are omitted, so that the checklist shows what matters).
    observed = {"state": fabric.state, "seconds_since_boot": None if uptime is None else round(uptime),
                **{k: v for k, v in dataclasses.asdict(fabric).items() if k != "state" and v not in (None, {})}}
    expected = "fabric state completed, status success, health not degraded"
    if fabric.state in _SETTING_UP:
        return _not_set_up(device, fabric, observed, uptime, expect.fabric_setup_grace_seconds)
    if fabric.state != "completed":
        return unknown(FABRIC, device, f"{device.label}: the driver reports a fabric state gpudiag does not know "
                                       f"({fabric.state})",
                       observed=observed, expected=expected,
                       remediation=f"Read the state directly with {_confirm(device)} and update gpudiag.")
    if fabric.status != "success":
        return with_verdict(failed(
            FABRIC, device, f"{device.label}: the fabric set-up completed with an error ({fabric.status})",
            observed=observed, expected=expected, remediation=_remediation(device)),
            "drain", "GPUDIAG-FABRIC-SETUP-FAILED")
    bad = {name: value for name, value in fabric.health.items() if _BAD_HEALTH.get(name) == value}
    if fabric.health.get("incorrect_configuration", "none") != "none":
        bad["incorrect_configuration"] = fabric.health["incorrect_configuration"]
    if fabric.health_summary in _BAD_SUMMARIES or bad:
        summary = [f"health summary {fabric.health_summary}"] if fabric.health_summary in _BAD_SUMMARIES else []
        findings = summary + [f"{name.replace('_', ' ')}: {value}" for name, value in bad.items()]
        return with_verdict(failed(
            FABRIC, device, f"{device.label}: its NVSwitch fabric is set up but not healthy ({'; '.join(findings)})",
            observed=observed, expected=expected,
            remediation=(f"Jobs on this GPU get less NVLink bandwidth or stall on fabric timeouts. Check the NVLinks "
                         f"(`nvidia-smi nvlink -s -i {device.index}`), /var/log/fabricmanager.log and the kernel log "
                         f"for NVSwitch/NVLink Xids; an incorrect configuration means the fabric manager's topology "
                         f"does not match this board (wrong FM package, firmware, or a GPU in the wrong place). Reset "
                         f"the GPUs or reboot the node; a fabric that stays degraded is an RMA case for the baseboard. "
                         f"Confirm with {_confirm(device)}.")), "drain", "GPUDIAG-FABRIC-UNHEALTHY")
    return passed(FABRIC, device, f"{device.label}: NVSwitch fabric set up (clique {fabric.clique_id})",
                  observed=observed, expected=expected)


def fabric_check(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_device(snapshot, FABRIC, lambda device: _judge(device, snapshot, expect), Vendor.NVIDIA)


CHECKS = (
    Check(FABRIC, fabric_check, "each GPU's NVSwitch fabric is set up by the fabric manager and healthy (NVIDIA HGX)"),
)
