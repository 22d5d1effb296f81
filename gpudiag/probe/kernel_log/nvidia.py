"""NVIDIA kernel messages → `KernelEvent`s: Xids (with what the line says of its severity), NVSwitch SXids, and the
driver records that carry no Xid (issue 21). Parsing only: what a record means is gpudiag/checks/'s business.
Hostile-input rules: formats.py and events.py (a record is read only from the start of its
message, every pattern anchored and bounded).

Sources (NVIDIA/open-gpu-kernel-modules, tag 595.45.04):
- Xid: src/nvidia/src/kernel/gpu/rc/kernel_rc.c krcReportXid / _krcLogUuidOnce: `NVRM: Xid (PCI:%04x:%02x:%02x[
  GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s`. The PCI tag has no function digit; an unknown process
  prints pid='<unknown>', name=<unknown>; older drivers print pid=… without name=, some paths neither (Xid 79, 154),
  and the oldest no `PCI:` (`NVRM: Xid (0000:03:00): 14, Channel 00000001`, in GPUd's tests; `NVRM: GPU 18:00.0: …`
  without the domain likewise). A full bus ID with its function (`NVRM: Xid (PCI:0000:01:00.0): 13, …`, in
  scitix/sichek's test data, components/dmesg/kmsg_event_cache_test.go) is read as the same GPU.
- Xid 144-150 (NVLink5): `<UNIT> Fatal|Nonfatal XC0 i0 Link 00 (…)` (the lines GPUd's tests quote, e.g.
  `149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 …)`).
- Xid 154: src/nvidia/src/kernel/gpu/gpu.c _gpuRefreshRecoveryActionInLock: `GPU recovery action changed from 0x%x
  (%s) to 0x%x (%s)`, the actions of ctrl2080gpu.h NV2080_CTRL_GPU_RECOVERY_ACTION_* (0 None, 1 GPU Reset Required,
  2 Node Reboot Required, 3 Drain P2P, 4 Drain and Reset, 5 Recover IMEX Domain; older drivers named 1 "PF FLR" and
  2 "OS Reboot").
- SXid: src/common/nvswitch/kernel/inc/common_nvswitch.h NVSWITCH_PRINT_SXID: `nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x):
  %05d, ` then `Fatal, Link %02d …`, `Non-fatal, …` or `Correctable, …` (intr_nvswitch.h, error_nvswitch.h), or the
  dump of an error entry that follows it: `Severity %d Engine instance %02d Sub-engine instance %02d` and `Data
  {0x%08x, …}` (error_nvswitch.c, severity 1 = NVSWITCH_ERROR_SEVERITY_FATAL). Printed at KERN_ERR by
  kernel-open/nvidia/linux_nvswitch.c nvswitch_os_print, with no NVRM prefix.
- Fallen off the bus: kernel-open/nvidia/nv.c `NVRM: GPU %04x:%02x:%02x.%x: GPU has fallen off the bus.`, and at
  probe time src/nvidia/arch/nvalloc/unix/src/osapi.c, one printk of three lines: `NVRM: The NVIDIA GPU %04x:%02x:
  %02x.%x` / `NVRM: (PCI ID: %04x:%04x) installed in this system has` / `NVRM: fallen off the bus and is not responding
  to commands.` (older drivers: the first two on one line). The bus ID is on the first line, the fault on the last.
- NVLink training: src/nvidia/src/kernel/gpu/nvlink/arch/hopper/kernel_nvlink_gh100.c
  `knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!` (no GPU named; GPUd reboots).
- RmInitAdapter: src/nvidia/arch/nvalloc/unix/src/osinit.c `RmInitAdapter failed! (0x%x:0x%x:%d)` via NV_DEV_PRINTF
  (`NVRM: GPU %04x:%02x:%02x.%x: ` in front; older drivers print no GPU).
Records with no Xid (issue 32, item 6):
- `Reset required [NV_ERR_RESET_REQUIRED]`: src/nvidia/inc/kernel/core/... NV_ASSERT_OK / NV_CHECK_OK print
  `nvAssertOkFailedNoLog: Assertion failed: %s [%s] (0x%08X) returned from %s @ %s:%d` and `nvCheckOkFailedNoLog:
  Check failed: …` (src/nvidia/src/libraries/nvport/… utils/nvassert.c) with nvstatus's name for 0x62; NV_DEV_PRINTF
  may put `GPU%d ` or the GPU's bus ID before it. The GPU refuses every new allocation until it is reset.
- GSP: src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c `_kgspIsHeartbeatTimedOut: Heartbeat timed out, …`,
  `_kgspRpcRecvPoll: GSP RM heartbeat timed out`, `_kgspLogRpcTimeout` / `_kgspLogGspTimeout` / `_kgspLogXid119`
  (before, or on some paths instead of, Xid 119), and kern_gmmu.c `kgmmuCheckMemSubsysError_IMPL`.
- kernel-open/nvidia/nv-pci.c nv_pci_probe: `NVRM: This PCI I/O region assigned to your NVIDIA device is
  invalid:\nNVRM: BAR%d is %lluM @ 0x%llx (PCI:%04x:%02x:%02x.%x)` (one printk; older drivers `(PCI:%02x:%02x.%x)`
  with no domain), then the driver core's `nvidia: probe of %s failed with error %d` (drivers/base/dd.c).
- The older one-line fallen-off message, kernel-open/nvidia/nv.c before 470: `NVRM: GPU at %04x:%02x:%02x.%x has
  fallen off the bus.`
- The GSP's core dump (kernel_falcon.c kflcnCoreDumpNondestructive, called by kernel_gsp.c _kgspLogGspTimeout) and
  NV_CHECK_OK / NV_ASSERT_OK failures in mem_multicast_fabric.c (NVLink multicast memory): see _CORE_DUMP and
  _MULTICAST_FABRIC below.
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import KernelEvent, Vendor, normalize_pci_bus_id
from gpudiag.probe.kernel_log.text import BUS_ID, DOMAIN, FLAGS, bounded_int
from gpudiag.probe.patterns import lazy_compile

NVIDIA_EVENT_KINDS = ("xid", "fallen_off_bus", "sxid", "nvlink_training_failed", "rm_init_failed", "reset_required",
                      "gsp_timeout", "gsp_core_dump", "multicast_fabric_error", "bar_invalid", "probe_failed")

# "…): 46" alone at the end: NVSentinel's minimal line.
_XID = lazy_compile(
    rf"NVRM: Xid \((?:PCI:)?({DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}}(?:\.[0-7])?)"
    r"(?: GPU-I:[0-9]{1,3}(?: GPU-CI:[0-9]{1,3})?)?\): ([0-9]+)(?:, {0,4}|(?=[ (]|$))", FLAGS)
_XID_PROCESS = lazy_compile(r"(?:pid=('?<unknown>'?|[0-9]+), {0,4})?(?:name=([^,]{0,256}), {0,4})?", FLAGS)
_NVLINK5_SEVERITY = lazy_compile(r"[A-Z0-9_/]{1,48} {1,4}(Fatal|Nonfatal|Non-fatal) ", re.ASCII)
_RECOVERY_CHANGE = lazy_compile(r"GPU recovery action changed from 0x[0-9a-f]{1,8} \([^)]{0,40}\) to "
                                r"0x([0-9a-f]{1,8}) \(([^)]{0,40})\)", FLAGS)
# NV2080_CTRL_GPU_RECOVERY_ACTION_* → what it asks of the operator. IMEX domain recovery is fabric work: drain.
_RECOVERY_ACTIONS = {0: "none", 1: "reset", 2: "reboot", 3: "drain", 4: "reset", 5: "drain"}
_RECOVERY_WORDS = (("none", "none"), ("reboot", "reboot"), ("reset", "reset"), ("flr", "reset"), ("drain", "drain"),
                   ("imex", "drain"))
_NVIDIA_UUID = lazy_compile(rf"NVRM: GPU at PCI:({DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}}): (GPU-[0-9a-f-]{{36}})", FLAGS)
# Matched whole from the start: other NVRM lines carry text a user chooses (the client version in "NVRM: API
# mismatch: the client has the version %s, …" comes from an ioctl any user can make), so "fallen off the bus"
# anywhere in an NVRM line proves nothing.
_FALLEN_OFF = lazy_compile(rf"NVRM: GPU ((?:{DOMAIN}:)?[0-9a-f]{{2}}:[0-9a-f]{{2}}\.[0-7]): GPU has fallen off the bus",
                           FLAGS)
_PROBE_GPU = lazy_compile(rf"NVRM: The NVIDIA GPU ({BUS_ID})(?: \(PCI ID: [0-9a-f]{{4}}:[0-9a-f]{{4}}\) installed in "
                          r"this system has)?$", FLAGS)
_PROBE_PCI_ID = lazy_compile(r"NVRM: (?:\(PCI ID: [0-9a-f]{4}:[0-9a-f]{4}\) )?installed in this system has$", FLAGS)
_PROBE_FALLEN = "NVRM: fallen off the bus and is not responding to commands."
_POST_RX_DET = lazy_compile(r"NVRM: knvlinkDiscoverPostRxDetLinks_[A-Z0-9]{2,8}: Getting peer[01]'s "
                            r"postRxDetLinkMask failed!", re.ASCII)
_RM_INIT = lazy_compile(rf"NVRM: (?:GPU ({BUS_ID}): )?RmInitAdapter failed! \(0x([0-9a-f]{{1,8}}):0x[0-9a-f]{{1,8}}:"
                        r"[0-9]{1,6}\)", FLAGS)
# nvstatuscodes.h (src/common/sdk/nvidia/inc/): NV_STATUS_CODE(NV_ERR_RESET_REQUIRED, 0x00000062, "Reset required").
NV_ERR_RESET_REQUIRED = 0x62
_FALLEN_OFF_OLD = lazy_compile(rf"NVRM: GPU at ({BUS_ID}) has fallen off the bus\.?\s*$", FLAGS)
_GPU_TAG = rf"(?:GPU ({BUS_ID}): |GPU[0-9]{{1,3}} )?"  # NV_DEV_PRINTF's bus ID, or the GPU instance number
_RESET_REQUIRED = lazy_compile(rf"NVRM: {_GPU_TAG}nv(?:Assert|Check)OkFailedNoLog: (?:Assertion|Check) failed: "
                               r"Reset required \[NV_ERR_RESET_REQUIRED\]", FLAGS)
# kernel_falcon.c kflcnCoreDumpNondestructive (older drivers' NVOC name: `…_IMPL`) and kflcnCoreDumpDestructive:
# one NV_PRINTF line per register (`PRI: riscvPc …`, `TRACE: 08 = 0x…`), printed by kernel_gsp.c _kgspLogGspTimeout
# (and the GSP error paths before it) only when the GSP has stopped answering.
_CORE_DUMP = lazy_compile(rf"NVRM: {_GPU_TAG}kflcnCoreDump(?:Nondestructive|Destructive)(?:_IMPL)?: ", FLAGS)
# mem_multicast_fabric.c (NVLink multicast memory over the fabric): an NV_CHECK_OK / NV_ASSERT_OK failure there, e.g.
# `Check failed: Requested object not found [NV_ERR_OBJECT_NOT_FOUND] (0x00000057) returned from status @
# mem_multicast_fabric.c:2917` (scitix/sichek's test data). The status name goes in the event's detail.
_MULTICAST_FABRIC = lazy_compile(
    rf"NVRM: {_GPU_TAG}nv(?:Assert|Check)OkFailedNoLog: (?:Assertion|Check) failed: [^\[]{{0,96}}"
    r"\[(NV_ERR_[A-Z_]{1,64})\] \(0x[0-9a-f]{1,8}\) returned from [^@]{0,256}@ mem_multicast_fabric\.c:[0-9]{1,6}",
    FLAGS)
# Xid 94 (and 95) on Ampere and later end with the error-containment verdict (kern_gpu_error_cont_ga100.c and _gb100.c
# gpuGenerateErrorLog: `… RST: %s, D-RST: %s`, the containment table's bGpuResetReqd and bGpuDrainAndResetReqd).
# Read at the end of the line only: the process name (`name=%s`) comes before it and is a user's.
_CONTAINMENT = lazy_compile(r"RST: (Yes|No), D-RST: (Yes|No)\s*$", re.ASCII)
_GSP_TIMEOUT = lazy_compile(rf"NVRM: {_GPU_TAG}(?:_kgspIsHeartbeatTimedOut: Heartbeat timed out|_kgspRpcRecvPoll: "
                            r"GSP RM heartbeat timed out|_kgspLog(?:Rpc|Gsp)Timeout: |_kgspLogXid119: |"
                            r"kgmmuCheckMemSubsysError_IMPL: )", FLAGS)
BAR_INVALID_HEAD = "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:"
_BAR_INVALID = lazy_compile(r"NVRM: BAR[0-9] is [0-9]{1,12}M @ 0x[0-9a-f]{1,16} \(PCI:(?:([0-9a-f]{4,8}:[0-9a-f]{2}:"
                            r"[0-9a-f]{2}\.[0-7])|([0-9a-f]{4}):([0-9a-f]{2}\.[0-7]))\)", FLAGS)
# drivers/base/dd.c really_probe / driver_probe_device: `<driver>: probe of <device> failed with error <n>`, for the
# GPU drivers (the NIC drivers' are the network family's: probe/network/kernel_log.py).
PROBE_FAILED = lazy_compile(rf"(nvidia|amdgpu): probe of ({BUS_ID}) failed with error (-?[0-9]{{1,6}})\s*$",
                            FLAGS)
_SXID = lazy_compile(rf"nvidia-nvswitch[0-9]{{1,3}}: SXid \(PCI:({BUS_ID})\): ([0-9]+), {{0,4}}"
                     r"(?:(Fatal|Non-fatal|Correctable),|Severity ([0-9]{1,3}) Engine instance|(Data \{))?", FLAGS)
_SXID_DETAIL = {"fatal": "fatal", "non-fatal": "nonfatal", "correctable": "correctable"}


def nvidia_gpu_uuid(message: str) -> Optional[tuple[str, str]]:
    """`NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>` (logged once per GPU before its first Xid) → (bus ID, UUID)."""
    match = _NVIDIA_UUID.match(message)
    return (normalize_pci_bus_id(match[1]), match[2]) if match else None


def _event(kind: str, message: str, bus_id: Optional[str], seconds: Optional[float], **fields) -> KernelEvent:
    return KernelEvent(vendor=Vendor.NVIDIA, kind=kind, message=message,
                       pci_bus_id=normalize_pci_bus_id(bus_id) if bus_id else None, timestamp_seconds=seconds, **fields)


def _xid_detail(code: int, text: str) -> Optional[str]:
    if 144 <= code <= 150:
        word = _NVLINK5_SEVERITY.match(text)
        return None if word is None else ("fatal" if word[1] == "Fatal" else "nonfatal")
    if code == 94:  # Xid 95 (uncontained) prints the same verdict; NVIDIA's catalog resets it whatever it says
        verdict = _CONTAINMENT.search(text, max(0, len(text) - 40))
        if verdict is None:
            return None
        return "drain-reset" if verdict[2] == "Yes" else ("reset" if verdict[1] == "Yes" else "no-reset")
    if code == 154:
        change = _RECOVERY_CHANGE.match(text)
        if change is None:
            return None
        action = _RECOVERY_ACTIONS.get(int(change[1], 16))
        name = change[2].lower()
        return action or next((a for word, a in _RECOVERY_WORDS if word in name), None)
    return None


def nvrm_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The event one `NVRM: ` line reports on its own (the probe-time triple needs NvrmReader). The word after the
    prefix picks the one pattern worth trying: most NVRM lines are chatter (bench/kernel_log_scan.py)."""
    head = message[6:10]
    if head == "Xid ":
        xid = _XID.match(message)
        if xid is None:
            return None
        process = _XID_PROCESS.match(message, xid.end())
        pid, name = process[1], process[2]
        code = bounded_int(xid[2], "Xid", 6)
        return _event(
            "xid", message, xid[1], seconds, code=code,
            # A pid no kernel prints (pid_max is at most 2^22) is dropped, not the Xid it came with.
            pid=int(pid) if pid and pid.isdigit() and len(pid) <= 10 else None,
            process=name.strip() if name and name.strip() not in ("", "<unknown>") else None,
            detail=_xid_detail(code, message[process.end():]))
    if head == "GPU ":
        fallen = _FALLEN_OFF.match(message)
        if fallen:
            return _event("fallen_off_bus", message, fallen[1], seconds)
        old = _FALLEN_OFF_OLD.match(message)
        if old:
            return _event("fallen_off_bus", message, old[1], seconds)
    elif head == "knvl":
        return _event("nvlink_training_failed", message, None, seconds) if _POST_RX_DET.match(message) else None
    init = _RM_INIT.match(message) if "RmInitAdapter" in message[:40] else None
    if init:
        status = int(init[2], 16)  # the first of RmInitAdapter's three: the NV_STATUS it failed with
        return _event("rm_init_failed", message, init[1], seconds,
                      detail="reset_required" if status == NV_ERR_RESET_REQUIRED else None)
    if "NV_ERR_RESET_REQUIRED" in message:
        required = _RESET_REQUIRED.match(message)
        if required:
            return _event("reset_required", message, required[1], seconds)
    if "mem_multicast_fabric.c:" in message:
        multicast = _MULTICAST_FABRIC.match(message)
        if multicast:
            return _event("multicast_fabric_error", message, multicast[1], seconds, detail=multicast[2])
    if "kflcnCoreDump" in message[:64]:
        dump = _CORE_DUMP.match(message)
        if dump:
            return _event("gsp_core_dump", message, dump[1], seconds)
    if "kgsp" in message[:48] or "kgmmu" in message[:48]:
        gsp = _GSP_TIMEOUT.match(message)
        if gsp:
            return _event("gsp_timeout", message, gsp[1], seconds)
    return None


def probe_failed_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """`nvidia: probe of 0000:02:00.0 failed with error -1` (or amdgpu's): the driver could not take the GPU."""
    match = PROBE_FAILED.match(message)
    if match is None:
        return None
    vendor = Vendor.NVIDIA if match[1].lower() == "nvidia" else Vendor.AMD
    return KernelEvent(vendor=vendor, kind="probe_failed", message=message, pci_bus_id=normalize_pci_bus_id(match[2]),
                       timestamp_seconds=seconds, detail=f"error {bounded_int(match[3].lstrip('-'), 'errno', 6)}")


def sxid_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """`nvidia-nvswitchN: SXid (PCI:<switch>): NNNNN, …` → an event on the switch's bus ID, its line's own word in
    `detail` ("fatal", "nonfatal", "correctable"; "data-fatal"/"data-nonfatal"/"data" for the lines that dump the
    error entry of the record before them; None when the line says neither)."""
    match = _SXID.match(message)
    if match is None:
        return None
    if match[3]:
        detail: Optional[str] = _SXID_DETAIL[match[3].lower()]
    elif match[4] is not None:
        detail = "data-fatal" if bounded_int(match[4], "SXid severity", 3) == 1 else "data-nonfatal"
    else:
        detail = "data" if match[5] else None
    return KernelEvent(vendor=Vendor.NVIDIA, kind="sxid", message=message, pci_bus_id=normalize_pci_bus_id(match[1]),
                       code=bounded_int(match[2], "SXid", 6), timestamp_seconds=seconds, detail=detail)


class NvrmReader:
    """NVRM records that span lines: the probe-time "fallen off the bus" message names the GPU on its first line and
    the fault on its third. The lines arrive one after the other (a kmsg record split at its \\x0a, dmesg's indented
    continuation lines, journal lines); any other NVRM line in between ends the wait."""

    def __init__(self) -> None:
        self._pending: Optional[str] = None  # the bus ID of "NVRM: The NVIDIA GPU <bus>", until the record ends
        self._lines = 0
        self._in_probe = False  # the record fed last is the probe message's first line
        self._bar = False  # the line before was "This PCI I/O region … is invalid:", whose BAR line names the GPU
        self._dumping = False  # the NVRM record fed last was a line of a GSP core dump
        self._dump_continued = False  # the record fed last was a later line of a core dump already read

    @property
    def pending(self) -> bool:
        """Whether the record just fed opened one whose later lines are awaited, or went on a core dump already read
        (not an error of its own)."""
        return self._pending is not None or self._bar or self._dump_continued

    def _bar_line(self, message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        self._bar = False
        bar = _BAR_INVALID.match(message)
        if bar is None:
            return None
        # the oldest drivers print the bus as %04x and no domain: "(PCI:0002:00.0)" is 0000:02:00.0
        return _event("bar_invalid", message, bar[1] or f"0000:{int(bar[2], 16):02x}:{bar[3]}", seconds)

    def continue_record(self, message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        """A later line of one record (after its \\x0a, or dmesg's indented continuation): read only as the rest of
        the probe-time message or the invalid-BAR message its first line opened, never as a record of its own (issue
        32, item 1: the text after a newline may be a user's, as in a segfault report's file name)."""
        if self._bar:
            return self._bar_line(message, seconds)
        if self._pending is None:
            # the probe message's last line after some other line inside it: a GPU fell off, which one is unknown
            return _event("fallen_off_bus", message, None, seconds, detail="probe") if (
                self._in_probe and message == _PROBE_FALLEN) else None
        self._lines += 1
        if message == _PROBE_FALLEN:
            bus_id, self._pending = self._pending, None
            return _event("fallen_off_bus", message, bus_id, seconds, detail="probe")
        if not (_PROBE_PCI_ID.match(message) and self._lines < 2):
            self._pending = None
        return None

    def feed(self, message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        self._in_probe = message.startswith("NVRM: The NVIDIA GPU ")  # this record may go on over lines
        dumping, self._dumping, self._dump_continued = self._dumping, False, False
        if self._bar:  # older kernels printed each line of the message as a record of its own
            event = self._bar_line(message, seconds)
            if event is not None:
                return event
        if message.startswith(BAR_INVALID_HEAD):
            self._bar = True
            return None
        if self._pending is not None:
            self._lines += 1
            if message == _PROBE_FALLEN:
                bus_id, self._pending = self._pending, None
                return _event("fallen_off_bus", message, bus_id, seconds, detail="probe")
            if _PROBE_PCI_ID.match(message) and self._lines < 2:
                return None
            self._pending = None
        probe = _PROBE_GPU.match(message) if message.startswith("NVRM: The NVIDIA GPU ") else None
        if probe:
            self._pending, self._lines = probe[1], 0
            return None
        # its first line was lost (cut from a saved log): a GPU fell off, which one is unknown
        if message == _PROBE_FALLEN:
            return _event("fallen_off_bus", message, None, seconds, detail="probe")
        event = nvrm_event(message, seconds)
        if event is not None and event.kind == "gsp_core_dump":
            # A core dump prints a line per register, one record each: the lines that follow one another are one
            # dump, one event (the first line read); another NVRM record in between ends it.
            self._dumping = True
            if dumping:
                self._dump_continued = True
                return None
        return event
