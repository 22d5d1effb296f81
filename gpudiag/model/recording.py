"""Recorded nodes: a NodeSnapshot saved as JSON, replayed later by `gpudiag check --replay FILE`.

A recording is exactly what `gpudiag snapshot` prints, so a bug report's attachment can be replayed as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpudiag.fileio import PRIVATE, RECORDING_MAX_BYTES, DocumentError, read_json, write_atomically
from gpudiag.model import SNAPSHOT_SCHEMA_VERSION, NodeSnapshot, SchemaError, from_dict, to_dict


class RecordingError(ValueError):
    """The file is not a usable recording; the message is one line naming the file and the problem."""


def snapshot_json(snapshot: NodeSnapshot) -> str:
    return json.dumps(to_dict(snapshot), indent=2) + "\n"


def save_snapshot(snapshot: NodeSnapshot, path: Path) -> None:
    write_atomically(Path(path), snapshot_json(snapshot), PRIVATE)  # kernel command line, process owners, kernel log


def load_snapshot(path: Path) -> NodeSnapshot:
    path = Path(path)
    try:
        data = read_json(path, RECORDING_MAX_BYTES)
    except DocumentError as exc:
        raise RecordingError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise RecordingError(f"{path}: not a gpudiag snapshot (expected a JSON object)")
    if "schema_version" not in data:  # some other JSON document (a check report, a baseline): say so
        raise RecordingError(f"{path}: not a gpudiag snapshot (no schema_version)")
    version = data.get("schema_version")
    if version != SNAPSHOT_SCHEMA_VERSION:
        raise RecordingError(
            f"{path}: snapshot schema_version {version!r} is not supported (this gpudiag reads "
            f"{SNAPSHOT_SCHEMA_VERSION})"
        )
    try:
        return from_dict(NodeSnapshot, data)
    except (SchemaError, TypeError, ValueError) as exc:
        raise RecordingError(f"{path}: not a valid gpudiag snapshot: {exc}") from None
