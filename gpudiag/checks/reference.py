"""What each check reads and, in short, what an operator does about a finding: the part of the check reference
(docs/reference/checks.md, written by tools/gen_docs.py) that the registry's one-line summary and the verdict table
do not say. The result itself carries the full remediation for the case at hand (which GPU, which slot, which
command); this is the headline. tests/test_docs_reference.py fails when a check has no entry here.

Data only: nothing on the check path imports this module.
"""

from __future__ import annotations

# check ID -> (what it reads, what to do about a finding). The profile settings each check judges with are in SETTINGS.
REFERENCE: dict[str, tuple[str, str]] = {
    # -- driver --------------------------------------------------------------------------------------------------
    "driver.module_loaded": (
        "/sys/module/nvidia, /sys/module/amdgpu; the GPUs on the PCI bus (/sys/bus/pci/devices)",
        "Load the driver (`modprobe nvidia` / `modprobe amdgpu`); if it refuses, `dmesg` says why (a kernel upgrade "
        "without the DKMS module, Secure Boot signing, nouveau holding the GPU)."),
    "driver.device_bound": (
        "each GPU function's driver link in sysfs (/sys/bus/pci/devices/*/driver)",
        "Bind the GPU to its vendor driver: blacklist nouveau, unbind vfio-pci where the GPU is not meant for a VM, "
        "and read `lspci -k` and `dmesg` for why the driver did not claim it."),
    "driver.library": (
        "whether NVML (libnvidia-ml, through nvidia-ml-py) or amdsmi (libamd_smi.so) loads and initialises",
        "Install the management library of the running driver (NVIDIA: the driver's libnvidia-ml; AMD: ROCm's "
        "amd-smi-lib and its Python wrapper) and check device permissions; without amdsmi, AMD falls back to sysfs."),
    "driver.version_consistent": (
        "the kernel module's version (/sys/module/*/version, /proc/driver/nvidia/version) and the library's",
        "The driver was upgraded without a reboot (or two installs are mixed): reboot, or reload the kernel module."),
    "driver.version": (
        "the driver version the library or module reports",
        "Install the driver version the profile names (the fleet's validated release)."),
    "driver.recovery_action": (
        "NVML's GPU recovery action (R550+ drivers; what Xid 154 announces)",
        "Do what the driver asks before using the GPU again: reset the GPU, reboot the node, or drain P2P traffic."),
    "driver.gpu_metrics_version": (
        "the gpu_metrics table version the amdgpu driver writes and the one amdsmi decodes (AMD)",
        "Install the amd-smi-lib release that matches the amdgpu driver, so that metrics are decoded, not guessed."),
    # -- inventory -----------------------------------------------------------------------------------------------
    "inventory.gpus_visible": (
        "the GPUs on the PCI bus against those the vendor library enumerates and that answer it",
        "A GPU that fell off the bus or stopped answering: confirm with nvidia-smi / amd-smi and the kernel log, reset "
        "the GPU, power-cycle the node if that fails, reseat it; one that drops again is an RMA candidate."),
    "inventory.gpu_count": (
        "the number of GPUs on the PCI bus and enumerated",
        "Fewer GPUs than the node should have: a GPU, riser, cable or baseboard is missing or dead; check `lspci`, "
        "the BMC's inventory and the kernel log, then reseat or replace."),
    "inventory.gpu_model": (
        "each GPU's model name",
        "The node carries other GPUs than its profile describes: check the profile and the node's build."),
    "inventory.partition_mode": (
        "AMD compute and memory partition modes, NVIDIA MIG mode",
        "Set the profile's partition mode (`amd-smi set --compute-partition/--memory-partition`, `nvidia-smi -mig`) "
        "and reset or reload as the vendor requires."),
    "inventory.partitions": (
        "the partitions (DRM nodes) a partitioned AMD GPU shows against what its compute mode implies",
        "A partition held by another driver or process is missing: stop the holder and reload amdgpu, or reboot."),
    # -- PCIe ------------------------------------------------------------------------------------------------------
    "pcie.link_generation": (
        "current and maximum link speed of the GPU and its slot (library, sysfs current/max_link_speed), the "
        "P-state and pp_dpm_pcie, and at --level 2 the link under load",
        "Reseat the GPU and its riser or cable, set the slot's BIOS link speed to Auto/the GPU's generation, check "
        "riser and retimer ratings and firmware; confirm under load (`gpudiag check --level 2`)."),
    "pcie.link_width": (
        "current and maximum link width of the GPU and its slot",
        "A link with fewer lanes than it trained for: reseat the GPU and riser or cable, check the slot's "
        "bifurcation setting in the BIOS; swap slots to tell a bad slot from a bad GPU."),
    "pcie.replay_errors": (
        "the PCIe replay counter (NVML) since the driver loaded",
        "A marginal link (riser, retimer, connector): watch the rate, reseat or replace the riser or cable."),
    "pcie.aer": (
        "the AER counters of the GPU's function in sysfs (aer_dev_fatal, aer_dev_nonfatal, aer_dev_correctable)",
        "Uncorrectable errors: drain, reseat the GPU and riser, update BIOS and retimer firmware; a stream of "
        "correctable errors marks a marginal link to watch."),
    "pcie.link_recovery": (
        "AMD gpu_metrics PCIe L0-to-Recovery and NAK counters since the driver loaded",
        "A link that keeps dropping into Recovery has a signal-integrity fault: reseat or replace the riser, "
        "retimer or cable, update the retimer firmware."),
    # -- ECC -------------------------------------------------------------------------------------------------------
    "ecc.mode": (
        "ECC mode, current and pending (NVML; amdsmi / sysfs RAS features)",
        "Enable ECC (`nvidia-smi -e 1`, amdgpu.ras_enable) and reset the GPU so that a pending change takes effect."),
    "ecc.uncorrected": (
        "uncorrected ECC error counters, volatile (since driver load) and aggregate (lifetime)",
        "Uncorrected errors since the driver loaded: drain and reset the GPU (a row remap or page retirement follows); "
        "lifetime errors only: watch for new ones."),
    "ecc.sram": (
        "NVIDIA SRAM ECC counters and the driver's SRAM threshold-exceeded flag",
        "The SRAM threshold is an RMA criterion: drain the GPU and open an RMA with the field-diagnostic log."),
    "ecc.deferred": (
        "AMD deferred (poisoned) error counts per RAS block",
        "Poisoned data was consumed later: reset the GPU and watch the bad-page count."),
    # -- memory ----------------------------------------------------------------------------------------------------
    "memory.row_remap_pending": (
        "NVML row-remapping info: a remap waiting for a reset (Ampere and later)",
        "Drain the GPU and reset it (`nvidia-smi -r`) so that the remap takes effect."),
    "memory.row_remap_failure": (
        "NVML row-remapping failure flag and the banks' spare-row histogram",
        "A failed remap is an RMA criterion: drain and RMA the GPU. No spare rows left: plan the replacement."),
    "memory.unrepairable": (
        "the driver's unrepairable-memory flag (NVIDIA)",
        "The memory cannot be repaired in the field: drain and RMA the GPU."),
    "memory.retired_pages": (
        "NVML retired pages by cause and the pending flag (pre-Ampere)",
        "Reset the GPU for a pending retirement; at the fail count the GPU meets NVIDIA's RMA criterion."),
    "memory.bad_pages": (
        "AMD bad pages by state and the device's bad_page_threshold",
        "Near the threshold: plan the replacement; at it, the GPU is an RMA candidate (amdgpu stops reserving)."),
    # -- thermal ---------------------------------------------------------------------------------------------------
    "thermal.temperature": (
        "each temperature sensor and its slowdown / shutdown / maximum-operating thresholds",
        "Check the node's airflow: fans, blanking panels, inlet temperature, a blocked heatsink or cold plate."),
    "thermal.throttle": (
        "the active clock-throttle reasons (hardware and software thermal slowdown)",
        "Hardware slowdown: drain and fix cooling (or a failing sensor); software slowdown: watch the temperature."),
    # -- power -----------------------------------------------------------------------------------------------------
    "power.brake": (
        "the hardware power-brake throttle reason (an external signal from the chassis or PSU)",
        "The chassis asserts the power brake: check the PSUs, the power budget and the BMC's event log."),
    "power.limit": (
        "the enforced and default power limits",
        "Restore the limit (`nvidia-smi -pl`, `amd-smi set --power-cap`) or find who capped it (a BMC or DCGM policy)."),
    "power.draw": (
        "power draw against the enforced limit",
        "The controller is not holding the limit, or the sensor is wrong: compare with the BMC's reading."),
    # -- topology --------------------------------------------------------------------------------------------------
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
    # -- firmware --------------------------------------------------------------------------------------------------
    "firmware.vbios_consistent": (
        "each GPU's VBIOS version, grouped by model",
        "Flash the GPUs of one model to the same VBIOS (the vendor's or OEM's firmware update)."),
    "firmware.versions_consistent": (
        "each GPU's InfoROM / firmware component versions, grouped by model",
        "Bring the firmware components to one version with the OEM's firmware update."),
    # -- kernel log ------------------------------------------------------------------------------------------------
    "kernel_log.xid": (
        "NVIDIA Xid lines in the kernel log (/dev/kmsg or --kernel-log; every saved format, docs/kernel-log-formats.md), "
        "judged by the Xid catalog and what the line says (Xid 144-150 Fatal/Nonfatal, Xid 154's new action); the "
        "driver's fallen-off-the-bus, NVLink training and RmInitAdapter records; earlier boots' faults",
        "Follow the Xid's resolution bucket (the result names it): restart the application, reset the GPU, reboot, "
        "or RMA; confirm with `dmesg -T | grep -i xid`."),
    "kernel_log.sxid": (
        "NVSwitch SXid lines in the kernel log (`nvidia-nvswitchN: SXid (PCI:…): NNNNN, Fatal|Non-fatal, …`), judged by "
        "the line's own word and NVIDIA's Fabric Manager SXid tables",
        "A fatal SXid: drain the node and reboot it (the NVSwitches and GPUs must be reset together); an always-fatal "
        "one or one that recurs after reboots: hardware inspection of the baseboard. Non-fatal: watch."),
    "kernel_log.amdgpu_errors": (
        "amdgpu lines in the kernel log: ring timeouts, resets, RAS errors, page faults, slot loss",
        "A failed reset or uncorrectable RAS error: drain, reset the GPU or reboot; ring timeouts and faults: "
        "find the job that caused them, and watch."),
    # -- host ------------------------------------------------------------------------------------------------------
    "host.persistence_mode": (
        "NVIDIA persistence mode per GPU",
        "Run nvidia-persistenced (`systemctl enable --now nvidia-persistenced`)."),
    "host.iommu": (
        "the IOMMU group type of each GPU (/sys/kernel/iommu_groups/*/type)",
        "Boot with `iommu=pt` (or the profile's mode) so that P2P and GPUDirect are not translated."),
    "host.large_bar": (
        "each GPU's BAR sizes against its memory size (sysfs resource)",
        "Enable Above 4G Decoding and Resizable BAR in the BIOS."),
    "host.kernel_modules": (
        "/proc/modules",
        "Load the modules the profile requires (e.g. nvidia_peermem for GPUDirect RDMA) and make them persistent."),
    # -- workload --------------------------------------------------------------------------------------------------
    "workload.processes": (
        "the processes on each GPU (library) with their user and CPU use (/proc)",
        "Nothing: it lists who is on the GPU."),
    "workload.cpu_starved": (
        "GPU utilisation and the busy share of the host CPUs local to it",
        "The input pipeline cannot keep the GPU busy: look at data loading, CPU pinning and the job's NUMA binding."),
    "workload.leaked_memory": (
        "GPU memory in use against the processes on the GPU",
        "Memory held with no process: a zombie or a container outside this PID namespace; find it or reset the GPU."),
    # -- active (--level 2) ----------------------------------------------------------------------------------------
    "active.pcie_h2d_bandwidth": (
        "the host-to-device copy bandwidth the load test measured, against the link's generation and width",
        "Low bandwidth on a link that reports full speed: check the link under load, NUMA placement and the riser."),
    "active.pcie_d2h_bandwidth": (
        "the device-to-host copy bandwidth the load test measured, against the link's generation and width",
        "As for host-to-device: the link under load, NUMA placement, the riser."),
    "active.p2p_bandwidth": (
        "GPU-to-GPU copy bandwidth for every pair, against what NVLink / XGMI carries",
        "A slow pair: check its links (topology.links_up, link_errors), the fabric manager, and the IOMMU."),
    "active.memtest": (
        "the memory test's mismatched words and the ECC counters before and after",
        "Mismatches or new ECC errors: drain the GPU, reset it and test again; repeatable errors are an RMA case."),
    "active.hbm_bandwidth": (
        "the device-to-device copy bandwidth of each GPU's HBM, against the part's nominal bandwidth and its siblings'",
        "Slow HBM: check memory clocks and throttling under load, compare with a sibling; a repeatable straggler is RMA."),
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
    # -- baseline (--baseline) -------------------------------------------------------------------------------------
    "baseline.inventory": (
        "GPU vendor, count, bus IDs and models against the golden baseline",
        "A GPU missing or different from the golden node: check the build, the slots, and `lspci`."),
    "baseline.pcie": (
        "GPU and slot maximum PCIe generation and width against the baseline",
        "The GPU or slot now supports less than on the golden node: a riser or retimer of another rating, a BIOS "
        "setting, or another board revision."),
    "baseline.numa": (
        "each GPU's NUMA node against the baseline",
        "GPUs on other sockets than on the golden node: check the slots and the BIOS NUMA settings."),
    "baseline.fabric": (
        "NVLink / XGMI links per GPU and the GPU peer paths against the baseline",
        "Links or peer paths differ from the golden node: check the bridges, the NVSwitches and the fabric manager."),
    "baseline.firmware": (
        "each GPU's VBIOS and firmware versions against the baseline",
        "Flash the golden node's firmware versions."),
    "baseline.driver": (
        "driver versions against the baseline",
        "Install the golden node's driver version."),
    "baseline.partition": (
        "each GPU's partition modes (AMD compute/memory, NVIDIA MIG) against the baseline",
        "Set the golden node's partition mode (see inventory.partition_mode)."),
}

# check ID -> the Expectations fields (profile keys, `-p KEY=VALUE`) the check judges with; a check not listed has
# none. tests/test_docs_reference.py checks that each is a real field and that every field but `baseline` is here.
SETTINGS: dict[str, tuple[str, ...]] = {
    "driver.version": ("expected_driver_version", "min_driver_version"),
    "inventory.gpu_count": ("expected_gpu_count",),
    "inventory.gpu_model": ("expected_gpu_model",),
    "inventory.partition_mode": ("expected_compute_partition", "expected_memory_partition", "expected_mig_enabled"),
    "pcie.link_generation": ("expected_pcie_generation",),
    "pcie.link_width": ("expected_pcie_width",),
    "pcie.replay_errors": ("pcie_replay_warn_count",),
    "pcie.aer": ("aer_correctable_warn_count",),
    "pcie.link_recovery": ("pcie_recovery_warn_count", "pcie_recovery_fail_count_per_day", "pcie_replay_warn_count"),
    "ecc.mode": ("expected_ecc_enabled",),
    "memory.retired_pages": ("retired_pages_warn_count", "retired_pages_fail_count"),
    "memory.bad_pages": ("bad_pages_warn_fraction", "max_bad_pages"),
    "thermal.temperature": ("thermal_warn_margin_celsius",),
    "power.limit": ("expected_power_limit_watts", "power_limit_tolerance_watts", "power_limit_warn_ratio"),
    "power.draw": ("power_over_limit_warn_ratio",),
    "topology.links_up": ("expected_links_per_gpu",),
    "topology.link_errors": ("link_error_warn_count",),
    "topology.fabric": ("fabric_setup_grace_seconds",),
    "kernel_log.xid": ("xid_fail_codes", "xid_warn_codes", "xid_ignore_codes", "kernel_log_window_seconds",
                       "kernel_log_repeat_boots"),
    "kernel_log.sxid": ("kernel_log_window_seconds", "kernel_log_repeat_boots"),
    "kernel_log.amdgpu_errors": ("amdgpu_fail_kinds", "amdgpu_warn_kinds", "amdgpu_ignore_kinds",
                                 "kernel_log_window_seconds"),
    "host.persistence_mode": ("persistence_mode_required",),
    "host.iommu": ("expected_iommu_mode",),
    "host.large_bar": ("large_bar_required",),
    "host.kernel_modules": ("required_kernel_modules",),
    "workload.cpu_starved": ("gpu_idle_percent", "host_cpu_busy_percent"),
    "workload.leaked_memory": ("leaked_memory_warn_bytes",),
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
