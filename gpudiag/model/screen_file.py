"""The screening state file (<state dir>/screen/state.json): written by `gpudiag screen`'s tick, read back by the
probe part `screening`. Apart from gpudiag.model.screen, whose types gpudiag.model.serialize resolves by name: the
file's reading and writing goes through serialize, and the types' module must not import it back."""

from __future__ import annotations

import json
import os
from typing import Optional

from gpudiag.fileio import DocumentError, read_json
from gpudiag.model.screen import OUTCOMES, SCREEN_SCHEMA_VERSION, ScreenState
from gpudiag.model.serialize import SchemaError, from_dict, to_dict

# A GPU's record is ~2 KB (its last two runs, sixteen SMs at most each): 64 GPUs fit many times over.
STATE_MAX_BYTES = 1 << 20


class ScreenStateError(ValueError):
    """The state file cannot be used; the message is one line naming the problem."""


def state_to_json(state: ScreenState) -> str:
    return json.dumps(to_dict(state), indent=1, sort_keys=True) + "\n"


def load_state(path) -> Optional[ScreenState]:
    """The state in `path`; None when there is no such file (no screen has run); ScreenStateError when it is there
    but unreadable, too large, not JSON or not a state of this schema."""
    if not os.path.lexists(path):
        return None
    try:
        data = read_json(path, STATE_MAX_BYTES)
    except DocumentError as exc:
        raise ScreenStateError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCREEN_SCHEMA_VERSION:
        raise ScreenStateError(f"{path}: not a screening state of schema {SCREEN_SCHEMA_VERSION}")
    try:
        state = from_dict(ScreenState, data)
    except (SchemaError, TypeError, ValueError) as exc:
        raise ScreenStateError(f"{path}: not a valid screening state: {exc}") from None
    for gpu in state.gpus:
        for run in (gpu.last_run, gpu.last_completed):
            if run is not None and run.outcome not in OUTCOMES:
                raise ScreenStateError(f"{path}: GPU {gpu.pci_bus_id}: unknown outcome {run.outcome!r}")
    return state
