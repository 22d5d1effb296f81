"""The services family's profile keys: which host services a node of this kind runs (gpudiag/checks/services.py).

"auto" derives the expectation from what the node's GPUs report: nvidia-fabricmanager where NVML reports the GPUs
in an NVSwitch fabric (a fabric state other than not_supported: the fabric manager must set it up before CUDA can
use the GPUs, NVIDIA Fabric Manager User Guide), nvidia-persistenced on NVIDIA nodes (NVIDIA's Driver Persistence
docs recommend it on headless nodes). IMEX (multi-node NVLink, GB200 NVL72) and GPUDirect RDMA through
nvidia_peermem have nothing on the node that says they are wanted: the profile says so.
"""

from __future__ import annotations

from gpudiag.expect.errors import ExpectationError
from gpudiag.model.records import dataclass

CHOICES = ("auto", "yes", "no")


@dataclass(frozen=True)
class ServicesSettings:
    """The services family's profile keys (see the module's text)."""
    fabricmanager_expected: str = "auto"  # nvidia-fabricmanager active: auto = where the GPUs are in a fabric
    persistenced_expected: str = "auto"  # nvidia-persistenced active: auto = on NVIDIA nodes
    imex_expected: bool = False  # nvidia-imex active (multi-node NVLink domains)
    peermem_expected: bool = False  # nvidia_peermem loaded (GPUDirect RDMA through the peer-memory module)
    # A unit systemd restarted this many times since it started is flapping (watch it); 3 is a crash loop's start.
    service_restarts_warn: int = 3

    def __post_init__(self) -> None:
        for key in ("fabricmanager_expected", "persistenced_expected"):
            if getattr(self, key) not in CHOICES:
                raise ExpectationError(key, f"must be one of {', '.join(CHOICES)}")
        if self.service_restarts_warn < 1:
            raise ExpectationError("service_restarts_warn", "must be at least 1")


SETTINGS = ServicesSettings
SAMPLES = {"fabricmanager_expected": ('"yes"', "yes"), "persistenced_expected": ('"no"', "no"),
           "service_restarts_warn": ("5", 5)}
