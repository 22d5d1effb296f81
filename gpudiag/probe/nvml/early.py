"""NVML initialising on a thread of its own while `gpudiag check` imports the model and the checks
(gpudiag/cli/check/direct.py)."""

from __future__ import annotations

import os
import threading
import time

# When this process's early start began, had loaded the library, had initialised NVML and had opened every GPU
# (time.perf_counter()), for bench/check_vs_nvidia_smi.py's breakdown of a cold check; empty until it ends.
WINDOW: list = []


def start_nvml_init() -> None:
    """Begin NVML's initialisation on a thread of its own while this one imports the probe (and pynvml).

    nvmlInit took 28 ms of a 308 ms cold check on the lab H200
    (tests/fixtures/h200/recorded/profile-direct-check-typer.txt); it is a C call that releases the GIL, so it runs
    beside the imports instead of after them. The thread calls the driver's library itself, through ctypes, the
    library pynvml loads (libnvidia-ml.so.1, by the same name: one copy in the process), so that the driver starts
    before pynvml's 8-30 ms import (lab H100, tests/fixtures/h100/recorded/lab-2026-12-06c/) is done rather than
    after it. NVML counts its initialisations: the probe's own nvmlInit through pynvml
    (gpudiag/probe/nvml/backend.py) then finds the library ready, is still the one whose failure is reported, and is
    still bounded by the probe's deadline; this one is never waited for, and a driver that hangs here hangs only a
    daemon thread. Only where an NVIDIA driver is loaded (/dev/nvidiactl).

    Then it opens each GPU (nvmlDeviceGetHandleByIndex_v2): a process's first handle to a GPU took 6.6 ms on the lab
    H200, its later ones next to nothing (tests/fixtures/h200/recorded/direct-breakdown.txt, collection 1 against 2
    and 3), so the probe's own call finds it open; the handles are the driver's and the same for every caller. Only
    these reads, which change nothing: the probe itself reads everything it reports.
    """
    if not os.path.exists("/dev/nvidiactl"):
        return

    def init() -> None:
        started = loaded = initialised = time.perf_counter()
        try:
            import ctypes

            library = _library()
            loaded = time.perf_counter()
            if library.nvmlInit_v2() == 0:  # NVML_SUCCESS
                initialised = time.perf_counter()
                count = ctypes.c_uint(0)
                if library.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0:
                    handle = ctypes.c_void_p()
                    for index in range(count.value):
                        library.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle))
        except Exception:  # noqa: BLE001 - the probe's own calls report what is wrong (no library, no symbol)
            pass
        WINDOW[:] = [started, loaded, initialised, time.perf_counter()]
        try:
            import pynvml  # noqa: F401 - the probe's next need, imported while its other imports still run
        except ImportError:
            pass  # the probe's own import says so

    threading.Thread(target=init, name="nvml-early-init", daemon=True).start()


def _library():
    """The driver's NVML library, by the name pynvml loads it by on Linux (a test's seam: the fake library)."""
    import ctypes

    return ctypes.CDLL("libnvidia-ml.so.1")
