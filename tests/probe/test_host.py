"""Host probe (sysfs/procfs under a root + psutil) against trees in the kernel's own formats."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from gpudiag.model import ErrorKind, GpuProcess, Vendor
from gpudiag.probe import host
from gpudiag.probe.pci import probe_pci_gpus
from gpudiag.probe.pcie_generation import generation_from_gts_text
from tests.support.paths import FIXTURES
from tests.support.sysfs_tree import IORESOURCE_IO, IORESOURCE_MEM_32, IORESOURCE_MEM_64_PREFETCH, SysfsTree, deny_reads

GPU = "0000:3b:00.0"
H200X2 = FIXTURES / "h200x2" / "root"
GIB = 1 << 30


@pytest.fixture
def tree(tmp_path):
    return SysfsTree(tmp_path)


def only_gpu(tree):
    gpus, errors = probe_pci_gpus(tree.root)
    assert errors == []
    assert len(gpus) == 1
    return gpus[0]


# ---------------------------------------------------------------------------------------------------------------
# PCI GPUs


def test_h200_behind_a_switch_port_reads_every_attribute(tree):
    tree.add_pci_gpu(
        GPU,
        upstream=("0000:3a:00.0", "32.0 GT/s PCIe", 16),
        aer={"correctable": {"RxErr": 2, "BadTLP": 1, "BadDLLP": 0}, "fatal": {"DLP": 0, "MalfTLP": 0}},
        numa_node=1,
        local_cpulist="48-95,144-191",
        iommu_group=27,
        iommu_type="identity",
        bars=[
            # As an H200 shows them (tests/fixtures/h200x2): resource index = BAR register, and a 64-bit BAR
            # takes two registers, so NVIDIA's "BAR1" is line 2 and "BAR3" line 4.
            (0x104002000000, 16 << 20, IORESOURCE_MEM_64_PREFETCH),
            (0, 0, 0),
            (0x100000000000, 256 * GIB, IORESOURCE_MEM_64_PREFETCH),
            (0, 0, 0),
            (0x104000000000, 32 << 20, IORESOURCE_MEM_64_PREFETCH),
            (0x5000, 128, IORESOURCE_IO),  # an I/O-port BAR: not a memory aperture
            (0xA0000000, 512 << 10, IORESOURCE_MEM_32),  # expansion ROM
        ],
    )
    gpu = only_gpu(tree)
    assert gpu.pci_bus_id == GPU
    assert (gpu.vendor, gpu.vendor_id, gpu.device_id, gpu.class_code) == (Vendor.NVIDIA, "0x10de", "0x2335", "0x030200")
    assert gpu.driver == "nvidia"
    assert (gpu.current_link_generation, gpu.current_link_width) == (5, 16)
    assert (gpu.max_link_generation, gpu.max_link_width) == (5, 16)
    assert (gpu.upstream_pci_bus_id, gpu.upstream_max_link_generation, gpu.upstream_max_link_width) == (
        "0000:3a:00.0", 5, 16)
    assert gpu.aer == {
        "correctable": {"RxErr": 2, "BadTLP": 1, "BadDLLP": 0, "TOTAL_ERR_COR": 3},
        "fatal": {"DLP": 0, "MalfTLP": 0, "TOTAL_ERR_FATAL": 0},
    }
    assert (gpu.numa_node, gpu.local_cpulist) == (1, "48-95,144-191")
    assert (gpu.iommu_group, gpu.iommu_domain_type) == (27, "identity")
    assert gpu.bar_sizes_bytes == {0: 16 << 20, 2: 256 * GIB, 4: 32 << 20, 6: 512 << 10}


def test_pre_5_7_kernel_speed_strings_and_a_gen4_slot(tree):
    # Kernels <= 5.6 print "16 GT/s" without the decimal or the "PCIe" suffix.
    tree.add_pci_gpu(GPU, link=("16 GT/s", 16, "32 GT/s", 16), upstream=("0000:3a:00.0", "16 GT/s", 16))
    gpu = only_gpu(tree)
    assert (gpu.current_link_generation, gpu.max_link_generation, gpu.upstream_max_link_generation) == (4, 5, 4)


@pytest.mark.parametrize(
    "speed, generation",
    [
        ("2.5 GT/s PCIe", 1), ("2.5 GT/s", 1), ("5.0 GT/s PCIe", 2), ("5 GT/s", 2), ("8.0 GT/s PCIe", 3),
        ("8 GT/s", 3), ("16.0 GT/s PCIe", 4), ("32.0 GT/s PCIe", 5), ("64.0 GT/s PCIe", 6), ("Unknown", None),
        (None, None),
    ],
)
def test_sysfs_link_speed_strings_map_to_generations(speed, generation):
    assert generation_from_gts_text(speed) == generation


def test_a_link_that_is_down_reads_unknown_speed_and_width_zero(tree):
    tree.add_pci_gpu(GPU, link=("Unknown", 0, "32.0 GT/s PCIe", 16))
    gpu = only_gpu(tree)  # "Unknown" is the kernel's word for a dead link, not a read error
    assert gpu.current_link_generation is None
    assert gpu.current_link_width == 0  # a real observation, kept as 0 (not None)
    assert (gpu.max_link_generation, gpu.max_link_width) == (5, 16)


def test_an_unheard_of_speed_is_none_and_reported(tree):
    tree.add_pci_gpu(GPU, link=("20.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16))
    gpus, errors = probe_pci_gpus(tree.root)
    assert gpus[0].current_link_generation is None
    assert [(e.kind, e.source) for e in errors] == [
        (ErrorKind.ERROR, f"sysfs:/sys/bus/pci/devices/{GPU}/current_link_speed")]


def test_multi_word_aer_names_of_older_kernels(tree):
    # drivers/pci/pcie/aer.c before the short names: "Receiver Error", "RELAY_NUM Rollover", …
    tree.add_pci_gpu(GPU, aer={
        "correctable": {"Receiver Error": 5, "Bad TLP": 0, "RELAY_NUM Rollover": 1, "Replay Timer Timeout": 0},
        "nonfatal": {"Completion Timeout": 2, "Unsupported Request": 0},
    })
    gpu = only_gpu(tree)
    assert gpu.aer["correctable"] == {
        "Receiver Error": 5, "Bad TLP": 0, "RELAY_NUM Rollover": 1, "Replay Timer Timeout": 0, "TOTAL_ERR_COR": 6}
    assert gpu.aer["nonfatal"] == {"Completion Timeout": 2, "Unsupported Request": 0, "TOTAL_ERR_NONFATAL": 2}
    assert "fatal" not in gpu.aer


def test_only_gpu_functions_of_nvidia_and_amd_are_listed(tree):
    tree.add_pci_gpu("0000:c1:00.0", vendor="0x1002", device="0x74a1", class_code="0x120000", driver="amdgpu")
    tree.add_pci_gpu(GPU)
    tree.add_pci_device("0000:3b:00.1", vendor="0x10de", device="0x22e8", class_code="0x040300")  # HDMI audio
    tree.add_pci_device("0000:07:00.0", vendor="0x10de", device="0x22a3", class_code="0x068000")  # NVSwitch
    tree.add_pci_device("0000:18:00.0", vendor="0x15b3", device="0x1021", class_code="0x020700")  # ConnectX
    tree.add_pci_device("0000:00:14.0", vendor="0x1022", device="0x14d8", class_code="0x030000")  # AMD (CPU) VGA
    gpus, errors = probe_pci_gpus(tree.root)
    assert errors == []
    assert [(g.pci_bus_id, g.vendor, g.driver) for g in gpus] == [
        (GPU, Vendor.NVIDIA, "nvidia"), ("0000:c1:00.0", Vendor.AMD, "amdgpu")]


def test_missing_attributes_are_none_not_zero(tree):
    tree.add_pci_device(GPU, vendor="0x10de", device="0x2335", class_code="0x030200")  # unbound, no link files
    gpu = only_gpu(tree)
    assert gpu.driver is None
    assert None is gpu.current_link_generation is gpu.current_link_width is gpu.max_link_width
    assert None is gpu.numa_node is gpu.local_cpulist is gpu.iommu_group is gpu.iommu_domain_type
    assert (gpu.aer, gpu.bar_sizes_bytes) == ({}, {})
    assert gpu.upstream_pci_bus_id is None  # directly on the root complex, as in most VMs


def test_numa_node_minus_one_means_none(tree):
    tree.add_pci_gpu(GPU, numa_node=-1)
    assert only_gpu(tree).numa_node is None


def test_iommu_group_without_a_type_file(tree):
    tree.add_pci_gpu(GPU, iommu_group=3)
    gpu = only_gpu(tree)
    assert (gpu.iommu_group, gpu.iommu_domain_type) == (3, None)


def test_an_unreadable_aer_file_is_a_permission_error_and_the_rest_is_read(tree, monkeypatch):
    tree.add_pci_gpu(GPU, aer={"correctable": {"RxErr": 1}, "fatal": {"DLP": 0}})
    deny_reads(monkeypatch, tree.path(f"sys/bus/pci/devices/{GPU}/aer_dev_correctable"))
    gpus, errors = probe_pci_gpus(tree.root)
    assert gpus[0].aer == {"fatal": {"DLP": 0, "TOTAL_ERR_FATAL": 0}}
    assert gpus[0].current_link_generation == 5
    assert [(e.kind, e.source) for e in errors] == [
        (ErrorKind.NO_PERMISSION, f"sysfs:/sys/bus/pci/devices/{GPU}/aer_dev_correctable")]


def test_an_unlistable_bus_is_an_error_not_an_empty_bus(tree, monkeypatch):
    tree.add_pci_gpu(GPU)
    deny_reads(monkeypatch, tree.path("sys/bus/pci/devices"))
    gpus, errors = probe_pci_gpus(tree.root)
    assert gpus == []
    assert [(e.kind, e.source) for e in errors] == [(ErrorKind.NO_PERMISSION, "sysfs:/sys/bus/pci/devices")]


def test_no_sysfs_at_all_is_no_gpus_and_no_error(tmp_path):
    assert probe_pci_gpus(tmp_path) == ([], [])


def test_recorded_h200_vm_node():
    # tests/fixtures/h200x2: captured by tools/capture_sysfs.sh on the lab's 2x H200 VM. The GPUs sit directly on
    # the root complex (no upstream port), firmware gives no NUMA node, the guest kernel exposes no AER files.
    gpus, errors = probe_pci_gpus(H200X2)
    assert errors == []
    assert [g.pci_bus_id for g in gpus] == ["0000:00:06.0", "0000:00:07.0"]
    for gpu in gpus:
        assert (gpu.vendor, gpu.device_id, gpu.driver) == (Vendor.NVIDIA, "0x2335", "nvidia")
        assert (gpu.current_link_generation, gpu.current_link_width) == (5, 16)
        assert (gpu.max_link_generation, gpu.max_link_width) == (5, 16)
        assert (gpu.upstream_pci_bus_id, gpu.numa_node, gpu.local_cpulist, gpu.aer) == (None, None, "0-31", {})
    assert gpus[0].bar_sizes_bytes == {0: 16 << 20, 2: 256 * GIB, 4: 32 << 20}


# ---------------------------------------------------------------------------------------------------------------
# Host


def full_host(tree):
    tree.set_hostname("gpu-node-07")
    tree.set_kernel_release("5.15.0-105-generic")
    tree.set_cmdline("BOOT_IMAGE=/vmlinuz-5.15.0-105-generic root=UUID=1c2d ro intel_iommu=on iommu=pt quiet")
    tree.set_os_release('NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\n')
    tree.add_module("nvidia", "550.54.15")
    tree.add_module("nvidia_uvm")  # no version file: None, still loaded
    tree.add_module("nvidia_peermem", "550.54.15")
    tree.add_module("mlx5_core", "24.01")  # not of interest
    tree.set_proc_nvidia_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
    )
    tree.add_iommu("dmar0")
    tree.add_numa_nodes(2)


def test_host_reads_kernel_driver_iommu_and_numa(tree):
    full_host(tree)
    info, errors = host.probe_host(tree.root)
    assert errors == []
    assert (info.hostname, info.kernel_release, info.os_name) == ("gpu-node-07", "5.15.0-105-generic",
                                                                   "Ubuntu 22.04.4 LTS")
    assert info.kernel_cmdline.endswith("iommu=pt quiet")
    assert info.iommu_cmdline == {"intel_iommu": "on", "iommu": "pt"}
    assert info.iommu_enabled is True
    assert info.modules_loaded == {"nvidia": "550.54.15", "nvidia_uvm": None, "nvidia_peermem": "550.54.15"}
    assert info.nvidia_proc_version == "550.54.15"
    assert info.numa_nodes == 2


def test_recorded_h200_vm_host():
    info, errors = host.probe_host(H200X2)
    assert errors == []
    assert info.os_name == "Ubuntu 24.04.3 LTS"
    assert info.kernel_release == "6.18.44-fc-v657-gpu"
    assert info.modules_loaded == {"nvidia": "580.159.04", "nvidia_uvm": None}  # the open module, no /sys version
    assert info.nvidia_proc_version == "580.159.04"  # "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 …"
    assert info.iommu_cmdline == {}


def test_open_kernel_module_version_line(tree):
    tree.set_proc_nvidia_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Jul 15 19:42:03 UTC 2025\n"
    )
    assert host.probe_host(tree.root)[0].nvidia_proc_version == "580.65.06"


def test_built_in_amdgpu_counts_as_loaded(tree):
    tree.write("proc/modules", "")
    tree.add_module("amdgpu", builtin=True)  # in-tree: /sys/module/amdgpu without a /proc/modules line or version
    assert host.probe_host(tree.root)[0].modules_loaded == {"amdgpu": None}


@pytest.mark.parametrize(
    "cmdline, expected",
    [
        ("ro quiet", {}),
        ("amd_iommu=on iommu=pt", {"amd_iommu": "on", "iommu": "pt"}),
        ("intel_iommu=on,sm_on intel_iommu=off", {"intel_iommu": "off"}),  # the last one wins
        ("iommu.passthrough=1 noiommu", {}),  # other keys that merely start alike
    ],
)
def test_iommu_cmdline_keys(cmdline, expected):
    assert host.iommu_cmdline(cmdline) == expected


def test_iommu_disabled_versus_unknown(tree):
    tree.path("sys/class/net").mkdir(parents=True)
    assert host.probe_host(tree.root)[0].iommu_enabled is False  # sysfs present, no IOMMU registered
    tree.path("sys/class/iommu").mkdir()
    assert host.probe_host(tree.root)[0].iommu_enabled is False  # class present but empty


def test_an_empty_root_gives_none_for_files_and_live_psutil_figures(tmp_path):
    info, errors = host.probe_host(tmp_path)
    assert errors == []
    assert None is info.hostname is info.kernel_release is info.kernel_cmdline is info.os_name
    assert None is info.nvidia_proc_version is info.iommu_enabled is info.numa_nodes
    assert (info.modules_loaded, info.iommu_cmdline) == ({}, {})
    # psutil describes the machine running the tests, whatever the root
    assert info.cpu_count == psutil.cpu_count()
    assert info.memory_total_bytes == psutil.virtual_memory().total
    assert 0 < info.memory_available_bytes <= info.memory_total_bytes
    assert len(info.load_average) == 3
    assert info.boot_time == psutil.boot_time()


def test_the_live_root_describes_this_machine():
    info, _ = host.probe_host()
    assert info.hostname == socket.gethostname()
    assert info.kernel_release == os.uname().release


def test_an_unreadable_cmdline_is_a_permission_error(tree, monkeypatch):
    full_host(tree)
    deny_reads(monkeypatch, tree.path("proc/cmdline"))
    info, errors = host.probe_host(tree.root)
    assert info.kernel_cmdline is None and info.iommu_cmdline == {}
    assert info.kernel_release == "5.15.0-105-generic"
    assert [(e.kind, e.source) for e in errors] == [(ErrorKind.NO_PERMISSION, "procfs:/proc/cmdline")]


def test_a_failing_psutil_call_is_recorded(tree, monkeypatch):
    def broken():
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(psutil, "virtual_memory", broken)
    info, errors = host.probe_host(tree.root)
    assert info.memory_total_bytes is None and info.memory_available_bytes is None
    assert info.cpu_count == psutil.cpu_count()
    assert [(e.source, e.kind) for e in errors] == [("psutil.virtual_memory", ErrorKind.ERROR)]


# ---------------------------------------------------------------------------------------------------------------
# CPU sampler

CpuTimes = type(psutil.cpu_times())


def times(**fields):
    return CpuTimes(**{name: float(fields.get(name, 0)) for name in CpuTimes._fields})


def script_cpu_times(monkeypatch, samples):
    """Each sample: (host times, [per-cpu times]); each `psutil.cpu_times` call pair consumes one."""
    queue = list(samples)

    def cpu_times(percpu=False):
        host_times, per_cpu = queue[0]
        if percpu:
            queue.pop(0)
            return per_cpu
        return host_times

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)


def test_cpu_sampler_measures_the_window_from_counter_deltas(monkeypatch):
    before = [times(user=100, system=50, idle=850), times(user=10, idle=990)]
    after = [times(user=180, system=70, idle=950), times(user=10, idle=1190)]  # cpu0 50 % busy, cpu1 idle
    script_cpu_times(monkeypatch, [(times(user=110, system=50, idle=1840), before),
                                   (times(user=190, system=70, idle=2140), after)])
    sampler = host.CpuSampler()
    sampler.start()
    assert sampler.finish() == (25.0, [50.0, 0.0])


def test_guest_time_is_not_counted_twice(monkeypatch):
    # Linux counts guest time inside user time too (psutil._cpu_tot_time drops it from the total).
    before = times(user=100, guest=50, idle=100)
    after = times(user=200, guest=100, idle=200)
    script_cpu_times(monkeypatch, [(before, [before]), (after, [after])])
    sampler = host.CpuSampler()
    sampler.start()
    assert sampler.finish() == (50.0, [50.0])


def test_a_window_shorter_than_a_tick_or_without_start_is_not_measured(monkeypatch):
    assert host.CpuSampler().finish() == (None, None)
    same = times(user=1, idle=1)
    script_cpu_times(monkeypatch, [(same, [same]), (same, [same])])
    sampler = host.CpuSampler()
    sampler.start()
    assert sampler.finish() == (None, None)


def test_hot_plugged_cpus_drop_the_per_cpu_figures_only(monkeypatch):
    script_cpu_times(monkeypatch, [(times(user=0, idle=100), [times(idle=100)]),
                                   (times(user=50, idle=150), [times(user=50, idle=50), times(idle=100)])])
    sampler = host.CpuSampler()
    sampler.start()
    assert sampler.finish() == (50.0, None)


def test_cpu_sampler_sees_real_work():
    sampler = host.CpuSampler()
    sampler.start()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn CPU (not sleep) so the window has busy ticks
        pass
    host_percent, per_cpu = sampler.finish()
    assert host_percent > 100 / psutil.cpu_count() / 4  # one busy core out of N, with plenty of slack
    assert len(per_cpu) == psutil.cpu_count() and max(per_cpu) > 25


# ---------------------------------------------------------------------------------------------------------------
# GPU processes


def test_describe_processes_fills_what_psutil_knows():
    me = GpuProcess(pid=os.getpid(), kind="compute", used_memory_bytes=1 << 30)
    host.describe_processes([me])
    assert me.name == psutil.Process().name()
    assert me.user == psutil.Process().username()
    assert me.cpu_percent is not None and me.cpu_percent >= 0
    assert me.used_memory_bytes == 1 << 30  # untouched


def test_a_pid_that_is_not_visible_keeps_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the PID no longer exists (as for a PID from another namespace)
    gone = GpuProcess(pid=child.pid, kind="compute")
    host.describe_processes([gone])
    assert None is gone.name is gone.user is gone.cpu_percent


def test_access_denied_keeps_what_could_be_read(monkeypatch):
    def denied(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "username", denied)
    me = GpuProcess(pid=os.getpid(), kind="compute")
    host.describe_processes([me])
    assert me.user is None
    assert me.name == psutil.Process().name()
    assert me.cpu_percent is not None


def test_amdgpu_link_dpm_levels_and_the_one_in_use(tree):
    # Format of amdgpu's swsmu print_clk_levels for SMU_PCIE ("%d: %s %s %dMhz %s", docs/vendor-api.md §2).
    path = tree.add_pci_gpu("0000:c1:00.0", vendor="0x1002", device="0x74a1", class_code="0x120000",
                            driver="amdgpu")
    (path / "pp_dpm_pcie").write_text("0: 2.5GT/s, x1 619Mhz *\n1: 32.0GT/s, x16 1143Mhz \n")
    gpu = only_gpu(tree)
    assert [(level.generation, level.width) for level in gpu.pcie_dpm_levels] == [(1, 1), (5, 16)]
    assert gpu.pcie_dpm_current == 0


def test_no_link_dpm_file_and_other_drivers_leave_the_levels_empty(tree):
    path = tree.add_pci_gpu(GPU)
    (path / "pp_dpm_pcie").write_text("0: 2.5GT/s, x1 619Mhz *\n")  # read only where amdgpu is bound
    gpu = only_gpu(tree)
    assert (gpu.pcie_dpm_levels, gpu.pcie_dpm_current) == ([], None)
