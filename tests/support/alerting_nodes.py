"""Single-fault nodes for the alerting test (tests/e2e/test_alerting.py): a healthy two-GPU node of either vendor (the
fake HGX H200 of tests/support/fakes/fake_nvml.py, the fake MI300X of tests/support/fakes/amd_node.py) with one fault on
GPU 1 — the faults the tests' fakes model, each a knob those fakes already have — and the alert the shipped rules must
page it with. Healthy nodes of both vendors page nothing.

Also a runnable script: `gpudiag serve` over one such node, as a process of its own (each vendor library's fake is
process-wide state):

    python -m tests.support.alerting_nodes SCENARIO ROOT -- <serve arguments>

A fault that arrives while the exporter watches (`live`) is applied by a thread once NVML's event stream is
registered and `LIVE_DELAY_SECONDS` later, so that the node is first seen healthy.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pynvml

from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes import amd_node
from tests.support.fakes.amd_node import BLOCK_UMC, FakeAmdNode, mi300x_node
from tests.support.fakes.fake_nvml import FakeNode
from tests.support.sysfs_tree import SysfsTree

LIVE_DELAY_SECONDS = 4.0
NVIDIA_GPU1 = "0000:3b:00.0"  # FakeNode.hgx_h200's second GPU
AMD_GPU1 = "0000:26:00.0"  # mi300x_node's second OAM
NVIDIA_GPUS, AMD_GPUS = ("0000:19:00.0", NVIDIA_GPU1), ("0000:05:00.0", AMD_GPU1)
# A GPU reset as amdgpu logs it (tests/probe/amdsmi/test_end_to_end.py RESET_LOG, here as kmsg records on GPU 1).
AMD_RESET = ("4,20,8123456789,-;amdgpu 0000:26:00.0: amdgpu: GPU reset begin!",
             "4,21,8125012345,-;amdgpu 0000:26:00.0: amdgpu: GPU reset(2) succeeded!")


@dataclass(frozen=True)
class Scenario:
    name: str
    vendor: str  # "nvidia" | "amd"
    alert: Optional[str]  # the fault's own alert; None: a healthy node, nothing may fire
    severity: str = "critical"
    gpu_labels: bool = True  # the alert names GPU 1 (index and bus ID); False: a node-level alert
    fault: Optional[Callable] = None  # (node): the node's own fault, before its tree is written (the tree shows it)
    host: Optional[Callable] = None  # (tree): what the host shows besides (a kernel-log line, an AER file)
    live: Optional[Callable] = None  # (node, tree, lib) once the exporter watches
    # The series whose first sample is when the fault became visible (default: the first complete collection).
    evidence: str = "gpudiag_last_collection_timestamp_seconds"
    serve_args: tuple[str, ...] = ()  # besides the test's own (a profile's expectations)
    fabric: bool = False  # the fake HGX H200 with its eight ConnectX-7 (tests/support/fabric_nodes.py)
    # One page and no more for this fault (issue 36 item 2): the alert and the labels that name its device.
    pages_once: Optional[dict[str, str]] = None

    @property
    def bus_id(self) -> str:
        return NVIDIA_GPU1 if self.vendor == "nvidia" else AMD_GPU1


FABRIC_NIC, FABRIC_NIC_BUS = "mlx5_4", "0000:3b:00.0"  # rdma_tree.hgx_h100_ib's fifth ConnectX-7, port 1


def _gpu1(apply: Callable) -> Callable:
    return lambda node: apply(node.gpus[1])


def _nvml(name: str, value: object) -> Callable:
    """Set GPU 1's attribute `name` (`health.x`: of its driver-health answers) to `value`."""

    def apply(gpu) -> None:
        target, attribute = (gpu.health, name[7:]) if name.startswith("health.") else (gpu, name)
        setattr(target, attribute, value)

    return _gpu1(apply)


def _ecc(gpu) -> None:
    gpu.ecc_volatile_uncorrected = gpu.ecc_aggregate_uncorrected = 2


def _retired_pending(gpu) -> None:  # a pre-Ampere GPU: page retirement instead of row remapping
    gpu.row_remapping, gpu.retired_pages = False, (0, 1, True)


def _logged(*lines: str) -> Callable:
    return lambda tree: tree.add_kmsg(lines)


def _aer_nonfatal(tree) -> None:
    """One completion timeout on GPU 1's function, in aer_dev_nonfatal's format (drivers/pci/pcie/aer.c: the
    aer_uncorrectable_error_string names with their counts, then TOTAL_ERR_NONFATAL)."""
    counts = {"Undefined": 0, "DLP": 0, "SDES": 0, "TLP": 0, "FCP": 0, "CmpltTO": 1, "CmpltAbrt": 0, "UnxCmplt": 0}
    tree.write(f"sys/bus/pci/devices/{NVIDIA_GPU1}/aer_dev_nonfatal",
               "\n".join([*(f"{name} {count}" for name, count in counts.items()), "TOTAL_ERR_NONFATAL 1"]))


def _xid48_live(node, tree, lib) -> None:
    """A double-bit ECC error while watched: NVML's Xid event, the driver's log line, the DBE counted."""
    from tests.support.fakes.fake_nvml_events import nvml_events

    _ecc(node.gpus[1])
    nvml_events(lib).emit(1, 48)
    tree.add_kmsg([xid_line(3, 90_000_000, NVIDIA_GPU1, 48)])


def _lost_live(node, tree, lib) -> None:
    """GPU 1 falls off the bus while watched: the driver logs Xid 79 (NVML's event and the kernel log), then every
    NVML call about it answers GPU_IS_LOST (the Xid may be seen a collection before the loss, as on a real node)."""
    from tests.support.fakes.fake_nvml_events import nvml_events

    nvml_events(lib).emit(1, 79)
    tree.add_kmsg([xid_line(3, 90_000_000, NVIDIA_GPU1, 79)])
    node.gpus[1].lost = True


def _nic_port_down(tree) -> None:
    """mlx5_4's port 1 without a link (rdma_tree.port_down: State DOWN, Disabled); `tree`: the rdma_tree.Node."""
    from tests.support import rdma_tree

    rdma_tree.port_down(tree, FABRIC_NIC)


def _nic_port_down_live(node, tree, lib) -> None:
    """mlx5_4's port 1 loses its link while watched."""
    _nic_port_down(tree)


def _prochot_hot(gpu) -> None:
    gpu.violations = {"active_prochot_thrm"}
    gpu.temperatures["hotspot"].current = gpu.temperatures["hotspot"].critical - 8


def _screens(gpu1: str, buses: tuple[str, str]) -> Callable:
    """The record `gpudiag screen` keeps (docs/screening.md) under the node's state directory: GPU 0 verified an hour
    ago; GPU 1 `never` verified in the ten days screening has watched it (overdue), or its last screen `failed`
    (one SM computed other bits: silent data corruption)."""
    def write(tree) -> None:
        import time

        from gpudiag.model import SmMismatch
        from gpudiag.model.screen import FAILED, VERIFIED, ScreenGpu, ScreenRun, ScreenState
        from gpudiag.model.screen_file import state_to_json

        now, day = time.time(), 86400.0
        state = ScreenState(every_seconds=7 * day, updated_at=now)
        for index, bus in enumerate(buses):
            gpu = ScreenGpu(bus, index=index, first_seen=now - 10 * day)
            if index == 0 or gpu1 == "failed":
                gpu.record(ScreenRun(bus, now - 3700, now - 3600, VERIFIED, "verified", index=index))
            if index == 1 and gpu1 == "failed":
                gpu.record(ScreenRun(bus, now - 700, now - 600, FAILED, "2 tensor result(s) differed on SM 17",
                                     index=1, launches_verified=50, mismatched_blocks=2,
                                     mismatched_sms=[SmMismatch("SM 17", 17, 2, 1)]))
            state.gpus.append(gpu)
        tree.write("var/lib/gpudiag/screen/state.json", state_to_json(state))

    return write


def _amd(apply: Callable, *args, **kwargs) -> Callable:
    return lambda node: apply(node, 1, *args, **kwargs)


SCENARIOS = [
    Scenario("nvidia-healthy", "nvidia", None),
    Scenario("nvidia-pcie-width-x8", "nvidia", "GpudiagPcieLinkWidthDowngraded",
             fault=_gpu1(lambda g: g.pcie_downtrained(generation=5, width=8))),
    Scenario("nvidia-pcie-gen4-idle", "nvidia", "GpudiagPcieLinkGenerationDowngraded",
             fault=_gpu1(lambda g: g.pcie_downtrained(generation=4, width=16))),
    Scenario("nvidia-thermal-slowdown", "nvidia", "GpudiagThermalSlowdown",
             fault=_gpu1(lambda g: g.thermal_slowdown())),
    Scenario("nvidia-power-brake", "nvidia", "GpudiagPowerBrake", fault=_gpu1(lambda g: g.power_brake())),
    Scenario("nvidia-nvlink-down", "nvidia", "GpudiagNvlinkDown", fault=_gpu1(lambda g: g.nvlink_down(3))),
    Scenario("nvidia-ecc-uncorrected", "nvidia", "GpudiagEccUncorrectedErrors", fault=_gpu1(_ecc)),
    Scenario("nvidia-row-remap-pending", "nvidia", "GpudiagRowRemapPending", fault=_nvml("remap_pending", True)),
    Scenario("nvidia-row-remap-failure", "nvidia", "GpudiagRowRemapFailed", fault=_nvml("remap_failure", True)),
    Scenario("nvidia-retired-pages-pending", "nvidia", "GpudiagRetiredPages", fault=_gpu1(_retired_pending)),
    Scenario("nvidia-pcie-replays", "nvidia", "GpudiagPcieReplayErrors", "warning", fault=_nvml("pcie_replays", 500)),
    Scenario("nvidia-aer-nonfatal", "nvidia", "GpudiagPcieUncorrectableErrors", host=_aer_nonfatal),
    # fallen off the bus: the driver logged Xid 79, NVML answers GPU_IS_LOST even for its bus ID
    Scenario("nvidia-gpu-lost", "nvidia", "GpudiagGpuLost", fault=_nvml("lost", True),
             host=_logged(xid_line(2, 41_000_000, NVIDIA_GPU1, 79))),
    Scenario("nvidia-gpu-hung", "nvidia", "GpudiagGpuDown", fault=_nvml("hang", "nvmlDeviceGetPowerUsage")),
    # issue 36 item 2: a GPU lost while watched paged three times (its Xid 79 first, then GpudiagGpuDown, then
    # GpudiagGpuMissing from the profile's GPU count); it pages once, as the lost GPU
    Scenario("nvidia-gpu-lost-watched", "nvidia", "GpudiagGpuLost", live=_lost_live,
             evidence='gpudiag_gpu_xid_errors_total{code="79"}', serve_args=("-p", "expected_gpu_count=2"),
             pages_once={"alertname": "GpudiagGpuLost", "gpu": "1", "pci_bus_id": NVIDIA_GPU1}),
    # and a fabric NIC's port going down: one page, naming the NIC and port
    Scenario("nvidia-nic-port-down-watched", "nvidia", "GpudiagNicDown", gpu_labels=False, fabric=True,
             live=_nic_port_down_live,
             evidence=f'gpudiag_nic_check_status{{check="network.nics",nic="{FABRIC_NIC}",status="fail"}}',
             pages_once={"alertname": "GpudiagNicDown", "nic": FABRIC_NIC, "port": "1", "pci_bus_id": FABRIC_NIC_BUS}),
    Scenario("nvidia-nic-port-down", "nvidia", "GpudiagNicDown", gpu_labels=False, fabric=True, host=_nic_port_down,
             pages_once={"alertname": "GpudiagNicDown", "nic": FABRIC_NIC, "port": "1", "pci_bus_id": FABRIC_NIC_BUS}),
    Scenario("nvidia-xid48-live", "nvidia", "GpudiagXidCritical", live=_xid48_live,
             evidence='gpudiag_gpu_xid_errors_total{code="48"}'),
    Scenario("nvidia-xid13-logged", "nvidia", "GpudiagXidError", "warning",
             host=_logged(xid_line(2, 41_000_000, NVIDIA_GPU1, 13))),
    Scenario("nvidia-recovery-action", "nvidia", "GpudiagGpuRecoveryActionRequired",
             fault=_nvml("health.recovery_action", pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET)),
    Scenario("nvidia-fabric-failed", "nvidia", "GpudiagFabricNotReady",
             fault=_nvml("health.fabric_status", pynvml.NVML_ERROR_UNKNOWN)),
    Scenario("nvidia-memory-unrepairable", "nvidia", "GpudiagGpuMemoryUnrepairable",
             fault=_nvml("health.unrepairable_memory", 1)),
    Scenario("nvidia-sram-threshold", "nvidia", "GpudiagGpuMemoryUnrepairable",
             fault=_nvml("health.sram", {"bThresholdExceeded": 1})),
    # idle-time screening (gpudiag screen): a GPU kept busy past its period, and a screen that found wrong results
    Scenario("nvidia-screen-overdue", "nvidia", "GpudiagScreeningOverdue", "warning",
             host=_screens("never", NVIDIA_GPUS)),
    Scenario("nvidia-screen-sdc", "nvidia", "GpudiagSilentDataCorruption", host=_screens("failed", NVIDIA_GPUS)),
    Scenario("nvidia-driver-not-loaded", "nvidia", "GpudiagBackendDown", gpu_labels=False,
             fault=lambda node: setattr(node, "init_error", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)),
    Scenario("amd-healthy", "amd", None),
    Scenario("amd-pcie-gen4-slot", "amd", "GpudiagPcieLinkGenerationDowngraded",
             fault=_amd(amd_node.pcie_trained_gen4_on_gen4_board)),
    Scenario("amd-pcie-width-x8", "amd", "GpudiagPcieLinkWidthDowngraded",
             fault=_gpu1(lambda g: setattr(g, "pcie_width", 8))),
    Scenario("amd-ecc-uncorrected", "amd", "GpudiagEccUncorrectedErrors", fault=_amd(amd_node.uncorrectable_ecc)),
    Scenario("amd-ecc-deferred", "amd", "GpudiagEccDeferredErrors", "warning",
             fault=_gpu1(lambda g: g.ecc_counts.__setitem__(BLOCK_UMC, (0, 0, 4)))),
    Scenario("amd-bad-pages-pending", "amd", "GpudiagBadPagesPending", "warning",
             fault=_amd(amd_node.pending_bad_pages)),
    Scenario("amd-bad-pages-near-threshold", "amd", "GpudiagBadPagesThreshold", "warning",
             fault=_amd(amd_node.reserved_bad_pages, 120)),
    Scenario("amd-xgmi-link-down", "amd", "GpudiagNvlinkDown", fault=_amd(amd_node.xgmi_link_down, 3)),
    Scenario("amd-xgmi-uncorrectable", "amd", "GpudiagLinkErrors",
             fault=_amd(amd_node.xgmi_wafl_errors, uncorrected=3)),
    Scenario("amd-hotspot-over-critical", "amd", "GpudiagTemperatureHigh", fault=_amd(amd_node.hotspot_over_critical)),
    # PROCHOT asserted on a hot GPU (its hotspot 8 °C below the slowdown limit): a violation flag on a cool, idle
    # MI300X is a firmware quirk that thermal.throttle excuses (issue 21), this one it does not
    Scenario("amd-prochot", "amd", "GpudiagThermalSlowdown", fault=_gpu1(_prochot_hot)),
    Scenario("amd-pcie-recovery", "amd", "GpudiagPcieLinkRecovery", fault=_amd(amd_node.pcie_recoveries, 500)),
    Scenario("amd-gpu-reset-logged", "amd", "GpudiagKernelGpuError", "warning",
             host=_logged(*AMD_RESET)),
    Scenario("amd-gpu-lost", "amd", "GpudiagGpuLost", fault=_amd(amd_node.lose_gpu)),
    Scenario("amd-screen-overdue", "amd", "GpudiagScreeningOverdue", "warning", host=_screens("never", AMD_GPUS)),
    Scenario("amd-gpu-hung", "amd", "GpudiagGpuDown",
             fault=_gpu1(lambda g: setattr(g, "hang_in", "amdsmi_get_power_info"))),
]
BY_NAME = {s.name: s for s in SCENARIOS}


def node_of(scenario: Scenario):
    """The scenario's node as the fake vendor library serves it (fault applied); no tree."""
    node = FakeNode.hgx_h200(2) if scenario.vendor == "nvidia" else mi300x_node(2)
    if scenario.fault is not None:
        scenario.fault(node)
    return node


def build(scenario: Scenario, root: Path):
    """The scenario's node (fault applied) and its sysfs/procfs tree and kernel log under `root` (a fabric node's
    tree is its rdma_tree.Node, whose .tree is the sysfs tree)."""
    if scenario.fabric:
        from tests.support.fabric_nodes import hgx_h200

        node, tree = hgx_h200(root)
        if scenario.host is not None:
            scenario.host(tree)
        return node, tree
    node = node_of(scenario)
    tree = fake_root(root, node) if scenario.vendor == "nvidia" else amd_tree(root, node)
    if scenario.host is not None:
        scenario.host(tree)
    return node, tree


def amd_tree(root: Path, node: FakeAmdNode) -> SysfsTree:
    from tests.support.fakes.amdgpu_sysfs_tree import add_amdgpu_node

    tree = SysfsTree(root)
    add_amdgpu_node(tree, node)
    tree.add_numa_nodes(2)
    tree.set_kernel_release("6.8.0-45-generic")
    tree.set_cmdline("BOOT_IMAGE=/vmlinuz ro quiet iommu=pt")
    tree.add_kmsg(["6,1,1000,-;Linux version 6.8.0-45-generic",
                   "6,2,9021337,-;amdgpu 0000:05:00.0: amdgpu: SMU is initialized successfully!"])
    # a healthy amdgpu node's device nodes (services.amd_devices reads them once /dev is there): KFD's and one
    # render node per GPU, regular files standing in for the character devices
    tree.write("dev/kfd", "")
    for index in range(len(node.gpus)):
        tree.write(f"dev/dri/renderD{128 + index}", "")
    return tree


def _inject_when_watched(scenario: Scenario, node, tree, lib) -> None:
    from tests.support.fakes.fake_nvml_events import nvml_events

    while 1 not in nvml_events(lib).registered():
        time.sleep(0.1)
    time.sleep(LIVE_DELAY_SECONDS)
    scenario.live(node, tree, lib)


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    (name, root), serve_args = argv[:separator], argv[separator + 1:]
    scenario = BY_NAME[name]
    node, tree = build(scenario, Path(root))
    if scenario.vendor == "nvidia":
        from tests.support.fakes import fake_nvml_events  # noqa: F401 - registers the event symbols with the fake lib
        from tests.support.fakes.fake_nvml import installed
    else:
        from tests.support.fakes.fake_amdsmi import installed
    fake = installed(node)
    lib = fake.__enter__()  # held until the process exits (tests/support/exporter_node.py says why)
    if scenario.live is not None:
        threading.Thread(target=_inject_when_watched, args=(scenario, node, tree, lib), daemon=True).start()
    from gpudiag.cli.app import main as gpudiag_main

    return gpudiag_main(["serve", "--root", str(root), *scenario.serve_args, *serve_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
