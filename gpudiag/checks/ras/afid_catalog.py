"""AMD Field IDs (AFIDs): what AMD's CPER decoder calls the fault a GPU's CPER record carries (issue 32, item 9), and
what gpudiag does about each.

The table is AMD's own, verbatim: the error map of the ras-decode library inside amdsmi, which
amdsmi_get_afids_from_cper answers from (ROCm/rocm-systems projects/amdsmi/src/ras-decode/error_map.c, `error_map[]`,
AFID_VERSION "0.7"; read at the fork danielbolsson/rocm-systems 6336ba162f620f28b912367546da4cbcb026257a, the same
34 rows in the earlier string-literal form of that file). AMD's published AFID Event List (document 70122,
docs.amd.com/r/en-US/AMD_Field_ID_70122_v1.0/AFID-Event-List, linked from amdsmi's RAS docs and the
device-metrics-exporter's `gpu_afid_errors` metric) names the same IDs with their category, type and severity; it
could not be read from here, so the service actions AMD attaches to each AFID there (its AFID_SAG, which AMD's
node-scraper takes as a configuration file and does not ship) are not gpudiag's source. These are the "CPER-method"
AFIDs, 1 to 34 (node-scraper nodescraper/plugins/serviceability/mi3xx/mi3xx_cper_utils.py: CPER_METHOD_AFID_MAX = 34;
a BMC's Redfish-method AFIDs are 10000-10999 and do not come through amdsmi).

The actions are gpudiag's, one per fatal AFID, chosen to agree with what gpudiag does about the same fault seen
another way: a fatal PCIe error on the GPU's link is a cold boot (kernel_log AER findings, action reboot); HBM at
the bad-page retirement threshold is an RMA (memory.bad_pages at the threshold: amdgpu flags the GPU for RMA); an
uncorrectable HBM error, a link (XGMI, WAFL) or device-internal fatal error is a reset (ecc.uncorrected: the GPU
must be reset, and a mode-1 reset is what amdgpu does after a fatal error on MI300); a GPU that failed to initialise
at boot (firmware load, HBM test or training, link training) needs the node rebooted, and replacing if it fails
again. The CPER-format and unidentified AFIDs (31-34) name no fault: the record's severity alone decides.
"""

from __future__ import annotations

from typing import NamedTuple, Optional


class Afid(NamedTuple):
    category: str
    type: str
    severity: str


# AFID -> (category, type, severity), error_map.c verbatim ("CPER" method on every row).
AFIDS: dict[int, Afid] = {
    1: Afid("Boot-Time Errors", "FW Load", "Fail-to-init"),
    2: Afid("Boot-Time Errors", "HBM BIST Test", "Fail-to-init"),
    3: Afid("Boot-Time Errors", "HBM Memory Test", "Fail-to-init"),
    4: Afid("Boot-Time Errors", "HBM Training", "Fail-to-init"),
    5: Afid("Boot-Time Errors", "Unhandled", "Fail-to-init"),
    6: Afid("Boot-Time Errors", "Unknown", "Fail-to-init"),
    7: Afid("Boot-Time Errors", "USR CP Link Training", "Fail-to-init"),
    8: Afid("Boot-Time Errors", "USR DP Link Training", "Fail-to-init"),
    9: Afid("Boot-Time Errors", "WAFL Link Training", "Fail-to-init"),
    10: Afid("Boot-Time Errors", "XGMI Link Training", "Fail-to-init"),
    11: Afid("Boot-Time Errors", "Boot Controller Data Abort", "Fail-to-init"),
    12: Afid("Boot-Time Errors", "Boot Controller Generic", "Fail-to-init"),
    13: Afid("Off-Package Link Errors", "PCIe AER", "Corrected"),
    14: Afid("Off-Package Link Errors", "PCIe AER", "Fatal"),
    15: Afid("Off-Package Link Errors", "WAFL", "Corrected"),
    16: Afid("Off-Package Link Errors", "WAFL", "Fatal"),
    17: Afid("Off-Package Link Errors", "XGMI", "Corrected"),
    18: Afid("Off-Package Link Errors", "XGMI", "Fatal"),
    19: Afid("HBM Errors", "Bad Page Retirement Threshold", "Fatal"),
    20: Afid("HBM Errors", "On-die ECC", "Fatal"),
    21: Afid("HBM Errors", "End-to-end CRC", "Fatal"),
    22: Afid("HBM Errors", "On-die ECC", "Uncorrected, Non-fatal"),
    23: Afid("HBM Errors", "End-to-end CRC", "Uncorrected, Non-fatal"),
    24: Afid("HBM Errors", "All", "Corrected"),
    25: Afid("HBM Errors", "All Others", "Fatal"),
    26: Afid("Device Internal Errors", "Hardware Assertion (HWA)", "Fatal"),
    27: Afid("Device Internal Errors", "Watchdog Timeout (WDT)", "Fatal"),
    28: Afid("Device Internal Errors", "All Others", "Uncorrected, Non-fatal"),
    29: Afid("Device Internal Errors", "All Others", "Corrected"),
    30: Afid("Device Internal Errors", "All Others", "Fatal"),
    31: Afid("CPER Format", "Malformed CPER", "ALL"),
    32: Afid("CPER Format", "Incomplete ACA Data", "ALL"),
    33: Afid("CPER Format", "Invalid ACA Data", "ALL"),
    34: Afid("Unidentified Errors", "Unidentified Error", "ALL"),
}

_BOOT = ("reboot", "The GPU failed to initialise at boot: drain the node and cold-boot it; a GPU that fails to "
                   "initialise again is an RMA candidate (open it with `amd-smi ras --cper` output).")
_RESET = ("reset", "Drain the GPU and reset it (`amd-smi reset --gpureset -g N`, or reboot if the reset fails); a "
                   "fatal error that comes back after the reset is an RMA candidate.")
# AFID -> (action, what to do), for the fatal and fail-to-init AFIDs; the others leave the severity's verdict.
ACTIONS: dict[int, tuple[str, str]] = {
    **{afid: _BOOT for afid in range(1, 13)},
    14: ("reboot", "A fatal PCIe error on the GPU's link: drain the node and cold-boot it; check pcie.aer, reseat the "
                   "GPU and its riser/retimer; RMA what fails again."),
    16: _RESET, 18: _RESET,
    19: ("rma", "The GPU's HBM reached its bad-page retirement threshold (amdgpu flags it for RMA): drain it, run "
                "`amd-smi bad-pages` and open an RMA with its output."),
    20: _RESET, 21: _RESET, 25: _RESET, 26: _RESET, 27: _RESET, 30: _RESET,
}


def describe(afid: int) -> str:
    """`AFID 19 (HBM Errors: Bad Page Retirement Threshold, Fatal)`, or `AFID 99` for one AMD's table lacks."""
    known: Optional[Afid] = AFIDS.get(afid)
    return f"AFID {afid} ({known.category}: {known.type}, {known.severity})" if known else f"AFID {afid}"
