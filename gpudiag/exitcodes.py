"""gpudiag's exit codes, part of the outward contract (docs/architecture.md): a leaf every layer may use.

0 no check failed (warnings allowed) · 1 at least one check failed · 2 usage or configuration error ·
3 nothing could be probed (no usable backend and no GPU on the PCI bus) · 4 internal error (gpudiag could not finish
its job) · 130 aborted (Ctrl-C), as a shell reports a SIGINT.

Nothing probed is 3 only while no check failed: where the profile or baseline expects GPUs, a node with none is
a verdict (inventory.gpu_count / baseline.inventory fail), exit 1, as the JSON report's status says.
"""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    NOTHING_PROBED = 3
    INTERNAL = 4
    ABORTED = 130
