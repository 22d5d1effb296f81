"""active.*: what the load tests (gpudiag.active, `gpudiag check --level 2`) measured, judged against what the
hardware should do: copy bandwidth against the PCIe link and the NVLink/XGMI fabric, the memory test's mismatches
and ECC counters, and the clocks, temperature and throttling seen under the stress.

Expected bandwidths come from the link itself (links.py) and can be pinned in the node profile.
"""

from __future__ import annotations

from typing import Callable, Optional

from gpudiag.checks.active.common import _device, _for_each, _kernel_log_hint, _not_judged, _rise
from gpudiag.checks.active.compute import COMPUTE, compute
from gpudiag.checks.active.links import ActiveExpectations, Target, expected_host_copy, expected_peer_copy
from gpudiag.checks.active.stress import HBM, STRESS, hbm_bandwidth, stress
from gpudiag.checks.common import Check, failed, passed, skipped, verdict, warned
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import (
    CheckResult,
    CopyBandwidth,
    DeviceSnapshot,
    MemtestResult,
    NodeSnapshot,
    PeerBandwidth,
    Status,
)

PCIE_H2D = "active.pcie_h2d_bandwidth"
PCIE_D2H = "active.pcie_d2h_bandwidth"
P2P = "active.p2p_bandwidth"
MEMTEST = "active.memtest"

# --- host <-> device ---------------------------------------------------------------------------------------------


def _judge_host_copy(check_id: str, direction: str, snapshot: NodeSnapshot, expect: Expectations,
                     pinned: Optional[float]) -> Callable[[DeviceSnapshot, CopyBandwidth], CheckResult]:
    limits = ActiveExpectations.of(expect)

    def judge(device: DeviceSnapshot, copy: CopyBandwidth) -> CheckResult:
        what = f"{direction} copy test"
        if copy.gb_per_second is None:
            return _not_judged(check_id, device, what, copy.error)
        target = expected_host_copy(snapshot, device, pinned, expect, limits)
        observed = {"gb_per_second": copy.gb_per_second, "bytes_per_copy": copy.bytes_per_copy}
        if target is None:
            return passed(check_id, device, f"{device.label} {direction}: {copy.gb_per_second} GB/s (link "
                                            f"generation/width unknown: not judged)", observed=observed)
        ratio = copy.gb_per_second / target.gb_per_second
        message = (f"{device.label} {direction}: {copy.gb_per_second} GB/s, {ratio:.0%} of the "
                   f"{target.gb_per_second:g} GB/s a {target.basis}")
        return verdict(check_id, _status(ratio, target), device, message, observed=observed,
                       expected=target.as_expected(),
                       remediation=(
                           f"Pinned copies this slow mean the link carries less than it trained for, or the path "
                           f"to host memory is throttled. Check pcie.link_generation/pcie.link_width and the AER and "
                           f"replay counters (a riser or retimer that fails under load retrains or replays), confirm "
                           f"the link under load with `lspci -vvv -s {device.pci_bus_id} | grep LnkSta` while the "
                           f"test runs, check the BIOS (PCIe speed Auto/Gen{target.generation}, Max Payload Size ≥ "
                           f"256, IOMMU passthrough for performance nodes), and reseat or swap the riser/cable."))
    return judge


def _status(ratio: float, target: Target) -> Status:
    return Status.FAIL if ratio < target.fail_ratio else Status.WARN if ratio < target.warn_ratio else Status.PASS


def h2d_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    pinned = ActiveExpectations.of(expect).h2d_expected_gbps
    return _for_each(snapshot, PCIE_H2D, "pcie", "h2d", _judge_host_copy(PCIE_H2D, "host->device", snapshot, expect,
                                                                         pinned))


def d2h_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    pinned = ActiveExpectations.of(expect).d2h_expected_gbps
    return _for_each(snapshot, PCIE_D2H, "pcie", "d2h", _judge_host_copy(PCIE_D2H, "device->host", snapshot, expect,
                                                                         pinned))


# --- GPU <-> GPU ---------------------------------------------------------------------------------------------------


def p2p_bandwidth(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    active = snapshot.active
    if active is None or "p2p" not in active.tests:
        return [skipped(P2P, None, "load tests were not run (gpudiag check --level 2 runs them)" if active is None
                        else "the p2p load test was not requested")]
    if not active.peers:
        tested = [e for e in active.devices if not e.skipped]
        why = "; ".join(e.message for e in active.errors) or f"{len(tested)} GPU(s) load-tested, two are needed"
        return [skipped(P2P, None, f"no GPU pair was measured: {why}")]
    return [_judge_pair(snapshot, peer, expect) for peer in active.peers]


def _judge_pair(snapshot: NodeSnapshot, peer: PeerBandwidth, expect: Expectations) -> CheckResult:
    src, dst = _device(snapshot, peer.src), _device(snapshot, peer.dst)
    pair = f"GPU {src.index} -> GPU {dst.index}"
    copy = peer.copy
    if copy.gb_per_second is None:
        return _not_judged(P2P, src, f"{pair} copy test", copy.error)
    target = expected_peer_copy(snapshot, src, dst, expect, ActiveExpectations.of(expect))
    observed = {"dst": dst.index, "gb_per_second": copy.gb_per_second, "p2p_enabled": peer.p2p_enabled,
                "bidirectional_gb_per_second": peer.bidirectional_gb_per_second}
    if target is None:
        return passed(P2P, src, f"{pair}: {copy.gb_per_second} GB/s (no NVLink/XGMI or link data: not judged)",
                      observed=observed)
    fabric = target.basis
    if target.fabric and peer.p2p_enabled is False:
        return failed(P2P, src, f"{pair}: no peer access although they share {fabric}; copies went through host "
                                f"memory at {copy.gb_per_second} GB/s", observed=observed,
                      expected=target.as_expected(),
                      remediation=("The runtime refused peer access over the fabric. On NVSwitch systems "
                                   "nvidia-fabricmanager must be running and healthy (`systemctl status "
                                   "nvidia-fabricmanager`, `nvidia-smi -q | grep -A2 Fabric`); check `nvidia-smi "
                                   "topo -m` / `amd-smi topology` and the topology.* checks."))
    ratio = copy.gb_per_second / target.gb_per_second
    status = _status(ratio, target)
    if not target.fabric and status == Status.FAIL:
        status = Status.WARN  # PCIe peer traffic depends on the root complex and switches, not only on the GPUs
    message = f"{pair}: {copy.gb_per_second} GB/s, {ratio:.0%} of the {target.gb_per_second:g} GB/s {fabric}"
    return verdict(P2P, status, src, message, observed=observed, expected=target.as_expected(),
                   remediation=(f"GPU-to-GPU copies are slower than {fabric} carries: check topology.links_up and "
                                f"topology.link_errors for links down or erroring (replays, CRC), reseat the bridge "
                                f"or check the NVSwitch tray / XGMI cabling, and compare with the other pairs of "
                                f"this node: one slow pair points at a link, all slow at the fabric or firmware."))


# --- memory test ---------------------------------------------------------------------------------------------------


def _judge_memtest(device: DeviceSnapshot, memtest: MemtestResult) -> CheckResult:
    check_id = MEMTEST
    observed = {"bytes_tested": memtest.bytes_tested, "passes": memtest.passes_completed,
                "seconds": memtest.seconds, "mismatched_words": memtest.mismatched_words,
                "ecc_corrected": [memtest.ecc_corrected_before, memtest.ecc_corrected_after],
                "ecc_uncorrected": [memtest.ecc_uncorrected_before, memtest.ecc_uncorrected_after]}
    expected = "every word reads back as written; ECC counters unchanged"
    rma = (f"Memory that returns other data than was written is a hardware fault: drain the GPU, run the vendor's "
           f"memory diagnostic (`dcgmi diag -r 3` / `rvs -c mem.conf`), check row remapping / retired pages "
           f"(memory.* checks, `nvidia-smi -q -d ROW_REMAPPER`, `amd-smi bad-pages`) and the kernel log; "
           f"{_kernel_log_hint(device)}")
    if memtest.mismatched_words:
        return failed(check_id, device, (
            f"{device.label}: {memtest.mismatched_words} words read back wrong in {memtest.bytes_tested / 1e9:.1f} GB "
            f"(first at device address {memtest.first_error_address:#x}, flipped bits {memtest.flipped_bits_mask:#010x})"),
            observed=observed, expected=expected, remediation=rma)
    if memtest.passes_completed == 0:
        return _not_judged(check_id, device, "memory test", memtest.error)
    uncorrected = _rise(memtest.ecc_uncorrected_before, memtest.ecc_uncorrected_after)
    corrected = _rise(memtest.ecc_corrected_before, memtest.ecc_corrected_after)
    if uncorrected:
        return failed(check_id, device, f"{device.label}: {uncorrected} uncorrectable ECC errors during the memory test",
                      observed=observed, expected=expected, remediation=rma)
    summary = (f"{memtest.bytes_tested / 1e9:.1f} GB of {(memtest.total_bytes or 0) / 1e9:.1f} GB in "
               f"{memtest.passes_completed} passes, {memtest.seconds} s")
    if corrected:
        return warned(check_id, device, f"{device.label}: {corrected} corrected ECC errors during the memory test "
                                        f"({summary})", observed=observed, expected=expected,
                      remediation="ECC corrected what the test wrote; a GPU that keeps correcting errors under load is "
                                  "wearing out. " + rma)
    if memtest.error is not None:
        return warned(check_id, device, f"{device.label}: no mismatch in {summary}, but the test ended early: "
                                        f"{memtest.error.message}", observed=observed, expected=expected,
                      remediation="Run it again with a longer --timeout to cover every pass.")
    ecc = "ECC counters unchanged" if memtest.ecc_corrected_after is not None else "ECC not re-read"
    return passed(check_id, device, f"{device.label}: no mismatch in {summary}; {ecc}", observed=observed,
                  expected=expected)


def memtest(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return _for_each(snapshot, MEMTEST, "memtest", "memtest", _judge_memtest)


def active_checks(snapshot: NodeSnapshot, expectations: Expectations) -> list[CheckResult]:
    """Every active.* check, in checklist order."""
    return [result for check in CHECKS for result in check.run(snapshot, expectations)]


CHECKS = (
    Check(PCIE_H2D, h2d_bandwidth, "pinned host->device copies reach what the PCIe link's generation and width carry"),
    Check(PCIE_D2H, d2h_bandwidth, "pinned device->host copies reach what the PCIe link's generation and width carry"),
    Check(P2P, p2p_bandwidth, "GPU-to-GPU copies (peer access on) reach what NVLink/XGMI carries, for every pair"),
    Check(HBM, hbm_bandwidth, "a device-to-device copy kernel reaches the part's HBM bandwidth and its siblings'"),
    Check(MEMTEST, memtest, "most of the free GPU memory reads back every pattern written, ECC counters unchanged"),
    Check(STRESS, stress, "at the power limit (tensor cores + HBM): power held, no hardware slowdown, no straggler, "
                          "ECC unchanged"),
    Check(COMPUTE, compute, "every result of the stress verified bit for bit: the same on every SM, every launch, "
                            "cold and hot, and on identical GPUs; the streamed HBM data reads back as written"),
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
        "Slow HBM: check memory clocks and throttling under load, compare with a sibling; a repeatable straggler is RMA."),
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
