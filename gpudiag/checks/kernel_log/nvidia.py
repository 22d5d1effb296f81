"""kernel_log.xid and kernel_log.sxid: what the NVIDIA driver logged since boot, per GPU and per NVSwitch.

The Xid catalog (xid_catalog.py) decides by code, except where the line says more (issue 21):
- Xid 144-150 (NVLink5) carry `Fatal` or `Nonfatal`: a fatal one fails its GPU and resets it (GPUd's catalog gives
  every fatal NVLink5 unit RESET_GPU), a nonfatal one warns;
- Xid 154 names the recovery action the driver moved to: to None is the driver clearing the GPU (watch, never a
  drain), to GPU reset / node reboot / drain carries that action. Only a GPU's last Xid 154 says what it needs now;
  the earlier ones are history.
Driver records with no Xid: the "fallen off the bus" messages (the one-line one and the probe-time triple), an
NVLink training failure (`knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!`, which
names no GPU: node-level, reboot as GPUd does) and `RmInitAdapter failed!` (the driver could not bring the GPU up;
a reset where its status is NV_ERR_RESET_REQUIRED). Issue 32, item 6: reset-required assertions, GSP timeouts and the
GSP's core dump (reset), multicast-fabric failures (a warning: the job's fabric memory, not the GPU), invalid BARs and
probe failures.

SXids are judged per NVSwitch, node-level results that name the switch's PCI address: the line's own word first
(`Fatal` fails and reboots, `Non-fatal` warns, `Correctable` is counted but not judged), the Fabric Manager's
class where the line says neither (sxid_catalog.py); an always-fatal SXid is fatal to the whole fabric.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from gpudiag.checks.common import skipped
from gpudiag.checks.kernel_log import sxid_catalog, xid_catalog
from gpudiag.checks.kernel_log.amdgpu import port_events
from gpudiag.checks.kernel_log.common import (
    AER_EVENT_KINDS,
    PCIE_SLOT_EVENT_KINDS,
    UNRECOGNISED,
    UNRECOGNISED_KIND,
    aer_finding,
    Finding,
    Repeats,
    applies,
    in_window,
    judge_events,
    per_gpu,
    slot_events,
    slot_finding,
    unreadable_log,
    window_start,
)
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, KernelEvent, NodeSnapshot, Status, Vendor

# "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." comes with (or, on some paths, instead of) Xid 79.
FALLEN_OFF_BUS = Finding(Status.FAIL, "GPU has fallen off the bus (NVRM)", xid_catalog.action(79), "reboot",
                         "GPUDIAG-XID-79")
_PROBE_FALLEN = FALLEN_OFF_BUS._replace(description="GPU fell off the bus before the driver could use it (NVRM probe)")
_NVLINK_TRAINING = Finding(
    Status.FAIL, "NVLink training failed (postRxDetLinkMask)",
    "The NVLinks did not train when the driver loaded (knvlinkDiscoverPostRxDetLinks): the GPUs cannot use their "
    "fabric. Drain the node and reboot it (GPUd treats this as reboot); if it repeats, reseat the GPU baseboard and "
    "contact NVIDIA support with an `nvidia-bug-report.sh` archive.", "reboot", "GPUDIAG-NVRM-NVLINK-TRAINING")
_RM_INIT = Finding(
    Status.FAIL, "the driver could not initialise the GPU (RmInitAdapter failed)",
    "The GPU is on the bus but unusable: drain the node and cold-boot it (a warm reboot may not reset the GPU); check "
    "the firmware and GSP images for the driver version, and `dmesg` just above the line for the step that failed; "
    "if it persists, RMA the GPU.", "reboot", "GPUDIAG-NVRM-INIT-FAILED")
# `RmInitAdapter failed! (0x62:…)`: the driver's own status is NV_ERR_RESET_REQUIRED (nvstatuscodes.h 0x62), and the
# lines before it say so in words (kernel_gsp.c _kgspBootGspRm: "unexpected WPR2 already up, cannot proceed with
# booting GSP" / "(the GPU is likely in a bad state and may need to be reset)", open-gpu-kernel-modules#1230): the
# driver asks for a GPU reset, not a reboot, as it does for NV_ERR_RESET_REQUIRED anywhere (_RESET_REQUIRED below).
_RM_INIT_RESET = _RM_INIT._replace(
    description="the driver could not initialise the GPU and requires a reset (RmInitAdapter failed, "
                "NV_ERR_RESET_REQUIRED)",
    action="The driver found the GPU in a bad state (GSP firmware left running, e.g. \"WPR2 already up\") and could "
           "not initialise it: drain the GPU and reset it (`nvidia-smi -r -i <gpu>`), or cold-boot the node where a "
           "reset is refused; if it persists after a cold boot, check the driver and GSP firmware versions, then RMA.",
    verdict="reset", fault_code="GPUDIAG-NVRM-INIT-RESET-REQUIRED")
# Driver records with no Xid (issue 32, item 6; gpudiag/probe/kernel_log/nvidia.py says where each is printed).
_RESET_REQUIRED = Finding(
    Status.FAIL, "the driver requires a GPU reset (NV_ERR_RESET_REQUIRED)",
    "The driver refuses new work on the GPU until it is reset (the same state as Xid 154 \"GPU Reset Required\"): "
    "drain the GPU and reset it (`nvidia-smi -r -i <gpu>`) or reboot; find the Xid before it for the cause.",
    "reset", "GPUDIAG-NVRM-RESET-REQUIRED")
_GSP_TIMEOUT = Finding(
    Status.FAIL, "GSP firmware stopped answering the driver (heartbeat / RPC timeout)",
    xid_catalog.action(119) + " Logged before (or without) Xid 119.", "reset", "GPUDIAG-NVRM-GSP-TIMEOUT")
# The GSP's core dump (kernel_falcon.c kflcnCoreDumpNondestructive, from kernel_gsp.c _kgspLogGspTimeout): printed
# only when the GSP stopped answering; NVIDIA's catalog resets the GPU for GSP timeouts and errors (Xid 119/120,
# RESET_GPU).
_GSP_CORE_DUMP = _GSP_TIMEOUT._replace(
    description="GSP firmware core dump (the driver dumped the GSP's state: it stopped answering)",
    action=xid_catalog.action(119) + " The core dump may be all the log kept (the Xid 119/120 before it lost).",
    fault_code="GPUDIAG-NVRM-GSP-CORE-DUMP")
# mem_multicast_fabric.c: NVLink multicast memory (NVLS, cuMulticastCreate and fabric handles) is set up through the
# fabric: Fabric Manager on an NVSwitch node, the IMEX service across nodes (NVIDIA Fabric Manager User Guide; IMEX
# Service for NVLink Networks User's Guide, "IMEX Channels": without the channel devices the CUDA APIs fail). A failure
# there fails the job's multicast allocation, not the GPU: a warning, with where to look.
_MULTICAST_FABRIC = Finding(
    Status.WARN, "an NVLink multicast fabric object failed",
    "A job's NVLink multicast (fabric) memory could not be set up: check each GPU's fabric state (`nvidia-smi -q | "
    "grep -A4 -i fabric`: State Completed, Status Success), that nvidia-fabricmanager (NVSwitch nodes) or "
    "nvidia-imex (multi-node NVLink, with /dev/nvidia-caps-imex-channels/) runs, and topology.fabric; then restart "
    "the job. If it recurs with the fabric healthy, collect `nvidia-bug-report.sh` for NVIDIA support.",
    "watch", "GPUDIAG-NVRM-MULTICAST-FABRIC")
_BAR_INVALID = Finding(
    Status.FAIL, "the GPU's PCI BAR is invalid: the driver cannot map it",
    "The firmware did not assign the GPU's memory aperture (BAR): enable \"Above 4G Decoding\" / resizable BAR in the "
    "BIOS (in a VM: a 64-bit MMIO window large enough for the GPU), or boot with `pci=realloc`; then reboot.",
    "drain", "GPUDIAG-NVRM-BAR-INVALID")
_PROBE_FAILED = Finding(
    Status.FAIL, "the NVIDIA driver could not take the GPU (probe failed)",
    "The driver did not bind to the GPU: the NVRM lines just above it say why (BAR, power cables, firmware). Fix "
    "that, then reboot; if it persists after a cold boot, RMA the GPU.", "reboot", "GPUDIAG-NVRM-PROBE-FAILED")
_NO_XID = {"reset_required": _RESET_REQUIRED, "gsp_timeout": _GSP_TIMEOUT, "gsp_core_dump": _GSP_CORE_DUMP,
           "multicast_fabric_error": _MULTICAST_FABRIC, "bar_invalid": _BAR_INVALID, "probe_failed": _PROBE_FAILED}
_RECOVERY = {
    "none": (Status.WARN, "watch", "Xid 154: the driver cleared the GPU's recovery action (back to None): nothing to "
                                   "do now; find the Xid before it that raised the action."),
    "reset": (Status.FAIL, "reset", "Xid 154: the driver requires a GPU reset: drain the GPU and reset it "
                                    "(`nvidia-smi -r -i <gpu>`), or reboot."),
    "reboot": (Status.FAIL, "reboot", "Xid 154: the driver requires a node reboot: drain the node and reboot it."),
    "drain": (Status.FAIL, "drain", "Xid 154: the driver asks to drain the GPU (P2P or IMEX traffic): drain it and "
                                    "follow `nvidia-smi -q -i <gpu> | grep -i -A1 recovery`."),
}


# Xid 94 (a contained uncorrectable error) by what its line says of a reset (`RST: Yes|No, D-RST: Yes|No`, the
# driver's error-containment table). NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
# gives 94 RESTART_APP, and its GPU Memory Error Management note (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt,
# "Response to Uncorrectable Contained ECC Errors") says other work carries on and new work may start without a GPU
# reset, the row remap waiting for the next service-window reset (memory.* sees that pending remap). So a line that
# says no reset warns (the job restarts); one that asks for a reset or a drain-and-reset fails and resets. A line
# that says neither keeps the catalog's departure (fail, reset: see xid_catalog.py).
_CONTAINMENT = {
    "no-reset": lambda base: base._replace(
        severity=Status.WARN, verdict="watch", description=f"{base.description}, no reset needed (RST: No)",
        action="Xid 94: the driver contained the error to the job that hit it (RST: No, D-RST: No): restart that "
               "job; the GPU keeps running others (NVIDIA's catalog: RESTART_APP). Any row remap it recorded applies "
               "at the next GPU reset: memory.* says when one is pending."),
    "reset": lambda base: base._replace(description=f"{base.description}, GPU reset required (RST: Yes)"),
    "drain-reset": lambda base: base._replace(description=f"{base.description}, drain and reset required (D-RST: "
                                                         f"Yes)"),
}


def _xid_finding(event: KernelEvent, expect: Expectations, last_154: dict) -> Optional[Finding]:
    code = event.code
    severity = xid_catalog.xid_severity(code, expect)
    if severity is None:
        return None
    overridden = code in expect.xid_fail_codes or code in expect.xid_warn_codes
    base = Finding(severity, xid_catalog.describe(code), xid_catalog.action(code),
                   xid_catalog.automation_action(code, severity), f"GPUDIAG-XID-{code}")
    if overridden or event.detail is None:
        return base
    if 144 <= code <= 150:
        if event.detail == "fatal":
            return base._replace(severity=Status.FAIL, description=f"{base.description}, Fatal", verdict="reset",
                                 action=f"{base.action} The line says Fatal: drain the GPU and reset it "
                                        f"(`nvidia-smi -r -i <gpu>`).")
        return base._replace(severity=Status.WARN, description=f"{base.description}, Nonfatal", verdict="watch")
    if code == 94 and event.detail in _CONTAINMENT:
        return _CONTAINMENT[event.detail](base)
    if code == 154 and event.detail in _RECOVERY:
        if last_154.get(event.pci_bus_id) is not event and event.detail != "none":
            return base._replace(severity=Status.WARN, verdict="watch", description=f"{base.description} (to "
                                 f"{event.detail}, superseded by a later Xid 154)",
                                 action="Xid 154: a later Xid 154 changed the recovery action again; act on that one.")
        severity, action, words = _RECOVERY[event.detail]
        return base._replace(severity=severity, verdict=action, description=f"{base.description} (to {event.detail})",
                             action=words)
    return base


def xid(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "kernel_log.xid"
    kinds = ("fallen_off_bus", "nvlink_training_failed", "rm_init_failed", UNRECOGNISED_KIND, *_NO_XID)
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.NVIDIA
              and (e.kind in kinds or (e.kind == "xid" and e.code is not None))]
    events += slot_events(snapshot, Vendor.NVIDIA) + port_events(snapshot, Vendor.NVIDIA)
    if not applies(snapshot, Vendor.NVIDIA, events):
        return [skipped(check_id, None, "no NVIDIA GPU on this node")]
    if not snapshot.kernel_log.readable:
        return [unreadable_log(check_id, snapshot)]
    start = window_start(snapshot, expect)
    last_154 = {e.pci_bus_id: e for e in events if e.kind == "xid" and e.code == 154 and e.detail is not None}
    return per_gpu(snapshot, check_id, Vendor.NVIDIA, events,
                   lambda event: nvidia_finding(event, expect, last_154) if in_window(event, start) else None,
                   Repeats(snapshot, expect))


def nvidia_finding(event: KernelEvent, expect: Expectations, last_154: dict) -> Optional[Finding]:
    """What one NVIDIA driver record (or a PCIe slot event below an NVIDIA GPU) means; `last_154`: each GPU's last
    Xid 154, the one whose action stands. None: the profile ignores it."""
    if event.kind == "fallen_off_bus":
        return _PROBE_FALLEN if event.detail == "probe" else FALLEN_OFF_BUS
    if event.kind == "nvlink_training_failed":
        return _NVLINK_TRAINING
    if event.kind == "rm_init_failed":
        return _RM_INIT_RESET if event.detail == "reset_required" else _RM_INIT
    if event.kind in PCIE_SLOT_EVENT_KINDS:
        return slot_finding(event)
    if event.kind == "multicast_fabric_error" and event.detail:  # the status the driver named (NV_ERR_…)
        return _MULTICAST_FABRIC._replace(description=f"{_MULTICAST_FABRIC.description} ({event.detail})")
    if event.kind in _NO_XID:
        return _NO_XID[event.kind]
    if event.kind == UNRECOGNISED_KIND:
        return UNRECOGNISED
    if event.kind in AER_EVENT_KINDS:
        return aer_finding(event)
    if event.code is None:
        return None
    return _xid_finding(event, expect, last_154)


# -- NVSwitch ---------------------------------------------------------------------------------------------------

_FABRIC_REBOOT = ("Drain the node and reboot it: the NVSwitches and GPUs of the baseboard must be reset together "
                  "(NVIDIA Fabric Manager guide, NVSwitch SXid errors); then check `nvidia-smi nvlink -s` and "
                  "topology.fabric. A fatal SXid that recurs is a baseboard for hardware inspection.")
_SXID_LEVELS = {
    sxid_catalog.ALWAYS_FATAL: (
        Status.FAIL,
        "reboot",
        "always fatal to the fabric: restart the host. " + _FABRIC_REBOOT,
    ),
    "fatal": (Status.FAIL, "reboot", _FABRIC_REBOOT),
    "nonfatal": (
        Status.WARN,
        "watch",
        "Non-fatal NVSwitch error: the fabric carries on, the job on that link may have "
        "failed; watch for recurrence and for Xid 74/45 on the GPUs.",
    ),
}


def _sxid_level(event: KernelEvent) -> Optional[str]:
    """The level a line is judged at: always fatal (Fabric Manager's table) beats the line's word; then the word;
    then the catalog; an unknown code with no word warns."""
    known = sxid_catalog.sxid_class(event.code) if event.code is not None else None
    word = {"fatal": "fatal", "nonfatal": "nonfatal", "correctable": None, "data-fatal": "fatal",
            "data-nonfatal": "nonfatal"}.get(event.detail or "", "unsaid")
    if word is None:
        return None  # correctable: counted, not judged
    if known == sxid_catalog.ALWAYS_FATAL and word != "nonfatal":
        return sxid_catalog.ALWAYS_FATAL
    if word != "unsaid":
        return word
    return "fatal" if known == sxid_catalog.FATAL else "nonfatal"


def sxid_finding(event: KernelEvent) -> Optional[Finding]:
    level = _sxid_level(event)
    if level is None:
        return None
    severity, action, words = _SXID_LEVELS[level]
    name = sxid_catalog.sxid_name(event.code) or "not in gpudiag's SXid catalog"
    label = {"always_fatal": "Always Fatal", "fatal": "Fatal", "nonfatal": "Non-fatal"}[level]
    return Finding(severity, f"SXid {event.code} ({name}, {label})", f"SXid {event.code}: {words}", action,
                   f"GPUDIAG-SXID-{event.code}")


def _no_switch_fabric(snapshot: NodeSnapshot) -> bool:
    """Every NVIDIA GPU answered that it is in no NVSwitch fabric (a PCIe card, a lone GPU of a VM): there is no
    switch to log an SXid. A GPU that did not answer, or none at all, leaves the check to run."""
    nvidia = [d for d in snapshot.devices if d.vendor == Vendor.NVIDIA]
    return bool(nvidia) and all(d.driver_health is not None and d.driver_health.fabric is not None
                                and d.driver_health.fabric.state == "not_supported" for d in nvidia)


def sxid(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "kernel_log.sxid"
    events = [e for e in snapshot.kernel_log.events if e.vendor == Vendor.NVIDIA and e.kind == "sxid"]
    if not applies(snapshot, Vendor.NVIDIA, events):
        return [skipped(check_id, None, "no NVIDIA GPU on this node")]
    if not snapshot.kernel_log.readable:
        return [unreadable_log(check_id, snapshot)]
    start = window_start(snapshot, expect)
    by_switch: dict[Optional[str], list[KernelEvent]] = defaultdict(list)
    for event in events:
        if in_window(event, start):
            by_switch[event.pci_bus_id].append(event)
    log, repeats = snapshot.kernel_log, Repeats(snapshot, expect)
    if not by_switch:
        if _no_switch_fabric(snapshot) and not events:
            return [skipped(check_id, None, "no NVSwitch fabric on this node (every GPU's NVML fabric info: not "
                                            "supported) and no SXid in the log")]
        return [judge_events(check_id, None, "NVSwitches", [], sxid_finding, log)]
    results = []
    for bus_id, switch_events in by_switch.items():
        where = f"NVSwitch {bus_id} ({switch_events[0].message.split(':', 1)[0]})"
        judged = [e for e in switch_events if e.detail != "correctable"]
        extra = {"nvswitch_pci_bus_id": bus_id}
        if len(judged) < len(switch_events):
            extra["correctable"] = len(switch_events) - len(judged)  # counted (the metric), not judged
        results.append(judge_events(check_id, None, where, judged, sxid_finding, log, repeats, bus_id,
                                    observed_extra=extra))
    return results
