"""A screen worker over the fake runtimes, for the tests: `python -m tests.support.screen_worker REQUEST RESULT`,
configured by the JSON in GPUDIAG_TEST_SCREEN (tests/support/screen.py):

    {"vendor": "nvidia" | "amd",
     "devices": [{"pci_bus_id": "0000:3B:00.0", "total_bytes": ..., "reserved_bytes": ..., "faulty_sms": [3]}, ...],
     "registry": DIR,                 NVIDIA: where its process-list entry goes (LiveProcesses reads it)
     "kfd_root": DIR, "gpu_ids": {bus ID: gpu_id},   AMD: the KFD tree it opens its entry in
     "context_bytes": N,              what its context "holds" on the GPU, shown in the process list
     "budget_cap_bytes": N,           the tests' buffers at most this (the simulation holds real bytes)
     "ignore_stop": bool,             a worker hung in a driver call: SIGTERM does nothing, only SIGKILL ends it
     "start_delay_seconds": s,        before it opens the GPU (a slow start: the JIT of a big module)
     "foreign_pid": bool}             listed under a PID of another namespace (FOREIGN_PID_BASE + its own)

It then runs gpudiag's own worker (gpudiag/active/screen/worker.py) unchanged.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

from gpudiag.active.screen import footprint, worker
from tests.support.fakes.gpu_sim import SimDevice, value
from tests.support.fakes.libamdhip import FakeHip, FakeHiprtc
from tests.support.fakes.libcuda import FakeCuda
from tests.support.screen import CONFIG_ENV, FOREIGN_PID_BASE, kfd_close, kfd_open, register, unregister


def _devices(config: dict) -> list[SimDevice]:
    return [SimDevice(**{k: (set(v) if k == "faulty_sms" else v) for k, v in spec.items()})
            for spec in config["devices"]]


class ListedCuda(FakeCuda):
    """The fake driver, listing this process on a GPU while a context of it exists there (as NVML does)."""

    def __init__(self, devices: list[SimDevice], config: dict):
        super().__init__(devices)
        self.config = config
        self.registry = Path(config["registry"])

    def _alias(self):
        return FOREIGN_PID_BASE + os.getpid() if self.config.get("foreign_pid") else None

    def _show(self, device: int) -> None:
        sim = self.node.devices[device]
        used = self.config.get("context_bytes", 0) + sim.used_bytes
        register(self.registry, sim.pci_bus_id.lower(), os.getpid(), used, self._alias())

    def c_cuDevicePrimaryCtxRetain(self, context, device):
        code = super().c_cuDevicePrimaryCtxRetain(context, device)
        self._show(value(device))
        return code

    def c_cuDevicePrimaryCtxRelease_v2(self, device):
        code = super().c_cuDevicePrimaryCtxRelease_v2(device)
        number = value(device)
        if not self.retained.get(number):
            unregister(self.registry, self.node.devices[number].pci_bus_id.lower(), os.getpid(), self._alias())
        return code

    def c_cuMemAlloc_v2(self, pointer, nbytes):
        code = super().c_cuMemAlloc_v2(pointer, nbytes)
        self._refresh()
        return code

    def _refresh(self) -> None:
        for number, count in self.retained.items():
            if count:
                self._show(number)


class ListedHip(FakeHip):
    """The fake HIP runtime, opening KFD's process entry at hipInit (the runtime opens /dev/kfd there)."""

    def __init__(self, devices: list[SimDevice], config: dict):
        super().__init__(devices)
        self.config = config

    def c_hipInit(self, flags):
        code = super().c_hipInit(flags)
        for device in self.node.devices:
            kfd_open(Path(self.config["kfd_root"]), os.getpid(), self.config["gpu_ids"][device.pci_bus_id.lower()],
                     self.config.get("context_bytes", 0))
        return code


def main(argv: list[str]) -> int:
    config = json.loads(os.environ[CONFIG_ENV])
    if config.get("start_delay_seconds"):
        time.sleep(config["start_delay_seconds"])
    devices = _devices(config)
    if config["vendor"] == "nvidia":
        libraries = {"libcuda.so": ListedCuda(devices, config)}
    else:
        hip = ListedHip(devices, config)
        libraries = {"libamdhip64.so": hip, "libhiprtc.so": FakeHiprtc(hip)}

    def cdll(name, *args, **kwargs):
        for key, library in libraries.items():
            if key in str(name):
                return library
        raise OSError(f"{name}: cannot open shared object file")

    ctypes.CDLL = cdll  # the fakes at the ctypes boundary, as tests/fakes/gpu_sim.patch_cdll does in-process
    cap = config.get("budget_cap_bytes")
    if cap is not None:
        sized = footprint.sized_tests
        worker.sized_tests = lambda tests, budget: sized(tests, min(budget, cap))
        footprint.MIN_TEST_BYTES = min(footprint.MIN_TEST_BYTES, cap // 4)
        footprint.SLACK_BYTES = 0
    if config.get("ignore_stop"):
        worker.STOP_SIGNALS = ()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        return worker.main(argv)
    finally:
        if config["vendor"] == "amd":  # the kernel removes a process's KFD entry when it exits
            kfd_close(Path(config["kfd_root"]), os.getpid())


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
