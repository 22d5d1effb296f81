from gpudiag.model import ErrorKind, GpuProcess, ProbeError, Status
from tests.snapshots import GIB, amd_mi300x_node, assert_actionable, for_gpu, nvidia_h200_node, run


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
