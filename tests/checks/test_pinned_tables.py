"""The verdict tables other than the Xid catalog (tests/checks/kernel_log/test_pinned_xid.py), pinned entry by entry
through the public checks, with expected values written here:
- amdgpu kernel-log events (kernel_log.amdgpu_errors; gpudiag/checks/kernel_log/amdgpu.py): the messages are amdgpu's
  own (drivers/gpu/drm/amd/amdgpu/ amdgpu_job.c amdgpu_job_timedout(), amdgpu_device.c amdgpu_device_gpu_recover() /
  amdgpu_device_init(), amdgpu_ras.c; docs/vendor-api.md §11). A failed reset or init needs a cold boot (reboot);
  uncorrectable RAS errors and deferred (poisoned) ones need a reset to retire the pages; a reset that succeeded, ring
  timeouts, page faults and throttling warn.
- thermal throttle reasons (thermal.throttle): NVML's HwThermalSlowdown / HwSlowdown and AMD PROCHOT are hardware
  slowdowns (fail); software thermal slowdown and AMD's socket/VR/HBM thermal violations warn; every other reason
  is not thermal (pass). HwSlowdown with the power brake and no thermal slowdown is power.brake's.
- verdicts.py: the per-check table (its fault codes are part of the JSON contract: never renamed) and the fallbacks
  for checks and statuses the table does not list.
"""

from __future__ import annotations

import re

import pytest

from gpudiag.checks import CHECK_IDS

from gpudiag.checks.verdicts import (
    ACTIONS,
    INTERNAL_ERROR,
    TABLE,
    UNREACHABLE,
    assign,
    derived_code,
    strongest,
    with_verdict,
)
from gpudiag.expect import Expectations
from gpudiag.model import THROTTLE_REASONS, CheckResult, Status, Vendor
from gpudiag.probe.kernel_log.events import AMDGPU_EVENT_KINDS, parse_event
from tests.support.paths import REPO
from tests.support.snapshots import amd_mi300x_node, amdgpu_event, for_gpu, nvidia_h200_node, run

F, W, U, P = Status.FAIL, Status.WARN, Status.UNKNOWN, Status.PASS

# ---------------------------------------------------------------------------------------------------------------
# amdgpu events: kind → (status, action)

AMDGPU = {
    "gpu_reset_failed": (F, "reboot"),
    "init_failed": (F, "reboot"),
    "ras_uncorrectable": (F, "reset"),
    "ras_deferred": (W, "reset"),
    "gpu_reset": (W, "watch"),
    "gpu_reset_succeeded": (W, "watch"),
    "ring_timeout": (W, "watch"),
    "ring_timeout_soft_recovered": (W, "watch"),
    "page_fault": (W, "watch"),
    "throttled": (W, "watch"),
    # issue 21: the hive reset and the hang precursors. A reset (mode 1 or not) and the VRAM it wiped warn; the
    # queue/scheduler hangs warn with a reset (amdgpu's own recovery); an engine that fails its ring test fails
    # the GPU's init/resume (reboot), a video engine's does not; a located HBM error retires its page on reset.
    "gpu_mode1_reset": (W, "watch"),
    "vram_lost": (W, "watch"),
    "cp_unrecoverable": (W, "reset"),
    "qcm_fence_timeout": (W, "reset"),
    "mes_unresponsive": (W, "reset"),
    "ip_block_hung": (W, "reset"),
    "ring_reset_failed": (W, "reset"),
    "ring_test_failed": (F, "reboot"),
    "ring_test_failed_multimedia": (W, "watch"),
    "umc_error_address": (W, "reset"),
    # ACA banks as the kernel decodes them (amdgpu_aca.h): UC without Poison/Deferred, and Poison or Deferred.
    "aca_uncorrectable": (F, "reset"),
    "aca_deferred": (W, "reset"),
    # issue 32: the SMU stopped answering (acominer#9: a hard power-off brought it back): a reset first.
    "smu_unresponsive": (F, "reset"),
}
BUS = "0000:05:00.0"  # MI300X GPU 0 in tests/support/snapshots.py


def _amd_verdict(kind: str, expect: Expectations | None = None) -> tuple[Status, str, str]:
    snap = amd_mi300x_node()
    snap.kernel_log.events = [amdgpu_event(BUS, kind)]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors", expect), 0)
    return result.status, result.action, result.fault_code


def test_the_pinned_amdgpu_kinds_are_the_parsers():
    assert set(AMDGPU) <= set(AMDGPU_EVENT_KINDS)


@pytest.mark.parametrize("kind", sorted(AMDGPU))
def test_amdgpu_event_verdict(kind):
    status, action = AMDGPU[kind]
    assert _amd_verdict(kind) == (status, action, f"GPUDIAG-AMDGPU-{kind.upper().replace('_', '-')}")


@pytest.mark.parametrize("kind", sorted(set(AMDGPU_EVENT_KINDS) - set(AMDGPU)) or ["(none)"])
def test_every_other_amdgpu_kind_the_parser_emits_is_not_a_pass(kind):
    """Kinds added after this table (e.g. more RAS events) must at least alarm; pin them in AMDGPU."""
    if kind == "(none)":
        return
    status, action, _ = _amd_verdict(kind)
    assert status in (W, F) and action != "none"


def test_an_unrecognised_amdgpu_kind_warns_and_a_profile_fail_drains():
    assert _amd_verdict("something_new") == (W, "watch", "GPUDIAG-AMDGPU-SOMETHING-NEW")
    assert _amd_verdict("page_fault", Expectations(amdgpu_fail_kinds=("page_fault",)))[:2] == (F, "drain")
    assert _amd_verdict("gpu_reset_failed", Expectations(amdgpu_fail_kinds=("gpu_reset_failed",)))[:2] == (F, "reboot")
    assert _amd_verdict("init_failed", Expectations(amdgpu_warn_kinds=("init_failed",)))[:2] == (W, "reboot")
    assert _amd_verdict("ras_uncorrectable", Expectations(amdgpu_ignore_kinds=("ras_uncorrectable",)))[:2] == (
        P, "none")


@pytest.mark.parametrize("line, kind", [
    ("amdgpu 0000:05:00.0: amdgpu: Fatal error during GPU init", "init_failed"),
    ("amdgpu 0000:05:00.0: amdgpu: GPU reset(3) failed", "gpu_reset_failed"),
    ("amdgpu 0000:05:00.0: amdgpu: GPU reset begin!", "gpu_reset"),
    ("amdgpu 0000:05:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=10, emitted seq=12", "ring_timeout"),
    ("amdgpu 0000:05:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block", "ras_uncorrectable"),
])
def test_amdgpu_line_to_verdict(line, kind):
    """End to end from amdgpu's own message to the verdict (the line formats: docs/vendor-api.md §11)."""
    event = parse_event(line)
    assert (event.vendor, event.kind, event.pci_bus_id) == (Vendor.AMD, kind, BUS)
    snap = amd_mi300x_node()
    snap.kernel_log.events = [event]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 0)
    assert (result.status, result.action) == AMDGPU[kind]


def test_a_failed_and_a_succeeded_reset_together_fail_to_reboot():
    snap = amd_mi300x_node()
    snap.kernel_log.events = [amdgpu_event(BUS, "gpu_reset_succeeded"), amdgpu_event(BUS, "gpu_reset_failed"),
                              amdgpu_event(BUS, "ras_deferred")]
    result = for_gpu(run(snap, "kernel_log.amdgpu_errors"), 0)
    assert (result.status, result.action, result.fault_code) == (F, "reboot", "GPUDIAG-AMDGPU-GPU-RESET-FAILED")


# ---------------------------------------------------------------------------------------------------------------
# Thermal throttle reasons: reason alone → status of thermal.throttle

THROTTLE = {
    "hw_thermal_slowdown": F, "prochot": F, "hw_slowdown": F,
    "sw_thermal_slowdown": W, "socket_thermal": W, "vr_thermal": W, "hbm_thermal": W,
}
THROTTLE_VERDICT = {F: ("drain", "GPUDIAG-THERMAL-HW-SLOWDOWN"), W: ("watch", "GPUDIAG-THERMAL-SW-SLOWDOWN"),
                    P: ("none", None)}


def _throttle(reasons: list[str], index: int = 0) -> CheckResult:
    snap = nvidia_h200_node()
    snap.devices[index].clocks.throttle_reasons = reasons
    return for_gpu(run(snap, "thermal.throttle"), index)


@pytest.mark.parametrize("reason", THROTTLE_REASONS)
def test_each_throttle_reason_alone(reason):
    status = THROTTLE.get(reason, P)
    result = _throttle([reason])
    assert (result.status, result.action, result.fault_code) == (status, *THROTTLE_VERDICT[status])
    if status != P:
        assert reason in result.message


def test_hw_slowdown_alone_fails_but_with_the_power_brake_it_is_power_brakes():
    assert _throttle(["hw_slowdown"]).status == F
    assert _throttle(["hw_slowdown", "hw_power_brake"]).status == P
    assert _throttle(["hw_power_brake"]).status == P
    # A thermal slowdown as well: the HwSlowdown is (also) thermal and stays listed.
    both = _throttle(["hw_slowdown", "hw_power_brake", "hw_thermal_slowdown"])
    assert both.status == F and "hw_slowdown" in both.message and "hw_thermal_slowdown" in both.message
    # The power brake only excuses hw_slowdown: a software thermal slowdown still warns.
    assert _throttle(["hw_slowdown", "hw_power_brake", "sw_thermal_slowdown"]).status == W


def test_the_worst_reason_decides():
    assert _throttle(["sw_thermal_slowdown", "prochot", "sw_power_cap"]).status == F
    assert _throttle(["sw_power_cap", "vr_thermal"]).status == W


# ---------------------------------------------------------------------------------------------------------------
# verdicts.py: the table, pinned entry by entry (a renamed fault code breaks the JSON contract). The pinned copy is
# docs/reference/verdicts.md, checked in: the families declare their rows beside their checks, and a change to any
# of them must show in that page's diff (tools/gen_docs.py rewrites it when the change is meant).

PINNED_PAGE = REPO / "docs" / "reference" / "verdicts.md"
_ROW = re.compile(r"^\| `([a-z_]+\.[a-z0-9_]+)` \| (.+) \| (.+) \| (.+) \|$", re.MULTILINE)
_CELL = re.compile(r"`([a-z]+)` `(GPUDIAG-[A-Z0-9-]+)`")


def pinned_table() -> dict:
    table = {}
    for check, *cells in _ROW.findall(PINNED_PAGE.read_text()):
        row = {}
        for status, cell in zip((F, W, U), cells):
            found = _CELL.fullmatch(cell)
            assert found or cell == "*default*", (check, cell)
            if found:
                row[status] = found.groups()
        table[check] = row
    return table


def test_the_verdict_table_is_pinned():
    pinned = pinned_table()
    assert len(pinned) > 50
    changed = sorted(c for c in set(pinned) | set(TABLE) if pinned.get(c) != TABLE.get(c))
    assert changed == [], (f"the verdict policy of {changed} differs from docs/reference/verdicts.md: if meant, run "
                           "tools/gen_docs.py and review the page's diff (a fault code is never renamed)")


def test_every_check_of_the_registry_has_its_pinned_row_in_checklist_order():
    assert list(pinned_table()) == list(CHECK_IDS) == list(TABLE)


@pytest.mark.parametrize("status, action", [(F, "drain"), (W, "watch"), (U, "watch")])
def test_fallback_for_a_check_the_table_does_not_list(status, action):
    result = assign(CheckResult("made_up.check_x", status, None, "m"))
    assert (result.action, result.fault_code) == (action, f"GPUDIAG-MADE-UP-CHECK-X-{status.value.upper()}")


def test_fallback_for_a_status_the_checks_entry_does_not_list():
    # pcie.replay_errors lists WARN only: its UNKNOWN and FAIL take the defaults with derived codes.
    unknown = assign(CheckResult("pcie.replay_errors", U, None, "m"))
    assert (unknown.action, unknown.fault_code) == ("watch", "GPUDIAG-PCIE-REPLAY-ERRORS-UNKNOWN")
    failed = assign(CheckResult("pcie.replay_errors", F, None, "m"))
    assert (failed.action, failed.fault_code) == ("drain", "GPUDIAG-PCIE-REPLAY-ERRORS-FAIL")
    listed = assign(CheckResult("ecc.mode", W, None, "m"))
    assert (listed.action, listed.fault_code) == ("reset", "GPUDIAG-ECC-MODE-PENDING")


@pytest.mark.parametrize("status", [Status.PASS, Status.SKIP])
def test_pass_and_skip_need_nothing_even_for_a_listed_check(status):
    result = assign(CheckResult("ecc.mode", status, None, "m"))
    assert (result.action, result.fault_code) == ("none", None)


def test_a_verdict_the_check_set_itself_is_kept():
    own = with_verdict(CheckResult("ecc.mode", F, None, "m"), "rma", "GPUDIAG-OWN")
    assert (assign(own).action, assign(own).fault_code) == ("rma", "GPUDIAG-OWN")
    own_pass = with_verdict(CheckResult("ecc.mode", Status.PASS, None, "m"), "watch", "GPUDIAG-OWN")
    assert (assign(own_pass).action, assign(own_pass).fault_code) == ("watch", "GPUDIAG-OWN")
    with pytest.raises(ValueError):
        with_verdict(CheckResult("ecc.mode", F, None, "m"), "panic", "X")


def test_the_fixed_verdicts_and_the_action_order():
    assert UNREACHABLE == ("reset", "GPUDIAG-GPU-UNREACHABLE")
    assert INTERNAL_ERROR == ("watch", "GPUDIAG-INTERNAL-ERROR")
    assert ACTIONS == ("none", "watch", "drain", "reset", "reboot", "rma")
    assert derived_code("ecc.uncorrected", U) == "GPUDIAG-ECC-UNCORRECTED-UNKNOWN"
    assert strongest([]) == "none" and strongest([None, None]) == "none"
    assert strongest(["watch", None, "rma", "drain"]) == "rma"
    assert strongest(["reset", "reboot", "watch"]) == "reboot"
    assert strongest(["drain", "watch"]) == "drain"


# ---------------------------------------------------------------------------------------------------------------
# NVSwitch SXids (kernel_log.sxid): the line's own word first (`Fatal` → fail, reboot: NVIDIA's Fabric Manager user
# guide, "NVSwitch SXid Errors", fatal SXids need the NVSwitches and GPUs reset, GPUd reboots; `Non-fatal` → warn;
# `Correctable` → counted, not judged); the guide's table where the line says neither; its Always Fatal codes fail.
SWITCH = "0000:c3:00.0"
SXID = {
    "24007, Fatal, Link 28 sourcetrack timeout error (First)": (F, "reboot"),
    "20009, Non-fatal, Link 04 RX Short Error Rate": (W, "watch"),
    "11012, Correctable, Link 04 single bit ECC error": (P, "none"),
    "20034, Severity 1 Engine instance 60 Sub-engine instance 00": (F, "reboot"),
    "20034, Data {0x10000000, 0x10000000, 0x00000000, 0x10000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, "
    "0x00000000}": (F, "reboot"),  # no word: the guide lists 20034 as Fatal
    "26008, SOE Watchdog error": (W, "watch"),  # not in the guide's tables
    "23001, Fatal, Link 12 Always Fatal": (F, "reboot"),
    "23001, Non-fatal, Link 12 x": (W, "watch"),  # the line's word is honoured over the table
}


@pytest.mark.parametrize("text", sorted(SXID))
def test_sxid_verdicts(text):
    snap = nvidia_h200_node()
    snap.kernel_log.events = [parse_event(f"nvidia-nvswitch0: SXid (PCI:{SWITCH}): {text}")]
    (result,) = run(snap, "kernel_log.sxid")
    assert (result.status, result.action) == SXID[text]
    if result.status != P:
        assert result.observed["nvswitch_pci_bus_id"] == SWITCH and result.device is None
