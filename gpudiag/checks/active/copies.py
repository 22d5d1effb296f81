"""active.pcie_h2d_bandwidth, active.pcie_d2h_bandwidth and active.p2p_bandwidth: the pinned copies the load tests
timed, host to device, device to host and GPU to GPU, against what the PCIe link and the NVLink/XGMI fabric carry
(links.py; every figure can be pinned in the node profile)."""

from __future__ import annotations

from typing import Callable, Optional

from gpudiag.checks.active.common import NOT_RUN, P2P, PCIE_D2H, PCIE_H2D, _device, _for_each, _not_judged
from gpudiag.checks.active.links import ActiveExpectations, Target, expected_host_copy, expected_peer_copy
from gpudiag.checks.common import failed, passed, skipped, verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, CopyBandwidth, DeviceSnapshot, NodeSnapshot, PeerBandwidth, Status

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
        return [skipped(P2P, None, NOT_RUN if active is None else "the p2p load test was not requested")]
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
