"""What automation does with a result: a stable `action` and `fault_code` on every CheckResult.

Actions, weakest first (a node's action is its results' strongest):
- none:   nothing to do (pass, skip).
- watch:  keep the GPU in service; alert, and look when convenient (warnings, values that could not be read).
- drain:  stop scheduling onto the GPU/node until a person fixes the cause (configuration, cabling, firmware).
- reset:  drain, then reset the GPU (nvidia-smi -r / amd-smi reset); a pending repair or a hung GPU.
- reboot: drain, then reboot or power-cycle the node; a GPU off the bus, a driver that must reload.
- rma:    drain and replace the hardware; the vendor's RMA criteria are met.

Most checks mean one thing per status, so one table maps (check ID, status) to both. A check whose results of one
status call for different actions sets them itself (`with_verdict`, e.g. kernel-log findings by Xid); `assign`
leaves those alone. A check or status the table does not list gets the status's default and a code derived from
its ID, so that every non-pass result carries both.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.model import CheckResult, Status

ACTIONS = ("none", "watch", "drain", "reset", "reboot", "rma")
ACTION_RANK = {action: rank for rank, action in enumerate(ACTIONS)}

# For a status the table does not list (pass and skip need nothing: `assign` sets "none" before looking here).
_DEFAULT_ACTION = {Status.WARN: "watch", Status.UNKNOWN: "watch", Status.FAIL: "drain"}

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

# check ID → {status: (action, fault code)}. Fault codes are part of the JSON contract: never rename one.
TABLE: dict[str, dict[Status, tuple[str, str]]] = {
    "driver.module_loaded": {F: ("drain", "GPUDIAG-DRIVER-MODULE-NOT-LOADED")},
    "driver.device_bound": {F: ("drain", "GPUDIAG-DRIVER-DEVICE-UNBOUND"), W: ("watch", "GPUDIAG-DRIVER-DEVICE-VFIO")},
    "driver.library": {F: ("drain", "GPUDIAG-DRIVER-LIBRARY-FAILED"), W: ("watch", "GPUDIAG-DRIVER-LIBRARY-FALLBACK")},
    # Module and library of different versions: an upgrade without a reboot; the reboot is the fix.
    "driver.version_consistent": {F: ("reboot", "GPUDIAG-DRIVER-VERSION-MISMATCH")},
    "driver.version": {F: ("drain", "GPUDIAG-DRIVER-VERSION-UNEXPECTED")},
    "driver.gpu_metrics_version": {W: ("watch", "GPUDIAG-DRIVER-METRICS-VERSION-SKEW")},
    "inventory.gpus_visible": {F: ("reboot", "GPUDIAG-INVENTORY-GPU-MISSING")},
    # A partition held by another driver comes back when the holder is gone and amdgpu reloads.
    "inventory.partitions": {F: ("reboot", "GPUDIAG-INVENTORY-PARTITION-MISSING")},
    "inventory.gpu_count": {F: ("drain", "GPUDIAG-INVENTORY-GPU-COUNT")},
    "inventory.gpu_model": {F: ("drain", "GPUDIAG-INVENTORY-MODEL-MISMATCH")},
    "inventory.partition_mode": {F: ("drain", "GPUDIAG-INVENTORY-PARTITION-MISMATCH")},
    "pcie.link_generation": {F: ("drain", "GPUDIAG-PCIE-DOWNTRAINED"), W: ("watch", "GPUDIAG-PCIE-DOWNTRAINED")},
    "pcie.link_width": {F: ("drain", "GPUDIAG-PCIE-WIDTH-DEGRADED")},
    "pcie.replay_errors": {W: ("watch", "GPUDIAG-PCIE-REPLAYS")},
    "pcie.link_recovery": {F: ("drain", "GPUDIAG-PCIE-LINK-RECOVERY"), W: ("watch", "GPUDIAG-PCIE-LINK-RECOVERY")},
    "pcie.aer": {F: ("drain", "GPUDIAG-PCIE-AER-UNCORRECTABLE"), W: ("watch", "GPUDIAG-PCIE-AER-CORRECTABLE")},
    "ecc.mode": {F: ("reset", "GPUDIAG-ECC-MODE"), W: ("reset", "GPUDIAG-ECC-MODE-PENDING")},
    "ecc.uncorrected": {F: ("reset", "GPUDIAG-ECC-UNCORRECTED"), W: ("watch", "GPUDIAG-ECC-UNCORRECTED-LIFETIME")},
    "ecc.sram": {F: ("rma", "GPUDIAG-ECC-SRAM-UNCORRECTED")},
    "ecc.deferred": {W: ("reset", "GPUDIAG-ECC-DEFERRED")},
    "memory.row_remap_pending": {F: ("reset", "GPUDIAG-MEMORY-REMAP-PENDING")},
    "memory.row_remap_failure": {F: ("rma", "GPUDIAG-MEMORY-REMAP-FAILURE"),
                                 W: ("watch", "GPUDIAG-MEMORY-REMAP-EXHAUSTED")},
    "memory.unrepairable": {F: ("rma", "GPUDIAG-MEMORY-UNREPAIRABLE")},
    "memory.retired_pages": {F: ("rma", "GPUDIAG-MEMORY-RETIRED-PAGES-LIMIT"),
                             W: ("watch", "GPUDIAG-MEMORY-RETIRED-PAGES")},
    "memory.bad_pages": {F: ("rma", "GPUDIAG-MEMORY-BAD-PAGES-LIMIT"), W: ("watch", "GPUDIAG-MEMORY-BAD-PAGES")},
    "thermal.temperature": {F: ("drain", "GPUDIAG-THERMAL-LIMIT"), W: ("watch", "GPUDIAG-THERMAL-MARGIN")},
    "thermal.throttle": {F: ("drain", "GPUDIAG-THERMAL-HW-SLOWDOWN"), W: ("watch", "GPUDIAG-THERMAL-SW-SLOWDOWN")},
    "power.brake": {F: ("drain", "GPUDIAG-POWER-BRAKE")},
    "power.limit": {F: ("drain", "GPUDIAG-POWER-LIMIT-UNEXPECTED"), W: ("watch", "GPUDIAG-POWER-LIMIT-CAPPED")},
    "power.draw": {W: ("watch", "GPUDIAG-POWER-OVER-LIMIT")},
    "topology.links_up": {F: ("reset", "GPUDIAG-FABRIC-LINK-DOWN")},
    "topology.link_errors": {W: ("watch", "GPUDIAG-FABRIC-LINK-ERRORS")},
    "topology.p2p": {F: ("drain", "GPUDIAG-FABRIC-P2P")},
    "topology.numa": {W: ("watch", "GPUDIAG-TOPOLOGY-NO-NUMA")},
    # topology.fabric and driver.recovery_action set their verdicts per finding (checks/fabric.py, recovery.py).
    "topology.fabric": {F: ("drain", "GPUDIAG-FABRIC-NOT-READY"), W: ("watch", "GPUDIAG-FABRIC-SETTING-UP")},
    "driver.recovery_action": {F: ("drain", "GPUDIAG-DRIVER-RECOVERY-ACTION")},
    "firmware.vbios_consistent": {W: ("watch", "GPUDIAG-FIRMWARE-VBIOS-MISMATCH")},
    "firmware.versions_consistent": {W: ("watch", "GPUDIAG-FIRMWARE-MISMATCH")},
    # Per-finding verdicts come from the Xid catalog / amdgpu event table (kernel_log.py); these are the fallback.
    "kernel_log.xid": {F: ("drain", "GPUDIAG-XID"), W: ("watch", "GPUDIAG-XID"),
                       U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
    "kernel_log.sxid": {F: ("reboot", "GPUDIAG-SXID"), W: ("watch", "GPUDIAG-SXID"),
                        U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
    "kernel_log.amdgpu_errors": {F: ("drain", "GPUDIAG-AMDGPU-EVENT"), W: ("watch", "GPUDIAG-AMDGPU-EVENT"),
                                 U: ("watch", "GPUDIAG-KERNEL-LOG-UNREADABLE")},
    "host.persistence_mode": {F: ("drain", "GPUDIAG-HOST-PERSISTENCE-OFF"),
                              W: ("watch", "GPUDIAG-HOST-PERSISTENCE-OFF")},
    "host.iommu": {F: ("drain", "GPUDIAG-HOST-IOMMU-MODE"), W: ("watch", "GPUDIAG-HOST-IOMMU-TRANSLATED")},
    "host.large_bar": {F: ("drain", "GPUDIAG-HOST-SMALL-BAR"), W: ("watch", "GPUDIAG-HOST-SMALL-BAR")},
    "host.kernel_modules": {F: ("drain", "GPUDIAG-HOST-MODULE-MISSING")},
    "workload.processes": {},  # informational: always passes
    "workload.cpu_starved": {W: ("watch", "GPUDIAG-WORKLOAD-CPU-STARVED")},
    "workload.leaked_memory": {W: ("watch", "GPUDIAG-WORKLOAD-LEAKED-MEMORY")},
    "active.pcie_h2d_bandwidth": {F: ("drain", "GPUDIAG-ACTIVE-PCIE-BANDWIDTH"),
                                  W: ("watch", "GPUDIAG-ACTIVE-PCIE-BANDWIDTH")},
    "active.pcie_d2h_bandwidth": {F: ("drain", "GPUDIAG-ACTIVE-PCIE-BANDWIDTH"),
                                  W: ("watch", "GPUDIAG-ACTIVE-PCIE-BANDWIDTH")},
    "active.p2p_bandwidth": {F: ("drain", "GPUDIAG-ACTIVE-P2P-BANDWIDTH"),
                             W: ("watch", "GPUDIAG-ACTIVE-P2P-BANDWIDTH")},
    "active.hbm_bandwidth": {F: ("drain", "GPUDIAG-ACTIVE-HBM-BANDWIDTH"),
                             W: ("watch", "GPUDIAG-ACTIVE-HBM-BANDWIDTH")},
    "active.memtest": {F: ("drain", "GPUDIAG-ACTIVE-MEMTEST"), W: ("watch", "GPUDIAG-ACTIVE-MEMTEST")},
    "active.stress": {F: ("drain", "GPUDIAG-ACTIVE-STRESS"), W: ("watch", "GPUDIAG-ACTIVE-STRESS")},
    # active.compute sets its own fail verdicts (drain; rma when the same SM is wrong twice: active_compute.py).
    "active.compute": {F: ("drain", "GPUDIAG-ACTIVE-COMPUTE-MISMATCH"), W: ("watch", "GPUDIAG-ACTIVE-COMPUTE"),
                       U: ("watch", "GPUDIAG-ACTIVE-COMPUTE-UNVERIFIED")},
    "baseline.inventory": {F: ("drain", "GPUDIAG-BASELINE-INVENTORY-DRIFT")},
    "baseline.pcie": {F: ("drain", "GPUDIAG-BASELINE-PCIE-DRIFT")},
    "baseline.numa": {F: ("drain", "GPUDIAG-BASELINE-NUMA-DRIFT")},
    "baseline.fabric": {F: ("drain", "GPUDIAG-BASELINE-FABRIC-DRIFT")},
    "baseline.firmware": {F: ("drain", "GPUDIAG-BASELINE-FIRMWARE-DRIFT")},
    "baseline.driver": {F: ("drain", "GPUDIAG-BASELINE-DRIVER-DRIFT")},
    "baseline.partition": {F: ("drain", "GPUDIAG-BASELINE-PARTITION-DRIFT")},
}

# A GPU that stopped answering its library (checks.common.unreachable): reset it, whatever the check was.
UNREACHABLE = ("reset", "GPUDIAG-GPU-UNREACHABLE")
# A check that raised (a gpudiag bug, checks/__init__.py): `unknown` like a device that did not answer, but with this
# fault code, so that automation and the tests can tell the two apart.
INTERNAL_ERROR = ("watch", "GPUDIAG-INTERNAL-ERROR")


def is_internal_error(result: CheckResult) -> bool:
    """True for the result of a check that raised, as opposed to a device or call that failed."""
    return result.fault_code == INTERNAL_ERROR[1]


def derived_code(check_id: str, status: Status) -> str:
    """`ecc.uncorrected` + unknown → `GPUDIAG-ECC-UNCORRECTED-UNKNOWN`."""
    return f"GPUDIAG-{check_id.upper().replace('.', '-').replace('_', '-')}-{status.value.upper()}"


def with_verdict(result: CheckResult, action: str, fault_code: str) -> CheckResult:
    """Set a result's own verdict (a check that knows better than the table)."""
    if action not in ACTION_RANK:
        raise ValueError(f"unknown action {action!r}")
    result.action, result.fault_code = action, fault_code
    return result


def assign(result: CheckResult) -> CheckResult:
    """Fill in `action` and `fault_code` where the check did not set them."""
    if result.action is not None:
        return result
    if result.status in (Status.PASS, Status.SKIP):
        result.action, result.fault_code = "none", None
        return result
    action, code = TABLE.get(result.check, {}).get(result.status) or (
        _DEFAULT_ACTION[result.status], derived_code(result.check, result.status))
    result.action, result.fault_code = action, code
    return result


def strongest(actions: list[Optional[str]]) -> str:
    """The action that covers all of `actions` (a node with one GPU to reset and one to watch: reset)."""
    return max((a for a in actions if a is not None), key=ACTION_RANK.__getitem__, default="none")
