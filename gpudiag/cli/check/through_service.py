"""`gpudiag check` through the running service (docs/service.md).

`check` asks the service on its socket for a collection (at most a second old) when one answers, and judges it
exactly as it would judge its own probe: the same run_checks with the check's own profile and selection. Nothing
here imports the probe layer on that path, so pynvml and amdsmi are never loaded.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Callable, Optional

from gpudiag import DEFAULT_DEADLINE_SECONDS, more_wait


log = logging.getLogger("gpudiag")

DIRECT, SERVICE = "direct", "service"


def obtain(root: Path, socket: Optional[Path], timeout: Optional[float], level: int, direct: bool,
           kernel_log: Optional[Path], probe: Callable[[], object],
           stress_seconds: Optional[float] = None) -> tuple[object, str, list]:
    """(the node's snapshot, how it was collected, the service's open check episodes for `since`): from the
    service when it answers, else `probe()` (a collection of our own)."""
    if direct or kernel_log is not None:  # the service reads the live log, not the file given
        return probe(), DIRECT, []
    from gpudiag.service import socket_path
    from gpudiag.service.client import ServiceError, ask

    path = socket_path(root, socket)
    # First the default deadline and a second more; a service still collecting then says its own deadline, and
    # (without our own --timeout) we wait that long for its collection rather than probe beside it.
    wait = (DEFAULT_DEADLINE_SECONDS if timeout is None else min(timeout, DEFAULT_DEADLINE_SECONDS)) + 1.0
    try:
        answer = ask(path, {"op": "snapshot", "wait": wait}, timeout=wait + 1.0)
        more = more_wait(answer, timeout) if answer is not None and not answer.get("fresh") else None
        if more is not None:
            answer = ask(path, {"op": "snapshot", "wait": more}, timeout=more + 1.0)
    except ServiceError as exc:
        log.warning("the service at %s could not collect (%s): probing directly", path, exc)
        answer = None
    if answer is not None and not answer.get("fresh"):
        # Its last complete collection could pass a node that has hung since: never judge a stale one.
        log.warning("the service's collection did not finish (%s): probing directly", answer.get("problem"))
        answer = None
    snapshot = _snapshot_of(answer) if answer is not None else None
    if snapshot is None:
        return probe(), DIRECT, []
    if level >= 2:
        _load_test(snapshot, path, timeout, level, stress_seconds)
    return snapshot, SERVICE, answer.get("open") or []


def _snapshot_of(answer: dict):
    from gpudiag.model import NodeSnapshot, SchemaError, from_dict

    if answer is None:
        return None
    try:
        return from_dict(NodeSnapshot, answer.get("snapshot"))
    except (SchemaError, TypeError, ValueError) as exc:  # a service of another gpudiag version
        log.warning("the service's snapshot does not fit this gpudiag (%s): probing directly", exc)
        return None


def _load_test(snapshot, path: Path, timeout: Optional[float], level: int, stress_seconds: Optional[float]) -> None:
    """`--level 2|3`: the load tests run here (the service never loads a GPU); what they watch while they run
    (clocks, link, ECC, the kernel log's driver events) is read through the service too, so this process still
    opens no vendor library."""
    from gpudiag.active import ActiveOptions, run_active
    from gpudiag.active.options import default_deadline
    from gpudiag.cli.shared.node_collect import UsageProblem, stdout_to_stderr
    from gpudiag.service.client import ask

    def fresh():
        return _snapshot_of(ask(path, {"op": "snapshot", "max_age": 0.2}, timeout=5.0))

    def reader(device):
        now = fresh()
        match = next((d for d in (now.devices if now else []) if d.vendor == device.vendor
                      and d.index == device.index), None)
        if match is None:
            raise RuntimeError("the service did not report this GPU")
        return match

    def kernel_events():
        now = fresh()
        log_info = now.kernel_log if now is not None else None
        return log_info.events if log_info is not None and log_info.readable else None

    deadline = default_deadline(level, stress_seconds) if timeout is None else timeout
    try:
        options = ActiveOptions.for_level(level, stress_seconds, deadline_seconds=deadline, progress=sys.stderr,
                                          reader=reader, kernel_events=kernel_events)
    except ValueError as exc:  # a GPUDIAG_VALIDATION_ONLY_* variable that does not parse
        raise UsageProblem(str(exc)) from None
    with stdout_to_stderr():
        snapshot.active = run_active(snapshot, options)
