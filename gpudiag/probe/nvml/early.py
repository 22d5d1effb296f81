"""NVML initialising on a thread of its own while `gpudiag check` imports the model and the checks
(gpudiag/cli/check/direct.py)."""

from __future__ import annotations

import os
import threading


def start_nvml_init() -> None:
    """Begin NVML's initialisation on a thread of its own while this one imports the model and the checks.

    nvmlInit took 28 ms of a 308 ms cold check on the lab H200
    (tests/fixtures/h200/recorded/profile-direct-check-typer.txt); it is a C call that releases the GIL, so it runs
    beside the imports instead of after them. NVML counts its initialisations: the probe's own nvmlInit
    (gpudiag/probe/nvml/backend.py) then finds the library ready, is still the one whose failure is reported, and is
    still bounded by the probe's deadline; this one is never waited for, and a driver that hangs here hangs only a
    daemon thread. Only where an NVIDIA driver is loaded (/dev/nvidiactl).
    """
    if not os.path.exists("/dev/nvidiactl"):
        return

    def init() -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - the probe's own nvmlInit reports what is wrong
            pass

    threading.Thread(target=init, name="nvml-early-init", daemon=True).start()
