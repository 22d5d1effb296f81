from gpudiag.model import ErrorKind, GpuProcess, ProbeError, Status
from tests.support.snapshots import GIB, amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


def test_processes_are_listed():
    results = run(nvidia_h200_node(), "workload.processes")
    result = for_gpu(results, 1)
    assert result.status == Status.PASS
    assert result.observed == [{"pid": 41231, "name": "python3", "user": "train", "kind": "compute",
                                "used_memory_bytes": 60 * GIB}]
    assert "python3[41231] (train)" in result.message
    assert "no process" in for_gpu(run(amd_mi300x_node(), "workload.processes"), 0).message


def test_process_list_unreadable_is_unknown():
    snap = nvidia_h200_node()
    snap.devices[0].processes = None
    denied = ProbeError("nvml.nvmlDeviceGetComputeRunningProcesses", ErrorKind.NO_PERMISSION, "denied")
    snap.devices[0].errors.append(denied)
    assert_actionable(for_gpu(run(snap, "workload.processes"), 0), Status.UNKNOWN)


def _starve(snap, gpu, cpu_percent_local, cpu_percent_elsewhere=5.0):
    device = snap.devices[gpu]
    device.utilization.gpu_percent = 3
    local = set(device.cpu_affinity)
    snap.host.per_cpu_percent = [cpu_percent_local if c in local else cpu_percent_elsewhere
                                 for c in range(len(snap.host.per_cpu_percent))]


def test_idle_gpu_with_saturated_local_cpus_warns():
    snap = nvidia_h200_node()
    _starve(snap, 1, 98.0)
    result = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert_actionable(result, Status.WARN)
    assert result.observed["local_cpu_percent"] == 98.0 and result.observed["local_cpus"][0] == 48
    assert "numactl --cpunodebind=1" in result.remediation and "workers" in result.remediation


def test_saturated_cpus_on_the_other_socket_do_not_count():
    snap = nvidia_h200_node()
    _starve(snap, 1, cpu_percent_local=20.0, cpu_percent_elsewhere=99.0)
    assert for_gpu(run(snap, "workload.cpu_starved"), 1).status == Status.PASS


def test_busy_gpu_or_no_process_is_not_starved():
    snap = nvidia_h200_node()
    snap.host.per_cpu_percent = [100.0] * 96
    assert {r.status for r in run(snap, "workload.cpu_starved")} == {Status.PASS}  # GPUs at 97%
    amd = amd_mi300x_node()  # idle GPUs without processes
    amd.host.per_cpu_percent = [100.0] * 128
    assert {r.status for r in run(amd, "workload.cpu_starved")} == {Status.PASS}


def test_memory_held_with_no_process_warns_and_mentions_containers():
    snap = amd_mi300x_node()
    snap.devices[3].memory.used_bytes = 40 * GIB
    result = for_gpu(run(snap, "workload.leaked_memory"), 3)
    assert_actionable(result, Status.WARN)
    assert "PID namespace" in result.remediation and "fuser -v /dev/kfd" in result.remediation
    assert result.observed["used_bytes"] == 40 * GIB
    snap.devices[3].processes = [GpuProcess(pid=7, kind="compute", used_memory_bytes=40 * GIB)]
    assert for_gpu(run(snap, "workload.leaked_memory"), 3).status == Status.PASS


def test_driver_reserved_memory_is_not_a_leak():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    device.processes = []
    device.memory.used_bytes = 0  # NVML v2: the 615 MiB the driver reserves are reported apart
    assert for_gpu(run(snap, "workload.leaked_memory"), 0).status == Status.PASS
    device.memory.reserved_bytes, device.memory.used_bytes = None, 615 * 1024**2  # v1: folded into `used`
    assert for_gpu(run(snap, "workload.leaked_memory"), 0).status == Status.PASS
    device.memory.used_bytes = 2 * GIB
    assert "nvidia-smi --query-compute-apps" in for_gpu(run(snap, "workload.leaked_memory"), 0).remediation


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py, issue 16) found unpinned.

def test_gpu_utilisation_not_reported_is_skipped_and_unreadable_is_unknown():
    snap = nvidia_h200_node()
    snap.devices[0].utilization.gpu_percent = None
    skipped = for_gpu(run(snap, "workload.cpu_starved"), 0)
    assert skipped.status == Status.SKIP
    assert skipped.message == "GPU utilisation is not supported on GPU 0 (0000:19:00.0) (NVIDIA H200)"
    snap.devices[0].errors.append(ProbeError("nvml.nvmlDeviceGetUtilizationRates", ErrorKind.ERROR, "Unknown"))
    assert_actionable(for_gpu(run(snap, "workload.cpu_starved"), 0), Status.UNKNOWN)


def test_gpu_at_the_idle_threshold_is_busy_one_below_is_judged_idle():
    # Expectations.gpu_idle_percent (10): "GPU >= 10% busy" is not starved.
    snap = nvidia_h200_node()
    _starve(snap, 1, 98.0)
    snap.devices[1].utilization.gpu_percent = 10
    busy = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert busy.status == Status.PASS and busy.message == "GPU 1 (0000:3b:00.0) is busy (10%)"
    snap.devices[1].utilization.gpu_percent = 9
    assert_actionable(for_gpu(run(snap, "workload.cpu_starved"), 1), Status.WARN)


def test_local_cpus_at_the_busy_threshold_warn_just_below_pass():
    # Expectations.host_cpu_busy_percent (90): starved when the local CPUs are not below 90 %.
    snap = nvidia_h200_node()
    _starve(snap, 1, 90.0)
    at = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert_actionable(at, Status.WARN)
    assert at.message == ("GPU 1 (0000:3b:00.0) is near idle (3%) while its local CPUs are 90% busy: the job is "
                          "starved by CPU-side work")
    _starve(snap, 1, 89.9)
    below = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert below.status == Status.PASS
    assert below.message == "GPU 1 (0000:3b:00.0) is near idle (3%) and its local CPUs are not saturated (90%)"


def test_without_per_cpu_load_the_starvation_check_skips():
    snap = nvidia_h200_node()
    _starve(snap, 1, 98.0)
    snap.host.per_cpu_percent = []
    result = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert result.status == Status.SKIP and result.message == "host per-CPU load was not collected"


def test_affine_cpus_beyond_the_load_sample_are_left_out():
    # The affinity mask may name CPUs that the per-CPU sample has no entry for (offline, or hot-added later).
    snap = nvidia_h200_node()
    _starve(snap, 1, 98.0)
    snap.devices[1].cpu_affinity = list(range(48, 97))  # 96 is one past the 96 sampled CPUs (0..95)
    result = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert_actionable(result, Status.WARN)
    assert result.observed["local_cpus"] == list(range(48, 96))


def test_without_gpu_locality_the_whole_host_is_judged():
    snap = nvidia_h200_node()
    _starve(snap, 1, 98.0, cpu_percent_elsewhere=98.0)
    snap.devices[1].cpu_affinity = None
    result = for_gpu(run(snap, "workload.cpu_starved"), 1)
    assert_actionable(result, Status.WARN)
    assert result.message == ("GPU 1 (0000:3b:00.0) is near idle (3%) while the host's CPUs (GPU locality unknown) "
                              "are 98% busy: the job is starved by CPU-side work")
    assert result.observed["local_cpus"] is None


def test_memory_use_or_process_list_not_reported_is_skipped():
    snap = amd_mi300x_node()
    snap.devices[3].memory.used_bytes = None
    snap.devices[4].processes = None
    results = run(snap, "workload.leaked_memory")
    assert for_gpu(results, 3).status == Status.SKIP
    assert for_gpu(results, 3).message == ("GPU memory usage is not supported on GPU 3 (0000:65:00.0) "
                                           "(AMD Instinct MI300X)")
    assert for_gpu(results, 4).status == Status.SKIP
    assert for_gpu(results, 4).message.startswith("process list is not supported on GPU 4 ")


def test_memory_held_at_the_threshold_passes_one_byte_more_warns():
    # Expectations.leaked_memory_warn_bytes (1 GiB): "<= 1073741824 bytes in use with no process".
    snap = amd_mi300x_node()
    snap.devices[3].memory.used_bytes = GIB
    at = for_gpu(run(snap, "workload.leaked_memory"), 3)
    assert at.status == Status.PASS and at.message == "GPU 3 (0000:65:00.0): 1.0 GiB in use by 0 process(es)"
    snap.devices[3].memory.used_bytes = GIB + 1
    above = for_gpu(run(snap, "workload.leaked_memory"), 3)
    assert_actionable(above, Status.WARN)
    assert above.message == "GPU 3 (0000:65:00.0): 1.0 GiB of GPU memory in use but no process is listed"
