"""Writing output files so that a reader never sees half of one (textfile collectors, baselines, recordings)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write to a temporary file in the same directory, fsync it, then rename it over `path`.

    The rename is atomic within one filesystem, so a concurrent reader (node_exporter's textfile collector, a
    scheduler reading a baseline) sees the old file or the new one, never a truncated one.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class DocumentError(ValueError):
    """A file that should hold JSON does not; the message says why in a few words."""


def read_json(path: Path) -> Any:
    """The JSON document in `path` (recordings, baselines), or DocumentError: cannot read / not JSON."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocumentError(f"not JSON: {exc}") from None
    return data
