"""NVIDIA Xid codes: what each means, how bad it is for the node, and what the operator does.

Sources: the meanings follow NVIDIA's Xid catalog for Ampere and later ("Analyzing Xid Errors with the Xid
Catalog", docs.nvidia.com/deploy/xid-errors) and docs/vendor-api.md §11. `bucket` is the catalog's
"Resolution Bucket (Immediate Action)" as third parties restate the catalog spreadsheet (docs/vendor-api.md marks that
column UNVERIFIED against the spreadsheet itself). `uncertain=True` marks entries whose meaning or bucket the
sources disagree on, or that the Ampere+ catalog lists as unused (codes from older drivers).

Severity is this tool's call for node health, not NVIDIA's bucket: anything that needs a GPU reset, a reboot or
hardware work before the GPU should take jobs again fails; application-level faults (k8s-device-plugin treats
13, 31, 43, 45, 68 as application errors) and informational events warn. Two deliberate departures from the
buckets, both memory: 63 (a repair is recorded but only applies at the next reset) and 92/94 (memory producing
errors) fail, because a node with pending memory repairs should be drained and reset before it takes jobs. For 94 that
holds only where the line says nothing of a reset: a line that ends with the driver's containment verdict (`RST: No,
D-RST: No`) warns, as NVIDIA's bucket RESTART_APP says (checks/kernel_log/nvidia.py _CONTAINMENT, with the sources).
Unknown codes warn (kernel_log.xid). Operators override per code with Expectations.xid_*_codes.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import OFF_THE_BUS
from gpudiag.checks.verdicts import strongest
from gpudiag.expect import Expectations
from gpudiag.model import Status
from gpudiag.model.records import dataclass


@dataclass(frozen=True)
class XidInfo:
    """What an Xid code means, how severe it is and what the operator should do."""
    code: int
    mnemonic: str
    meaning: str
    severity: Status  # FAIL or WARN
    action: str
    bucket: Optional[str] = None  # NVIDIA catalog immediate action
    uncertain: bool = False


_APP = ("Application-level fault: restart the job and check it (compute-sanitizer for illegal accesses). If it "
        "recurs with different jobs on this GPU only, run `dcgmi diag -r 3` on the GPU.")
_RESET = ("Drain the GPU and reset it (`nvidia-smi -r -i <gpu>`) or reboot; if it recurs, run `dcgmi diag -r 3` "
          "and contact NVIDIA support with an `nvidia-bug-report.sh` archive.")
_NVLINK5 = ("Severity depends on the sub-code in the message (NVIDIA's NVLink5 Xid table); if Xid 154 follows, do "
            "what it says. Check `nvidia-smi nvlink -s` and topology.links_up.")
_ECC_RESET = ("Drain the GPU and reset it (`nvidia-smi -r -i <gpu>`) to apply the row remap; check memory.* and "
              "ecc.*; if uncorrectable errors recur or memory.row_remap_failure is set, RMA the GPU.")

_ENTRIES = (
    XidInfo(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing (channel idle timeout)",
            Status.WARN, _APP, "RESTART_APP"),
    XidInfo(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics engine exception (a faulting kernel or illegal access)",
            Status.WARN, _APP, "RESTART_APP"),
    XidInfo(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (the job used an invalid address)",
            Status.WARN, _APP, "RESTART_APP"),
    XidInfo(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream",
            Status.WARN, _APP + " Corrupted push buffers also come from PCIe errors: check pcie.aer.", "RESTART_APP"),
    XidInfo(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware (FECS) watchdog timeout",
            Status.WARN, "Informational; if it repeats, reset the GPU and move to a current driver.", "IGNORE"),
    XidInfo(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (the driver reset a channel)",
            Status.WARN, _APP, "IGNORE"),
    # Peers disagree (GPUd fails it, gpudiag warned it as an unknown code): NVIDIA's own catalog decides (issue 32,
    # item 8). docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html lists 44 for A100, H100, B100 and GB200
    # with Immediate Action IGNORE and Investigatory Action CONTACT_SUPPORT: a warning, watched, never a drain.
    XidInfo(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics engine fault during a context switch", Status.WARN,
            "NVIDIA's catalog says no immediate action; if it recurs on this GPU, collect `nvidia-bug-report.sh` and "
            "contact NVIDIA support.", "IGNORE"),
    XidInfo(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup of a channel after previous errors",
            Status.WARN, "Follows another Xid: act on that one. Alone, restart the job; on NVSwitch systems check "
                         "nvidia-fabricmanager.", "WORKFLOW_XID_45"),
    XidInfo(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (GPU timeout)",
            Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double-bit (uncorrectable) ECC error", Status.FAIL, _ECC_RESET,
            "WORKFLOW_XID_48"),
    XidInfo(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board",
            Status.FAIL, "Power the node down and check the GPU's auxiliary power cables and connectors.",
            "CHECK_MECHANICALS"),
    XidInfo(56, "DISPLAY_ENGINE_ERROR", "Display engine error", Status.WARN,
            "Driver or hardware display error: update the driver; contact support if it recurs.", uncertain=True),
    XidInfo(57, "VIDEO_MEMORY_INTERFACE_ERROR", "Error programming the video memory interface", Status.WARN,
            _RESET, uncertain=True),
    XidInfo(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", Status.WARN,
            "Reset the GPU; contact support if it recurs.", uncertain=True),
    XidInfo(62, "PMU_HALT_ERROR", "Internal micro-controller halt", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(63, "INFOROM_DRAM_RETIREMENT_EVENT", "ECC page retirement or row-remapping recording event",
            Status.FAIL, _ECC_RESET, "IGNORE"),
    XidInfo(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "ECC page retirement or row-remapper recording failure",
            Status.FAIL, "The memory repair could not be recorded: drain and reset the GPU; RMA it if "
                         "memory.row_remap_failure is set or the error recurs.", "RESET_GPU"),
    XidInfo(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "Video decoder (NVDEC0) exception", Status.WARN, _APP, "RESTART_APP"),
    XidInfo(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics engine class error", Status.WARN, _APP, "RESTART_APP"),
    XidInfo(74, "NVLINK_ERROR", "NVLink error", Status.FAIL,
            "Check `nvidia-smi nvlink -s` / `-e` and topology.links_up; reset the GPU; if the link stays down or the "
            "errors recur, reseat the GPU on the baseboard and contact support.", "WORKFLOW_NVLINK_ERR"),
    # The same words as the lost GPU's own results (checks/common.py OFF_THE_BUS, with NVIDIA's sources).
    XidInfo(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", Status.FAIL, OFF_THE_BUS,
            "RESTART_BM"),
    XidInfo(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", Status.FAIL,
            "Memory is producing correctable errors at a high rate: drain the GPU, check memory.* and run "
            "`dcgmi diag -r 3`; plan its replacement.", "IGNORE"),
    XidInfo(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained uncorrectable ECC error (one application affected)",
            Status.FAIL, "The affected job was stopped; others continue. " + _ECC_RESET, "RESTART_APP"),
    XidInfo(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained uncorrectable ECC error (all jobs affected)",
            Status.FAIL, _ECC_RESET, "RESET_GPU"),
    XidInfo(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context switch timeout", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(110, "SEC_FAULT_ERROR", "Security fault", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout (the GPU's firmware stopped answering the driver)", Status.FAIL,
            _RESET + " Check that the driver is current: GSP timeouts are often driver bugs.", "RESET_GPU"),
    XidInfo(120, "GSP_ERROR", "GSP firmware error", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(121, "C2C_ERROR", "C2C (chip-to-chip) link error", Status.WARN,
            "Correctable C2C link event: watch for recurrence; contact support if it repeats.", "IGNORE"),
    XidInfo(122, "SPI_PMU_RPC_READ_FAILURE", "SPI PMU RPC read failure", Status.WARN,
            "Firmware storage access failed: reset the GPU; contact support if it recurs.", uncertain=True),
    XidInfo(123, "SPI_PMU_RPC_WRITE_FAILURE", "SPI PMU RPC write failure", Status.WARN,
            "Firmware storage access failed: reset the GPU; contact support if it recurs.", uncertain=True),
    XidInfo(124, "SPI_PMU_RPC_ERASE_FAILURE", "SPI PMU RPC erase failure", Status.WARN,
            "Firmware storage access failed: reset the GPU; contact support if it recurs.", uncertain=True),
    XidInfo(136, "ALI_TRAINING_FAIL", "NVLink link training failure", Status.FAIL,
            "Reset the GPU and check topology.links_up; if the link fails to train again, reseat the GPU and "
            "contact support.", "RESET_GPU", uncertain=True),
    XidInfo(137, "NVLINK_PRIV_ERR", "NVLink FLA privilege error", Status.WARN,
            "Usually an application mapping error across GPUs: check the job; contact support if it recurs.",
            "IGNORE"),
    XidInfo(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "Unrecovered ECC error", Status.FAIL, _ECC_RESET, "RESET_GPU"),
    XidInfo(143, "GPU_INIT_ERROR", "GPU initialization failure", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(144, "NVLINK_SAW_ERROR", "NVLink5 SAW error", Status.WARN, _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    XidInfo(145, "NVLINK_RLW_ERROR", "NVLink5 RLW error", Status.WARN, _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    XidInfo(146, "NVLINK_TLW_ERROR", "NVLink5 TLW error", Status.WARN, _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    XidInfo(147, "NVLINK_TREX_ERROR", "NVLink5 TREX error", Status.WARN, _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    XidInfo(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink5 NVLPW_CTRL error", Status.WARN, _NVLINK5,
            "WORKFLOW_NVLINK5_ERR"),
    XidInfo(149, "NVLINK_NETIR_ERROR", "NVLink5 NETIR error", Status.WARN, _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    XidInfo(150, "NVLINK_MSE_ERROR", "NVLink5 MSE error", Status.WARN, _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    XidInfo(151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation error (confidential computing)", Status.FAIL,
            "Restart the VM that owns the GPU (or reset the GPU on bare metal); contact support if it recurs.",
            "RESTART_VM"),
    XidInfo(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", Status.FAIL,
            "The message names what the driver requires (GPU reset, node reboot, drain P2P): do that. Confirm with "
            "`nvidia-smi -q -i <gpu> | grep -i -A1 recovery`.", "XID_154"),
    XidInfo(155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(156, "RESOURCE_RETIREMENT_EVENT", "Resource retirement event", Status.FAIL,
            "A failing resource was retired; drain and reset the GPU (`nvidia-smi -r -i <gpu>`) to apply it.",
            "RESET_GPU"),
    XidInfo(157, "RESOURCE_RETIREMENT_FAILURE", "Resource retirement failure", Status.FAIL,
            "The retirement failed: drain the GPU and contact NVIDIA support (RMA candidate).", "IGNORE",
            uncertain=True),
    XidInfo(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", Status.FAIL, _RESET, "RESET_GPU"),
    XidInfo(159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI non-data error", Status.WARN,
            "If the job uses unified memory (UVM), reset the GPU; otherwise restart the job.", "CHECK_UVM"),
    XidInfo(167, "PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", Status.FAIL,
            "Drain the node, check pcie.aer and the riser/cable, and power-cycle it.", uncertain=True),
    # 171/172: NVIDIA's catalog gives them no bucket of their own ("Additional to Xid 48 providing more details on
    # particulars of fault to differentiate DRAM/SRAM", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html):
    # they follow Xid 48's WORKFLOW_XID_48 ("A GPU reset or node reboot is needed to clear this error"; for SRAM,
    # "check for SRAM DBE thresholds and follow RMA flow if exceeded"), hence reset (_ACTION_OVERRIDES).
    XidInfo(171, "UNCORRECTABLE_DRAM_ERROR", "Uncorrectable DRAM error (detail of Xid 48)", Status.FAIL, _ECC_RESET),
    XidInfo(172, "UNCORRECTABLE_SRAM_ERROR", "Uncorrectable SRAM error (detail of Xid 48)", Status.FAIL,
            "Drain the GPU and reset it (`nvidia-smi -r -i <gpu>`) to clear the error; if `nvidia-smi -q -i <gpu>` "
            "shows \"SRAM Threshold Exceeded: Yes\", run field diagnostics and RMA the GPU (NVIDIA's Xid 48 "
            "workflow)."),
)

XID_CATALOG: dict[int, XidInfo] = {entry.code: entry for entry in _ENTRIES}


def xid_severity(code: int, expect: Expectations) -> Optional[Status]:
    """FAIL or WARN for an Xid seen in the log, or None when the operator ignores it."""
    if code in expect.xid_ignore_codes:
        return None
    if code in expect.xid_fail_codes:
        return Status.FAIL
    if code in expect.xid_warn_codes:
        return Status.WARN
    info = XID_CATALOG.get(code)
    return info.severity if info else Status.WARN


# NVIDIA's resolution buckets as automation actions (checks/verdicts.py). Buckets that name a workflow or ask to
# check hardware take the GPU out of service (drain) until a person has followed them.
_BUCKET_ACTIONS = {
    "RESTART_APP": "watch", "IGNORE": "watch", "CHECK_UVM": "watch", "WORKFLOW_XID_45": "watch",
    "RESET_GPU": "reset", "WORKFLOW_XID_48": "reset", "WORKFLOW_NVLINK_ERR": "reset",
    "RESTART_BM": "reboot", "RESTART_VM": "reboot",
    "CHECK_MECHANICALS": "drain", "WORKFLOW_NVLINK5_ERR": "drain", "XID_154": "drain",
}
# Where this tool's severity departs from the bucket (see the module docstring), the action follows the remediation;
# 171 and 172 have no bucket and follow Xid 48's (see their entries).
_ACTION_OVERRIDES = {63: "reset", 94: "reset", 171: "reset", 172: "reset"}


def automation_action(code: int, severity: Status) -> str:
    """What automation does on this Xid: the bucket's action, at least drain when the Xid fails the GPU."""
    info = XID_CATALOG.get(code)
    action = _ACTION_OVERRIDES.get(code) or (_BUCKET_ACTIONS.get(info.bucket or "") if info else None) or "watch"
    # Every path above is at least "watch" (so no second floor for the non-failing case).
    return strongest([action, "drain"]) if severity == Status.FAIL else action


def describe(code: int) -> str:
    info = XID_CATALOG.get(code)
    if info is None:
        return f"Xid {code} (not in gpudiag's catalog)"
    return f"Xid {code} ({info.meaning}{', meaning unverified' if info.uncertain else ''})"


def action(code: int) -> str:
    info = XID_CATALOG.get(code)
    if info is None:
        return (f"Xid {code}: look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) and collect "
                f"`nvidia-bug-report.sh` if it recurs.")
    return f"Xid {code}: {info.action}"
