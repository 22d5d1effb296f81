"""topology.*: the GPU fabric (NVLink / XGMI links, their errors, P2P between GPUs) and NUMA placement."""

from __future__ import annotations

from collections import Counter

from gpudiag.checks import fabric
from gpudiag.checks.network import affinity as network_affinity
from gpudiag.checks.common import (
    Check,
    errors_about,
    failed,
    for_each_device,
    not_available,
    passed,
    physical_devices,
    reset_command,
    skipped,
    unknown,
    unsupported_reasons,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, PciGpu, PeerLink, Status, Vendor

LINKS_UP = "topology.links_up"
LINK_ERRORS = "topology.link_errors"
P2P = "topology.p2p"
NUMA = "topology.numa"

_LINK_TOPICS = ("nvlink", "xgmi")


def _fabric(device: DeviceSnapshot) -> str:
    return "NVLink" if device.vendor == Vendor.NVIDIA else "XGMI"


def _link_query(device: DeviceSnapshot) -> str:
    if device.vendor == Vendor.NVIDIA:
        return f"nvidia-smi nvlink -s -i {device.index}` and `nvidia-smi nvlink -e -i {device.index}"
    return "amd-smi xgmi` and `amd-smi metric --xgmi-err"


def _link_remediation(device: DeviceSnapshot) -> str:
    if device.vendor == Vendor.NVIDIA:
        fix = (f"reset the GPU (`{reset_command(device)}`) or reboot; on HGX/NVSwitch systems check that "
               f"nvidia-fabricmanager is running (`systemctl status nvidia-fabricmanager`); if the link stays down, "
               f"reseat the GPU on the baseboard (or the NVLink bridge on PCIe cards)")
    else:
        fix = "reboot the node (XGMI trains at boot); if the link stays down, reseat the OAM module on the baseboard"
    return (f"Confirm with `{_link_query(device)}`. To recover, {fix}. A link that fails again on the same GPU is an "
            f"RMA candidate.")


def _expected_active_links(device: DeviceSnapshot, devices: list[DeviceSnapshot], expect: Expectations) -> int:
    if expect.expected_links_per_gpu is not None:
        return expect.expected_links_per_gpu
    # Peers: the same model on this node. The best-connected one shows what the board wires up. A link whose state
    # could not be read may be wired: counting it keeps unread links from lowering the bar to what could be read
    # (every state unreadable would otherwise expect, and pass, 0 links).
    peers = [d for d in devices if d.vendor == device.vendor and d.name == device.name and d.reachable]
    return max(sum(1 for link in d.links if link.up is not False) for d in peers)


def links_up(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = LINKS_UP
    devices = physical_devices(snapshot)
    if not any(d.links for d in devices) and expect.expected_links_per_gpu is None:
        return [skipped(check_id, None, "no NVLink/XGMI links reported on this node (PCIe-only GPUs)")]

    def judge(device: DeviceSnapshot) -> CheckResult:
        if not device.links and errors_about(device, _LINK_TOPICS):
            return not_available(check_id, device, f"{_fabric(device)} link state", _LINK_TOPICS)
        if not device.links and unsupported_reasons(device, ("xgmi_link_status",)):
            # Not reported is not down: an older gpu_metrics table or a VF (gpudiag/probe/amdsmi/ras.py).
            return not_available(check_id, device, "XGMI link state", ("xgmi_link_status",))
        expected = _expected_active_links(device, devices, expect)
        active = [link.index for link in device.links if link.up]
        down = [link.index for link in device.links if link.up is False]
        unread = [link.index for link in device.links if link.up is None]
        observed = {"active": len(active), "down_links": down, "unknown_links": unread,
                    "total_reported": len(device.links)}
        if len(active) < expected <= len(active) + len(unread):
            return unknown(check_id, device, f"{device.label} has {len(active)} of {expected} {_fabric(device)} "
                                             f"links known active; the state of link(s) "
                                             f"{', '.join(map(str, unread))} could not be read",
                           observed=observed, expected=f"{expected} active links",
                           remediation=f"Read the link state directly: {_link_remediation(device)}")
        if len(active) < expected:
            named = f"; down: {', '.join(map(str, down))}" if down else ""
            return failed(check_id, device,
                          f"{device.label} has {len(active)} of {expected} {_fabric(device)} links active{named}",
                          observed=observed, expected=f"{expected} active links",
                          remediation=(f"Traffic between GPUs falls back to slower paths (or collectives hang). "
                                       f"{_link_remediation(device)}"))
        note = f" ({len(down)} further link(s) report down, as on its peers)" if down else ""
        return passed(check_id, device, f"{device.label}: {len(active)} {_fabric(device)} links active{note}",
                      observed=observed, expected=f"{expected} active links")

    return for_each_device(snapshot, check_id, judge)


def link_errors(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = LINK_ERRORS
    devices = physical_devices(snapshot)
    if not any(d.links or _xgmi_wafl(d) is not None for d in devices):
        return [skipped(check_id, None, "no NVLink/XGMI links reported on this node")]

    def judge(device: DeviceSnapshot) -> CheckResult:
        counters = {link.index: link.error_counters for link in device.links if link.error_counters}
        # AMD reports one XGMI error status per GPU (amdsmi_gpu_xgmi_error_status) instead of per-link counters;
        # on MI300/MI350, where that status is not supported, the XGMI_WAFL RAS block counts XGMI errors.
        flag, wafl = device.xgmi_error_status, _xgmi_wafl(device)
        if "xgmi_wafl" in device.ecc.unreadable_blocks and flag is None:
            return unknown(check_id, device, f"{device.label}: the XGMI_WAFL RAS counts could not be read (RAS not "
                                             f"ready, or a GPU reset in progress)",
                           observed={"unreadable_blocks": device.ecc.unreadable_blocks},
                           expected="XGMI_WAFL RAS counts readable",
                           remediation=f"Re-run once the reset is over; check `{_link_query(device)}` and the kernel "
                                       f"log for RAS events (`dmesg -T | grep -i -e ras -e xgmi`).")
        if not counters and flag is None and wafl is None:
            return not_available(check_id, device, f"{_fabric(device)} error counters", _LINK_TOPICS)
        observed = {**{f"link {i}": c for i, c in counters.items()}, "xgmi_error_status": flag}
        expected = f"every error counter <= {expect.link_error_warn_count}, no XGMI error status"
        if wafl is not None:
            observed["xgmi_wafl"] = wafl
            expected += ", no uncorrectable XGMI_WAFL errors"
            if wafl.get("uncorrected"):
                return _xgmi_uncorrectable(device, observed, expected, wafl["uncorrected"])
        limit = expect.link_error_warn_count
        findings = [f"link {i}: " + ", ".join(f"{n} {name}" for name, n in c.items() if n > limit)
                    for i, c in counters.items() if any(n > limit for n in c.values())]
        if wafl is not None and wafl.get("corrected", 0) > limit:
            findings.append(f"{wafl['corrected']} correctable XGMI_WAFL errors")
        flagged = flag not in (None, "no_errors")
        if flagged:
            findings.append(f"XGMI error status {flag}")
        if findings:
            clear = (f" Clear the XGMI status with `amd-smi reset --xgmierr -g {device.index}` and re-check: an error "
                     f"that returns under load is a real link fault." if flagged else "")
            return warned(check_id, device, f"{device.label} {_fabric(device)} link errors: {'; '.join(findings)}",
                          observed=observed, expected=expected,
                          remediation=(f"Replays/recoveries/CRC errors mean a marginal link: it still works but "
                                       f"retrains and loses bandwidth, and may go down. "
                                       f"{_link_remediation(device)}{clear}"))
        return passed(check_id, device, f"{device.label}: {_fabric(device)} error counters within threshold",
                      observed=observed, expected=expected)

    return for_each_device(snapshot, check_id, judge)


def _xgmi_wafl(device: DeviceSnapshot) -> dict[str, int] | None:
    """The XGMI_WAFL RAS block's counts (AMD), where the part reports them."""
    return device.ecc.by_block.get("xgmi_wafl") if device.vendor == Vendor.AMD else None


def _xgmi_uncorrectable(device: DeviceSnapshot, observed: dict, expected: str, count: int) -> CheckResult:
    # An uncorrectable XGMI error lost data between GPUs of the hive; amdgpu answers it with a (hive) reset, and the
    # link retrains at boot: reboot, then re-check; recurring errors on the same link are a baseboard/OAM fault.
    result = failed(LINK_ERRORS, device, f"{device.label}: {count} uncorrectable XGMI error(s) (XGMI_WAFL RAS block) "
                                         f"since the driver loaded",
                    observed=observed, expected=expected,
                    remediation=(f"Data crossing XGMI was lost: drain the node. {_link_remediation(device)} Confirm "
                                 f"with `amd-smi metric --ecc-blocks -g {device.index}` (XGMI_WAFL) and the kernel "
                                 f"log."))
    return with_verdict(result, "reboot", "GPUDIAG-FABRIC-XGMI-UNCORRECTABLE")


_FABRIC_PATHS = ("nvlink", "xgmi")
_P2P_REMEDIATION = {
    "nvlink": ("Check `nvidia-smi topo -p2p rwn` and the NVLink state of both GPUs (topology.links_up); on NVSwitch "
               "systems nvidia-fabricmanager must be running; a 'disabled_by_regkey' status comes from NVreg_* "
               "module options."),
    "xgmi": ("Check `amd-smi topology` and the XGMI links of both GPUs (topology.links_up); reboot so that the XGMI "
             "hive trains again."),
}


def _pair_failures(peer: PeerLink) -> dict[str, str]:
    statuses = {"read": peer.p2p_read, "write": peer.p2p_write, "nvlink": peer.p2p_nvlink}
    return {kind: status for kind, status in statuses.items() if status is not None and status != "ok"}


def p2p(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = P2P
    if not snapshot.peers:
        return [skipped(check_id, None, "no GPU pairs reported (fewer than two GPUs, or no peer probe)")]
    results: list[CheckResult] = []
    for peer in snapshot.peers:
        failures = _pair_failures(peer)
        if peer.path not in _FABRIC_PATHS or not failures:
            continue
        fabric = "NVLink" if peer.path == "nvlink" else "XGMI"
        results.append(failed(
            check_id, None, f"GPU {peer.gpu_a} ↔ GPU {peer.gpu_b} are joined by {fabric} but P2P is not ok: "
                            + ", ".join(f"{k} {v}" for k, v in failures.items()),
            observed={"gpu_a": peer.gpu_a, "gpu_b": peer.gpu_b, "path": peer.path, **failures},
            expected=f"P2P ok over {fabric}",
            remediation=_P2P_REMEDIATION[peer.path],
        ))
    if not results:
        fabric_pairs = sum(1 for p in snapshot.peers if p.path in _FABRIC_PATHS)
        other = Counter(p.path for p in snapshot.peers if p.path not in _FABRIC_PATHS)
        return [passed(check_id, None, f"P2P ok on all {fabric_pairs} NVLink/XGMI pair(s)",
                       observed={"fabric_pairs": fabric_pairs, "other_paths": dict(other)},
                       expected="P2P ok over NVLink/XGMI")]
    return results


def _numa_of(device: DeviceSnapshot, pci: PciGpu | None) -> int | None:
    return device.numa_node if device.numa_node is not None else (pci.numa_node if pci else None)


def numa(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = NUMA
    nodes = snapshot.host.numa_nodes

    def judge(device: DeviceSnapshot) -> CheckResult:
        node = _numa_of(device, snapshot.pci_gpu(device.pci_bus_id))
        observed = {"numa_node": node, "host_numa_nodes": nodes}
        if node is not None:
            return passed(check_id, device, f"{device.label} is on NUMA node {node}", observed=observed)
        if nodes is None or nodes <= 1:
            return passed(check_id, device, f"{device.label}: single NUMA node host, placement does not matter",
                          observed=observed)
        return warned(check_id, device, f"{device.label} has no NUMA affinity on a {nodes}-node host",
                      observed=observed, expected="a NUMA node for the GPU",
                      remediation=(f"The firmware does not tell the kernel which socket the GPU hangs off (no _PXM "
                                   f"for its root port), so CPU and memory cannot be placed near it and host<->GPU "
                                   f"copies may cross sockets. Enable NUMA / ACPI SRAT reporting in the BIOS (on AMD "
                                   f"EPYC keep NPS and 'ACPI SRAT L3 Cache As NUMA Domain' consistent) and update the "
                                   f"BIOS. Confirm with `cat /sys/bus/pci/devices/{device.pci_bus_id}/numa_node` "
                                   f"(-1 = none) and `nvidia-smi topo -m` / `amd-smi topology`."))

    return for_each_device(snapshot, check_id, judge)


CHECKS = (
    Check(LINKS_UP, links_up, "each GPU has as many NVLink/XGMI links up as its peers (or as expected)"),
    Check(LINK_ERRORS, link_errors, "NVLink/XGMI error counters below threshold"),
    Check(P2P, p2p, "P2P works between GPUs joined by NVLink/XGMI"),
    Check(NUMA, numa, "each GPU has a NUMA node on multi-socket hosts"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "topology.links_up": {F: ("reset", "GPUDIAG-FABRIC-LINK-DOWN")},
    "topology.link_errors": {W: ("watch", "GPUDIAG-FABRIC-LINK-ERRORS")},
    "topology.p2p": {F: ("drain", "GPUDIAG-FABRIC-P2P")},
    "topology.numa": {W: ("watch", "GPUDIAG-TOPOLOGY-NO-NUMA")},
    # topology.fabric and driver.recovery_action set their verdicts per finding (checks/fabric.py, recovery.py).
    "topology.fabric": {F: ("drain", "GPUDIAG-FABRIC-NOT-READY"), W: ("watch", "GPUDIAG-FABRIC-SETTING-UP")},
    # A GPU whose NIC is not below its PCIe switch sends its RDMA through the root complex (checks/network/affinity.py).
    "topology.gpu_nic_affinity": {F: ("drain", "GPUDIAG-TOPOLOGY-GPU-NIC-AFFINITY"),
                                  W: ("watch", "GPUDIAG-TOPOLOGY-GPU-NIC-AFFINITY"),
                                  U: ("watch", "GPUDIAG-NETWORK-UNREADABLE")},
}
_REFERENCE = {
    "topology.links_up": (
        "NVLink / XGMI link states per GPU, against its peers or the profile",
        "Links down: drain and reset the GPU; if they stay down, reseat the GPU or baseboard and check the NVSwitch "
        "or XGMI bridges; persistent failures are hardware."),
    "topology.link_errors": (
        "NVLink / XGMI error counters (CRC, replay, recovery)",
        "A link with rising errors is marginal: watch it, and reseat or replace the part if errors keep growing."),
    "topology.p2p": (
        "the P2P status the library reports between GPUs joined by NVLink / XGMI",
        "P2P off between linked GPUs: check the IOMMU (host.iommu), ACS settings in the BIOS and the links."),
    "topology.numa": (
        "each GPU's NUMA node (sysfs numa_node) on multi-socket hosts",
        "A GPU without a NUMA node on a multi-socket host: enable NUMA / SRAT in the BIOS."),
    "topology.fabric": (
        "NVML GPU fabric info: the fabric manager's set-up state and health (NVIDIA HGX)",
        "Start or restart nvidia-fabricmanager (its version must match the driver) and check the NVSwitches."),
    "topology.gpu_nic_affinity": (
        "each GPU's nearest fabric NIC in the PCI tree (nvidia-smi topo -m's PIX/PXB/PHB/NODE/SYS), or its "
        "gpu_nic_pairs NIC",
        "A GPU without a NIC below its switch: check that the NIC is seated in the slot the board's design gives that "
        "GPU and that its driver is loaded (a missing NIC is network.nics'); the pairing in the profile may be wrong. "
        "`nvidia-smi topo -m` (`rocm-smi --showtopo`) shows the GPU's distance to each NIC."),
}
_SETTINGS = {
    "topology.links_up": ("expected_links_per_gpu",),
    "topology.link_errors": ("link_error_warn_count",),
    "topology.fabric": ("fabric_setup_grace_seconds",),
    "topology.gpu_nic_affinity": ("nic_pci_ids", "expected_nics", "gpu_nic_affinity", "gpu_nic_pairs"),
}
FAMILY = Family(
    "topology", order=70, checks=CHECKS + fabric.CHECKS + network_affinity.TOPOLOGY_CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
    probe_parts={"peers": ("topology.p2p",), "link_errors": ("topology.link_errors",),
                 "network": ("topology.gpu_nic_affinity",)},
)
