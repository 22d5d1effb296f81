"""gpudiag: GPU node health and diagnostics for AMD and NVIDIA nodes."""

from __future__ import annotations

__version__ = "0.1.0"

# The deadline of one passive collection (`--timeout` of check, snapshot, serve, top): said here once, and read by
# the probe, the commands and their help. A client of the service never assumes the service's: the service says its
# own in its answers (more_wait below).
DEFAULT_DEADLINE_SECONDS = 10.0
MAX_WAIT_SECONDS = 600.0  # the longest wait a service request may ask for (gpudiag/service/runtime.py)


def more_wait(answer: object, timeout: "float | None") -> "float | None":
    """After a service answer that its collection has not finished: how much longer to wait for it, or None (do
    not: probe directly). The service's own deadline (`deadline_seconds`) while it says a collection is still
    running (`collecting`): the running one ends within that. Never when the caller gave its own --timeout (that
    bounds the wait), nor for an answer that does not say (an older service) or says nonsense."""
    if timeout is not None or not isinstance(answer, dict) or answer.get("collecting") is not True:
        return None
    deadline = answer.get("deadline_seconds")
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not 0 < deadline <= MAX_WAIT_SECONDS:
        return None
    return float(deadline)
