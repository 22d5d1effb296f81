"""The local service API: `gpudiag serve` answers `gpudiag check`, `gpudiag history` and the scheduler hooks on a
Unix socket, so that a node has one NVML/amdsmi client (the service) instead of one per caller, and keeps a journal
of what changed (docs/service.md).

This module is imported by every `gpudiag check`: it holds only names and paths, nothing that pulls in the exporter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

DEFAULT_SOCKET = Path("/run/gpudiag/gpudiag.sock")
DEFAULT_STATE_DIR = Path("/var/lib/gpudiag")
# The group whose members may talk to the socket (besides its owner and root): the socket is 0660.
SOCKET_GROUP = "gpudiag"


def _under_root(root: Path, default: Path) -> Path:
    return default if root == Path("/") else root / default.relative_to("/")


def socket_path(root: Path = Path("/"), socket: Optional[Path] = None) -> Path:
    """`--socket PATH` as given; else /run/gpudiag/gpudiag.sock, under `--root DIR` at DIR/run/gpudiag/gpudiag.sock."""
    return socket if socket is not None else _under_root(root, DEFAULT_SOCKET)


def state_dir(root: Path = Path("/"), state: Optional[Path] = None) -> Path:
    """`--state-dir DIR` as given; else /var/lib/gpudiag, under `--root DIR` at DIR/var/lib/gpudiag."""
    return state if state is not None else _under_root(root, DEFAULT_STATE_DIR)
