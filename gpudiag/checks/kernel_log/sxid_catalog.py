"""NVSwitch SXid codes: what each is called and the class NVIDIA's Fabric Manager User Guide gives it (issue 21).

Source: NVIDIA Fabric Manager User Guide, appendix "NVSwitch SXid Errors" (docs.nvidia.com/datacenter/tesla/
fabric-manager-user-guide, DU-09883-001_v1.3, October 2023): its tables of Non-Fatal, Fatal and Always Fatal SXids
and Other Notable ones, as GPUd restates them code by code (github.com/leptonai/gpud components/accelerator/nvidia/
sxid/sxid.go, commit 4a8de33a). The guide's recovery words: Fatal, "restart the guest VM to see if the associated
NVSwitch comes back up" (on bare metal: reset the GPUs and NVSwitches, i.e. reboot the node; GPUd reboots and asks
for hardware inspection); Always Fatal, "restart the host to reset the entire fabric/system"; Non-Fatal, no fabric
impact, the job on the link may have failed.

The line's own word decides first (nvidia.py: `Fatal`, `Non-fatal`, `Correctable`, or the dump's
`Severity 1`): the driver knows what happened, and code numbers moved between driver generations (NVSentinel's test
line `28006, Non-fatal, Link 46 MC TS crumbstore MCTO` is 29006 in the 595 driver's ctrl_dev_nvswitch.h). This
catalog decides only for a line that says neither, and names the code.

Where peers disagree (issue 32, item 8): SXid 12028 "egress nonposted PRIV error" is in the guide's Non-Fatal table
(no fabric impact; the job on that link may have failed), so it warns here, as the line's own `Non-fatal` says;
GPUd and imbue's host validation fail it, NVIDIA's document does not.
"""

from __future__ import annotations

from typing import Optional

NONFATAL, FATAL, ALWAYS_FATAL, NOTABLE = "nonfatal", "fatal", "always_fatal", "notable"

_NONFATAL = {
    11004: 'Ingress invalid ACL', 11012: 'Single bit ECC errors', 11021: 'Single bit ECC errors',
    11022: 'Single bit ECC errors', 11023: 'Single bit ECC errors', 12021: 'Single bit ECC errors',
    12023: 'Single bit ECC errors', 12028: 'egress nonposted PRIV error', 15008: 'Single bit ECC errors',
    15011: 'Single bit ECC errors', 19049: 'Single bit ECC errors', 19055: 'Single bit ECC errors',
    19057: 'Single bit ECC errors', 19059: 'Single bit ECC errors', 19062: 'Single bit ECC errors',
    19065: 'Single bit ECC errors', 19068: 'Single bit ECC errors', 19071: 'Single bit ECC errors',
    19084: 'AN1 Heartbeat Timeout Error', 20001: 'TX Replay Error', 20012: 'Broken/inconsistent connection',
    22013: 'Minion Link DLREQ interrupt', 24001: 'Single bit ECC errors', 24002: 'Single bit ECC errors',
    24003: 'Single bit ECC errors',
}
_FATAL = {
    11001: 'ingress invalid command', 11009: 'ingress invalid VCSet', 11013: 'ingress header DBE',
    11018: 'ingress RID DBE', 11019: 'ingress RLAN DBE', 11020: 'ingress control parity',
    12001: 'egress crossbar overflow', 12002: 'egress packet route', 12022: 'egress input ECC DBE error',
    12024: 'egress output ECC DBE error', 12025: 'egress credit overflow',
    12026: 'egress destination request ID error', 12027: 'egress destination response ID error',
    12030: 'egress control parity error', 12031: 'egress credit parity error', 12032: 'egress flit type mismatch',
    14017: 'TS ATO timeout', 15001: 'route buffer over/underflow', 15006: 'route transdone over/underflow',
    15009: 'route GLT DBE', 15010: 'route parity', 15012: 'route incoming DBE', 15013: 'route credit parity',
    19047: 'NCISOC HDR ECC DBE Error', 19048: 'NCISOC DAT ECC DBE Error', 19054: 'HDR RAM ECC DBE Error',
    19056: 'DAT0 RAM ECC DBE Error', 19058: 'DAT1 RAM ECC DBE Error', 19060: 'CREQ RAM HDR ECC DBE Error',
    19061: 'CREQ RAM DAT ECC DBE Error', 19063: 'Response RAM HDR ECC DBE Error',
    19064: 'Response RAM DAT ECC DBE Error', 19066: 'COM RAM HDR ECC DBE Error', 19067: 'COM RAM DAT ECC DBE Error',
    19069: 'RSP1 RAM HDR ECC DBE Error', 19070: 'RSP1 RAM DAT ECC DBE Error', 20034: 'LTSSM Fault Up',
    22012: 'Minion Link NA interrupt', 24004: 'sourcetrack TCEN0 crubmstore DBE',
    24005: 'sourcetrack TCEN0 TD crubmstore DBE', 24006: 'sourcetrack TCEN1 crubmstore DBE',
    24007: 'sourcetrack timeout error',
}
_ALWAYS_FATAL = {
    12020: 'egress sequence ID error', 22003: 'Minion Halt', 22011: 'Minion exterror',
    23001: 'ingress SRC-VC buffer overflow', 23002: 'ingress SRC-VC buffer underflow',
    23003: 'egress DST-VC credit overflow', 23004: 'egress DST-VC credit underflow',
    23005: 'ingress packet burst error', 23006: 'ingress packet sticky error', 23007: 'possible bubbles at ingress',
    23008: 'ingress packet invalid dst error', 23009: 'ingress packet parity error',
    23010: 'ingress SRC-VC buffer overflow', 23011: 'ingress SRC-VC buffer underflow',
    23012: 'egress DST-VC credit overflow', 23013: 'egress DST-VC credit underflow',
    23014: 'ingress packet burst error', 23015: 'ingress packet sticky error', 23016: 'possible bubbles at ingress',
    23017: 'ingress credit parity error',
}
# Other notable SXids: 10003 "If it occurs, it is fatal to the fabric/system" (the guide), hence always fatal below.
_NOTABLE = {
    10001: 'Host_priv_error', 10002: 'Host_priv_timeout', 10003: 'Host_unhandled_interrupt',
    10004: 'Host_thermal_event_start', 10005: 'Host_thermal_event_end', 20009: 'RX Short Error Rate',
}

SXID_CATALOG: dict[int, tuple[str, str]] = {
    **{code: (name, NONFATAL) for code, name in _NONFATAL.items()},
    **{code: (name, FATAL) for code, name in _FATAL.items()},
    **{code: (name, ALWAYS_FATAL) for code, name in _ALWAYS_FATAL.items()},
    **{code: (name, NOTABLE) for code, name in _NOTABLE.items()},
    10003: (_NOTABLE[10003], ALWAYS_FATAL),
}


def sxid_name(code: int) -> Optional[str]:
    entry = SXID_CATALOG.get(code)
    return entry[0] if entry else None


def sxid_class(code: int) -> Optional[str]:
    entry = SXID_CATALOG.get(code)
    return entry[1] if entry else None
