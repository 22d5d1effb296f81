"""The screen family's probe part: the idle-time screens' record (`gpudiag screen` keeps it in the state directory,
<state dir>/screen/state.json), read for the checks, the exporter and the textfile (docs/screening.md). Found by its
name (probe/collector.py).

No file is no screening on this node (the opt-in timer was never enabled): the checks skip. A file that cannot be
read, is too large or is not a state is an error: the checks cannot say whether the GPUs were screened (unknown).
"""

from __future__ import annotations

import time
from typing import Optional

from gpudiag.model import ErrorKind, NodeSnapshot, ProbeError
from gpudiag.model.screen import SCREEN_DIR, STATE_NAME, ScreeningInfo


def collect(snapshot: NodeSnapshot, options, until: float) -> Optional[ScreeningInfo]:
    if options.state_dir is None:
        return None  # nowhere to look: not read (a test's CollectOptions, a bare Collector)
    from gpudiag.model.screen_file import ScreenStateError, load_state  # here: a process that only stores the part

    path = options.state_dir / SCREEN_DIR / STATE_NAME
    info = ScreeningInfo(path=str(path), read_at=time.time())
    try:
        info.state = load_state(path)
    except ScreenStateError as exc:
        info.error = ProbeError("screening", ErrorKind.ERROR, str(exc))
    return info


def store(snapshot: NodeSnapshot, value: Optional[ScreeningInfo], error: Optional[ProbeError]) -> None:
    """Fail closed: a part that raised or missed its deadline leaves an unreadable ScreeningInfo naming why."""
    if error is not None:
        snapshot.screening = ScreeningInfo(error=error, read_at=time.time())
        return
    snapshot.screening = value
