"""active.*: what the load tests (gpudiag.active, `gpudiag check --level 2`) measured, judged against what the
hardware should do: copy bandwidth against the PCIe link and the NVLink/XGMI fabric (copies.py), the memory test's
mismatches and ECC counters (memtest.py), and the clocks, temperature and throttling seen under the stress
(stress.py) and its results bit for bit (compute.py). This module declares the family.

The judging modules are imported when the load tests ran: without them (every level-1 check) each active.* check is
skipped without importing them, nor the load tests' types (issue 36, item 9: a cold `gpudiag check` is timed against
`nvidia-smi -q`).
"""

from __future__ import annotations

import importlib

from gpudiag.checks.active.common import COMPUTE, HBM, MEMTEST, NOT_RUN, P2P, PCIE_D2H, PCIE_H2D, STRESS
from gpudiag.checks.common import Check, CheckFn, skipped
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, NodeSnapshot, Status


def _judged_by(check_id: str, module: str, function: str) -> CheckFn:
    """The check `function` of gpudiag/checks/active/<module>.py, imported only when the load tests ran."""

    def run(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
        if snapshot.active is None:
            return [skipped(check_id, None, NOT_RUN)]
        judge = getattr(importlib.import_module(f"{__package__}.{module}"), function)
        return judge(snapshot, expect)

    run.__name__ = run.__qualname__ = function
    return run


def active_checks(snapshot: NodeSnapshot, expectations: Expectations) -> list[CheckResult]:
    """Every active.* check, in checklist order."""
    return [result for check in CHECKS for result in check.run(snapshot, expectations)]


CHECKS = (
    Check(PCIE_H2D, _judged_by(PCIE_H2D, "copies", "h2d_bandwidth"),
          "pinned host->device copies reach what the PCIe link's generation and width carry"),
    Check(PCIE_D2H, _judged_by(PCIE_D2H, "copies", "d2h_bandwidth"),
          "pinned device->host copies reach what the PCIe link's generation and width carry"),
    Check(P2P, _judged_by(P2P, "copies", "p2p_bandwidth"),
          "GPU-to-GPU copies (peer access on) reach what NVLink/XGMI carries, for every pair"),
    Check(HBM, _judged_by(HBM, "stress", "hbm_bandwidth"),
          "a device-to-device copy kernel reaches the part's HBM bandwidth and its siblings'"),
    Check(MEMTEST, _judged_by(MEMTEST, "memtest", "memtest"),
          "most of the free GPU memory reads back every pattern written, ECC counters unchanged"),
    Check(STRESS, _judged_by(STRESS, "stress", "stress"),
          "at the power limit (tensor cores + HBM): power held, no hardware slowdown, no straggler, ECC unchanged"),
    Check(COMPUTE, _judged_by(COMPUTE, "compute", "compute"),
          "every result of the stress verified bit for bit: the same on every SM, every launch, cold and hot, and on "
          "identical GPUs; the streamed HBM data reads back as written"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
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
    # active.compute sets its own fail verdicts (drain; rma when the same SM is wrong twice: compute.py).
    "active.compute": {F: ("drain", "GPUDIAG-ACTIVE-COMPUTE-MISMATCH"), W: ("watch", "GPUDIAG-ACTIVE-COMPUTE"),
                       U: ("watch", "GPUDIAG-ACTIVE-COMPUTE-UNVERIFIED")},
}
_REFERENCE = {
    "active.pcie_h2d_bandwidth": (
        "the host-to-device copy bandwidth the load test measured, against the link's generation and width",
        "Low bandwidth on a link that reports full speed: check the link under load, NUMA placement and the riser."),
    "active.pcie_d2h_bandwidth": (
        "the device-to-host copy bandwidth the load test measured, against the link's generation and width",
        "As for host-to-device: the link under load, NUMA placement, the riser."),
    "active.p2p_bandwidth": (
        "GPU-to-GPU copy bandwidth for every pair, against what NVLink / XGMI carries",
        "A slow pair: check its links (topology.links_up, link_errors), the fabric manager, and the IOMMU."),
    "active.hbm_bandwidth": (
        "the device-to-device copy bandwidth of each GPU's HBM, against the part's nominal bandwidth and its siblings'",
        "Slow HBM: check memory clocks and throttling under load, compare with a sibling; a repeatable straggler is "
        "RMA."),
    "active.memtest": (
        "the memory test's mismatched words and the ECC counters before and after",
        "Mismatches or new ECC errors: drain the GPU, reset it and test again; repeatable errors are an RMA case."),
    "active.stress": (
        "steady power against the enforced limit, clocks under the cap, throttle reasons, temperatures, ECC and "
        "driver events under a tensor-core + HBM load, and each GPU's throughput against its siblings'",
        "Short of the power limit or slower than its siblings: check cooling, power delivery (PSU, power stage) and "
        "clocks under load; a clock collapse or a straggler without a reason is hardware."),
    "active.compute": (
        "the stress's results bit for bit: every block's signatures and SM against its launch's majority and the "
        "first launch, the reference launch cold and hot and against identical GPUs, every streamed HBM word read",
        "Wrong results under load (silent data corruption): drain the GPU, confirm with `dcgmi diag -r 3` / AMD "
        "AGFHC, test again; a mismatch that repeats on the same SM or address is an RMA case."),
}
_SETTINGS = {
    "active.pcie_h2d_bandwidth": ("active_h2d_expected_gbps", "active_pcie_efficiency", "active_pcie_warn_ratio",
                                  "active_pcie_fail_ratio", "expected_pcie_generation", "expected_pcie_width"),
    "active.pcie_d2h_bandwidth": ("active_d2h_expected_gbps", "active_pcie_efficiency", "active_pcie_warn_ratio",
                                  "active_pcie_fail_ratio", "expected_pcie_generation", "expected_pcie_width"),
    "active.p2p_bandwidth": ("active_p2p_expected_gbps", "active_nvlink_gbps_per_link", "active_xgmi_gbps_per_link",
                             "active_p2p_efficiency", "active_p2p_warn_ratio", "active_p2p_fail_ratio"),
    "active.hbm_bandwidth": ("active_hbm_nominal_gbps", "active_hbm_efficiency", "active_hbm_warn_ratio",
                             "active_hbm_fail_ratio", "active_stress_straggler_ratio"),
    "active.stress": ("active_stress_clock_fail_ratio", "thermal_warn_margin_celsius", "active_stress_power_warn_ratio",
                      "active_stress_power_fail_ratio", "active_stress_straggler_ratio"),
}
FAMILY = Family(
    "active", order=200, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
    probe_parts={"peers": ("active.",)},
    note="Judged only with `gpudiag check --level 2` (load tests on idle GPUs); skipped otherwise.",
)
