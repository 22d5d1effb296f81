"""Active diagnostics: load tests that talk to the vendor runtime directly (the CUDA driver API, HIP) through
ctypes, with no ML framework on the node. Probe-level code: it touches vendor libraries and GPUs.

    results = run_active(snapshot, ActiveOptions(tests=("pcie", "p2p", "memtest", "stress"), deadline_seconds=120))
    snapshot.active = results   # gpudiag.checks.active.family judges it

Only idle GPUs are loaded (plan.skip_reason); every test frees what it took, on the deadline and Ctrl-C too.
"""

from gpudiag.active.options import ALL_TESTS, ActiveOptions, DeviceReader
from gpudiag.active.runner import run_active

__all__ = ["ALL_TESTS", "ActiveOptions", "DeviceReader", "run_active"]
