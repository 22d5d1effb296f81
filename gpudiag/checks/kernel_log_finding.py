"""What one kernel-log event means for its GPU: shared by the NVIDIA and amdgpu halves of kernel_log.*."""

from __future__ import annotations

from typing import NamedTuple

from gpudiag.model import Status


class Finding(NamedTuple):
    severity: Status
    description: str
    action: str  # what the operator does, in words
    verdict: str = "watch"  # what automation does (verdicts.ACTIONS)
    fault_code: str = "GPUDIAG-KERNEL-LOG-EVENT"
