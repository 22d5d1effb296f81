"""Who uses a GPU right now (gpudiag/probe/screening/gpu_users.py): KFD's per-process directories mapped to the GPUs'
PCI functions through the topology nodes, NVML's three process lists, the screen's own process tree, and a PID of
another namespace told apart."""

from __future__ import annotations

import os
import subprocess
import sys

from gpudiag.probe.screening.gpu_users import (KfdUsage, NvmlUsage, kfd_gpu_ids, own_processes, pid_visible,
                                               process_command)
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.screen import FOREIGN_PID_BASE, kfd_close, kfd_open, kfd_tree

MI300X = {"0000:05:00.0": 40123, "0000:26:00.0": 51042, "0001:c6:00.0": 8890}


def test_kfd_gpu_ids_map_to_pci_functions_and_processes_to_their_gpus(tmp_path):
    kfd_tree(tmp_path, MI300X)
    assert kfd_gpu_ids(tmp_path) == {str(gpu_id): bus for bus, gpu_id in MI300X.items()}  # the CPU node is not one
    kfd_open(tmp_path, 4242, 51042, 8 * 2**30)
    kfd_open(tmp_path, 5151, 8890, 1024)
    found = KfdUsage(list(MI300X), tmp_path).read()
    assert found["0000:26:00.0"].pids == [4242] and found["0000:26:00.0"].memory_bytes == {4242: 8 * 2**30}
    assert found["0001:c6:00.0"].pids == [5151] and found["0000:05:00.0"].pids == []
    kfd_close(tmp_path, 4242)
    assert KfdUsage(list(MI300X), tmp_path).read()["0000:26:00.0"].pids == []


def test_an_unreadable_kfd_process_list_is_not_an_empty_one(tmp_path):
    found = KfdUsage(["0000:05:00.0"], tmp_path).read()  # no /sys/class/kfd/kfd/proc at all
    assert found["0000:05:00.0"].pids is None and "proc" in found["0000:05:00.0"].error


def test_nvml_lists_compute_graphics_and_mps_processes_and_a_failing_list_is_unknown():
    node = FakeNode.hgx_h200(2)
    node.gpus[0].compute_processes = [(101, 2**30)]
    node.gpus[0].graphics_processes = [(102, None)]
    node.gpus[0].mps_processes = [(103, 5 * 2**20)]
    with installed(node):
        reader = NvmlUsage(["0000:19:00.0", "0000:3b:00.0"])
        try:
            found = reader.read()
            assert sorted(found["0000:19:00.0"].pids) == [101, 102, 103] and found["0000:3b:00.0"].pids == []
            assert found["0000:19:00.0"].memory_bytes == {101: 2**30, 103: 5 * 2**20}
            node.gpus[1].failures["nvmlDeviceGetComputeRunningProcesses_v3"] = 999  # NVML_ERROR_UNKNOWN
            assert reader.read()["0000:3b:00.0"].pids is None
        finally:
            reader.close()


def test_the_screens_own_processes_are_its_worker_and_the_workers_children():
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                               "time.sleep(30)"])
    try:
        for _ in range(100):
            own = own_processes(parent.pid)
            if len(own) == 2:
                break
            __import__("time").sleep(0.05)
        assert parent.pid in own and len(own) == 2
        assert process_command(parent.pid)[0] == sys.executable
    finally:
        for pid in own_processes(parent.pid):
            os.kill(pid, 9)
        parent.wait()
    assert pid_visible(os.getpid()) and not pid_visible(FOREIGN_PID_BASE + os.getpid())
