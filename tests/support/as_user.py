"""Run a function in a child process as another user, as systemd runs a unit: its uid, gid, supplementary groups
and UMask=. For the tests of what the units' modes let other users (node_exporter, a member of group gpudiag, anyone)
read and write. Needs root; the tests that use it skip without."""

from __future__ import annotations

import os
import pickle
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import pytest

# Imported here, in the parent, for the child's sake: this interpreter's own files may be out of the other user's
# reach (a pyenv under /root, 0700), and gpudiag imports these lazily (fileio: secrets).
import secrets  # noqa: F401

# Numbers no account on a test machine has: the `gpudiag` service user, node_exporter's user, a group member, anyone.
GPUDIAG, NODE_EXPORTER, MEMBER, STRANGER = 64101, 64102, 64103, 64104

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


class Child:
    """A forked child running fn() as another user; result() waits for it."""

    def __init__(self, pid: int, pipe: int):
        self.pid, self._pipe = pid, pipe

    def result(self) -> Any:
        with os.fdopen(self._pipe, "rb") as pipe:
            data = pipe.read()
        os.waitpid(self.pid, 0)
        kind, value = pickle.loads(data)
        if kind == "oserror":
            raise OSError(value[0], value[1])
        if kind == "error":
            raise RuntimeError(value)
        return value


def start_as_user(uid: int, fn: Callable[[], Any], gid: int | None = None, groups: tuple[int, ...] = (),
                  umask: int = 0o022) -> Child:
    """fn() in a forked child running as `uid` (group `gid`, default the same number; supplementary `groups`)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            os.setgroups(list(groups))
            os.setgid(uid if gid is None else gid)
            os.setuid(uid)
            os.umask(umask)
            outcome = ("ok", fn())
        except OSError as exc:
            outcome = ("oserror", (exc.errno, str(exc)))
        except BaseException:  # noqa: BLE001 - reported to the parent
            outcome = ("error", traceback.format_exc())
        with os.fdopen(write, "wb") as pipe:
            pickle.dump(outcome, pipe)
        os._exit(0)
    os.close(write)
    return Child(pid, read)


def as_user(uid: int, fn: Callable[[], Any], gid: int | None = None, groups: tuple[int, ...] = (),
            umask: int = 0o022) -> Any:
    """fn()'s result, computed in a forked child running as `uid`; an exception in the child is raised here as
    RuntimeError with its traceback text (OSError keeps its errno)."""
    return start_as_user(uid, fn, gid, groups, umask).result()


def shared_tmp() -> Path:
    """A temporary directory other users can reach (pytest's tmp_path is under a 0700 directory of root's)."""
    path = Path(tempfile.mkdtemp(prefix="gpudiag-users-"))
    path.chmod(0o755)
    return path
