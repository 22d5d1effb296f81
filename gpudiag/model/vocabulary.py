"""Names the probe reads by and a node's expectations are written in (gpudiag/expect/profile.py validates a profile
against them), here so that loading a profile imports no probe code (and no psutil)."""

# The kernel modules the host probe looks for (gpudiag/probe/host.py); `required_modules` names some of them.
MODULES_OF_INTEREST = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "amdgpu")

# Every `KernelEvent.kind` the amdgpu log scanner produces (gpudiag/probe/kernel_log/amdgpu.py, which builds the
# same tuple from its patterns: tests/test_layering.py keeps the two equal), for the checks and profiles that name
# them.
AMDGPU_EVENT_KINDS = (
    "ring_timeout_soft_recovered", "ring_timeout", "gpu_reset_succeeded", "gpu_reset_failed", "gpu_reset",
    "gpu_mode1_reset", "vram_lost", "cp_unrecoverable", "qcm_fence_timeout", "mes_unresponsive", "ip_block_hung",
    "ring_reset_failed", "ring_test_failed", "umc_error_address", "ras_fatal_error", "ras_poison_consumed",
    "ras_poison_created", "bad_pages_threshold", "ras_records_exceed_threshold", "bad_pages_near_threshold",
    "ras_table_checksum", "page_fault", "throttled", "init_failed", "smu_unresponsive", "ras_uncorrectable",
    "ras_deferred", "aca_uncorrectable", "aca_deferred", "ring_test_failed_multimedia",
)
