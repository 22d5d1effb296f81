"""Every NVIDIA Xid the catalog knows, pinned: severity, automation action, fault code and mnemonic.

The expected rows are written here from the sources, not read from gpudiag/checks/kernel_log/xid_catalog.py:
- mnemonic and "Resolution Bucket (Immediate Action)": NVIDIA's Xid catalog for Ampere and later,
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (its spreadsheet columns "Mnemonic" and
  "Resolution Bucket (Immediate Action)"); the bucket column as third parties restate it is UNVERIFIED against the
  spreadsheet itself (docs/vendor-api.md §11), "-" where the Ampere+ catalog has no bucket for the code (unused there,
  or newer than the restatement). NVIDIA Health Validation lists Xid 46 and 48 as CRITICAL / drain
  (https://docs.nvidia.com/health-validation/reference/checks/xid.md), as the rows below have them.
- severity: gpudiag's policy, written down in the xid_catalog docstring: anything that needs a GPU reset, a reboot or
  hardware work fails; application faults (k8s-device-plugin's 13, 31, 43, 45, 68) and informational events warn;
  63, 92, 94 fail on purpose (pending memory repairs).
- action: the bucket's action (RESTART_APP / IGNORE / CHECK_UVM / WORKFLOW_XID_45 → watch; RESET_GPU /
  WORKFLOW_XID_48 / WORKFLOW_NVLINK_ERR → reset; RESTART_BM / RESTART_VM → reboot; CHECK_MECHANICALS /
  WORKFLOW_NVLINK5_ERR / XID_154 → drain), at least drain when the Xid fails; 63 and 94 reset (their remediation);
  171 and 172 reset (details of Xid 48, whose WORKFLOW_XID_48 they follow).
A change to any row must be a deliberate change to this table.
"""

from __future__ import annotations

import re

import pytest
import yaml

from gpudiag.checks.kernel_log.xid_catalog import XID_CATALOG, action, automation_action, describe, xid_severity
from gpudiag.expect import Expectations
from gpudiag.model import Status
from tests.support.paths import REPO
from tests.support.snapshots import for_gpu, nvidia_h200_node, run, xid_event

F, W = Status.FAIL, Status.WARN

# code: (mnemonic, NVIDIA bucket, severity, action)
EXPECTED = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP", W, "watch"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", W, "watch"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", W, "watch"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP", W, "watch"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", W, "watch"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", W, "watch"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE", W, "watch"),  # issue 32, item 8: NVIDIA's bucket over GPUd's
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", W, "watch"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", F, "reset"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", F, "reset"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", F, "drain"),
    56: ("DISPLAY_ENGINE_ERROR", "-", W, "watch"),
    57: ("VIDEO_MEMORY_INTERFACE_ERROR", "-", W, "watch"),
    61: ("PMU_BREAKPOINT", "-", W, "watch"),
    62: ("PMU_HALT_ERROR", "RESET_GPU", F, "reset"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", F, "reset"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", F, "reset"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", W, "watch"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", W, "watch"),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", F, "reset"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", F, "reboot"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", F, "drain"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", F, "reset"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", F, "reset"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", F, "reset"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU", F, "reset"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU", F, "reset"),
    120: ("GSP_ERROR", "RESET_GPU", F, "reset"),
    121: ("C2C_ERROR", "IGNORE", W, "watch"),
    122: ("SPI_PMU_RPC_READ_FAILURE", "-", W, "watch"),
    123: ("SPI_PMU_RPC_WRITE_FAILURE", "-", W, "watch"),
    124: ("SPI_PMU_RPC_ERASE_FAILURE", "-", W, "watch"),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU", F, "reset"),
    137: ("NVLINK_PRIV_ERR", "IGNORE", W, "watch"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", F, "reset"),
    143: ("GPU_INIT_ERROR", "RESET_GPU", F, "reset"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", W, "drain"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", F, "reboot"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154", F, "drain"),
    155: ("NVLINK_SW_DEFINED_ERROR", "RESET_GPU", F, "reset"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU", F, "reset"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE", F, "drain"),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU", F, "reset"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM", W, "watch"),
    167: ("PCIE_FATAL_TIMEOUT", "-", F, "drain"),
    # No bucket of their own in the catalog: "Additional to Xid 48 providing more details on particulars of fault to
    # differentiate DRAM/SRAM", so they follow Xid 48's WORKFLOW_XID_48 (reset).
    171: ("UNCORRECTABLE_DRAM_ERROR", "-", F, "reset"),
    172: ("UNCORRECTABLE_SRAM_ERROR", "-", F, "reset"),
}
# The 17 codes issue 16 found unpinned (their severity could flip with every test green).
ISSUE_16 = (46, 54, 62, 109, 110, 136, 140, 143, 151, 154, 155, 156, 157, 158, 167, 171, 172)
DEFAULT = Expectations()


def test_every_catalog_code_is_pinned_here_and_nothing_else():
    assert set(XID_CATALOG) == set(EXPECTED)
    assert set(ISSUE_16) <= set(EXPECTED)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_lookup_severity_action_and_mnemonic(code):
    mnemonic, bucket, severity, expected_action = EXPECTED[code]
    info = XID_CATALOG[code]
    assert (info.code, info.mnemonic) == (code, mnemonic)
    assert (info.bucket or "-") == bucket
    assert xid_severity(code, DEFAULT) == severity
    assert automation_action(code, severity) == expected_action
    assert describe(code).startswith(f"Xid {code} ({info.meaning}")
    assert action(code) == f"Xid {code}: {info.action}" and info.action.strip() and info.meaning.strip()


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_the_check_gives_the_pinned_verdict_on_the_gpu_that_logged_it(code):
    _, _, severity, expected_action = EXPECTED[code]
    snap = nvidia_h200_node()
    snap.kernel_log.events = [xid_event("0000:3b:00.0", code)]
    results = run(snap, "kernel_log.xid")
    hit = for_gpu(results, 1)
    assert (hit.status, hit.action, hit.fault_code) == (severity, expected_action, f"GPUDIAG-XID-{code}")
    assert f"Xid {code} (" in hit.message
    assert (for_gpu(results, 0).status, for_gpu(results, 0).action) == (Status.PASS, "none")


def test_an_unknown_code_warns_to_watch_with_a_lookup_hint():
    assert xid_severity(999, DEFAULT) == W
    assert automation_action(999, W) == "watch"
    assert automation_action(999, F) == "drain"
    assert describe(999) == "Xid 999 (not in gpudiag's catalog)"
    assert "docs.nvidia.com/deploy/xid-errors" in action(999)


def test_profile_overrides_replace_the_catalog_severity():
    assert xid_severity(48, Expectations(xid_ignore_codes=(48,))) is None
    assert xid_severity(13, Expectations(xid_fail_codes=(13,))) == F
    assert xid_severity(154, Expectations(xid_warn_codes=(154,))) == W
    # A code the profile fails is drained at least, whatever its bucket; its own stronger bucket action stays.
    assert automation_action(13, F) == "drain"
    assert automation_action(79, W) == "reboot"


def _critical_alert_codes() -> set[int]:
    rules = REPO / "monitoring" / "prometheus" / "gpudiag-alerts.yml"
    exprs = {r["alert"]: r["expr"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    (critical,) = set(re.findall(r'code=~"([^"]+)"', exprs["GpudiagXidCritical"]))
    return {int(code) for code in critical.split("|")}


def test_the_critical_xid_alert_pages_exactly_on_the_failing_codes():
    """Both directions: a failing Xid that stops paging, or a warning one that starts, breaks this."""
    failing = {code for code, (_, _, severity, _) in EXPECTED.items() if severity == F}
    # 61 (micro-controller breakpoint) warns in the check, so it pages as the warning GpudiagXidError (issue 23: an
    # alert's severity is its check's); the 62 that follows it on a failing GSP pages critical on its own.
    assert _critical_alert_codes() == failing and 61 not in failing


# The bucket's own action (module docstring above), which a profile that demotes a code to a warning keeps.
BUCKET_ACTION = {"RESTART_APP": "watch", "IGNORE": "watch", "CHECK_UVM": "watch", "WORKFLOW_XID_45": "watch",
                 "RESET_GPU": "reset", "WORKFLOW_XID_48": "reset", "WORKFLOW_NVLINK_ERR": "reset",
                 "RESTART_BM": "reboot", "RESTART_VM": "reboot", "CHECK_MECHANICALS": "drain",
                 "WORKFLOW_NVLINK5_ERR": "drain", "XID_154": "drain", "-": "watch"}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_a_code_demoted_to_a_warning_keeps_its_buckets_action(code):
    _, bucket, _, _ = EXPECTED[code]
    expected = {63: "reset", 94: "reset", 171: "reset", 172: "reset"}.get(code, BUCKET_ACTION[bucket])
    assert automation_action(code, W) == expected


@pytest.mark.parametrize("code", (171, 172))
def test_the_xid_48_details_say_reset_in_words_and_in_the_action(code):
    """Catalog: 171/172 add detail to Xid 48, whose workflow needs a GPU reset; SRAM adds the threshold/RMA step."""
    remediation = action(code)
    assert "reset" in remediation and "nvidia-smi -r -i <gpu>" in remediation
    assert automation_action(code, F) == "reset" and automation_action(code, W) == "reset"
    assert ("SRAM Threshold Exceeded" in remediation) == (code == 172)


# -- what the line says (issue 21) ---------------------------------------------------------------------------------
# Xid 144-150: the NVLink5 line's own Fatal/Nonfatal word (GPUd's catalog_generated.go gives every fatal NVLink5
# unit RESET_GPU). Xid 154: the action it moved to (open-gpu-kernel-modules gpu.c _gpuRecoveryActionName): None is
# the driver clearing (watch), GPU Reset reset, Node Reboot reboot, Drain P2P / IMEX drain.
TEXT = {
    "149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)":
        (F, "reset"),
    "145, RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000001 0x00000000 0x00000000)": (W, "watch"),
    "154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)": (W, "watch"),
    "154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)": (F, "reset"),
    "154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)": (F, "reboot"),
    "154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)": (F, "reboot"),
    "154, GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)": (F, "drain"),
    "154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)": (F, "reset"),
}


@pytest.mark.parametrize("text", sorted(TEXT))
def test_the_line_decides_nvlink5_and_xid_154(text):
    from gpudiag.probe.kernel_log.events import parse_event

    event = parse_event(f"NVRM: Xid (PCI:0000:19:00): {text}")
    snap = nvidia_h200_node()
    snap.kernel_log.events = [event]
    result = for_gpu(run(snap, "kernel_log.xid"), 0)
    assert (result.status, result.action) == TEXT[text]
