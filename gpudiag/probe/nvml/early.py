"""NVML initialising on a thread of its own while `gpudiag check` imports the model and the checks
(gpudiag/cli/check/direct.py)."""

from __future__ import annotations

import os
import threading
import time

# When this process's early start began, had imported pynvml, had initialised NVML and had opened every GPU
# (time.perf_counter()), for bench/check_vs_nvidia_smi.py's breakdown of a cold check; empty until it ends.
WINDOW: list = []


def start_nvml_init() -> None:
    """Begin NVML's initialisation on a thread of its own while this one imports the model and the checks.

    nvmlInit took 28 ms of a 308 ms cold check on the lab H200
    (tests/fixtures/h200/recorded/profile-direct-check-typer.txt); it is a C call that releases the GIL, so it runs
    beside the imports instead of after them. NVML counts its initialisations: the probe's own nvmlInit
    (gpudiag/probe/nvml/backend.py) then finds the library ready, is still the one whose failure is reported, and is
    still bounded by the probe's deadline; this one is never waited for, and a driver that hangs here hangs only a
    daemon thread. Only where an NVIDIA driver is loaded (/dev/nvidiactl).

    Then it opens each GPU (nvmlDeviceGetHandleByIndex): a process's first handle to a GPU took 6.6 ms on the lab
    H200, its later ones next to nothing (tests/fixtures/h200/recorded/direct-breakdown.txt, collection 1 against 2
    and 3), so the probe's own call finds it open; the handles are the driver's and the same for every caller. Only
    these reads, which change nothing: the probe itself reads everything it reports.
    """
    if not os.path.exists("/dev/nvidiactl"):
        return

    def init() -> None:
        started = imported = initialised = time.perf_counter()
        try:
            import pynvml

            imported = time.perf_counter()
            pynvml.nvmlInit()
            initialised = time.perf_counter()
            for index in range(pynvml.nvmlDeviceGetCount()):
                pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - the probe's own calls report what is wrong
            pass
        WINDOW[:] = [started, imported, initialised, time.perf_counter()]

    threading.Thread(target=init, name="nvml-early-init", daemon=True).start()
