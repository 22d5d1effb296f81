"""A command's standard output on a real full filesystem: a small tmpfs mounted in a private mount namespace
(`unshare -m`, so that nothing outside the one command sees it; root only), filled but for `free` bytes, and
/dev/full (every write ENOSPC) where no mount can be made."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Optional

TMPFS_BYTES = 64 << 10


@lru_cache(maxsize=None)
def can_mount_tmpfs() -> bool:
    """Root, and a private mount namespace to mount a tmpfs in (a container without CAP_SYS_ADMIN has neither)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True, timeout=30)
    return done.returncode == 0


def mount_full(directory: Path, free: int = 0) -> str:
    """A shell prefix that mounts a 64 KiB tmpfs at `directory` and fills it but for `free` bytes (tmpfs frees whole
    pages: a multiple of 4096); run it under `unshare -m`."""
    where = shlex.quote(str(directory))
    fill = f"dd if=/dev/zero of={where}/fill bs=4k 2>/dev/null; "
    if free:
        fill += f"truncate -s -{free} {where}/fill; "
    return f"mount -t tmpfs -o size={TMPFS_BYTES // 1024}k tmpfs {where} && {fill}"


def run_into_full_tmpfs(argv: list[str], directory: Path, env: dict, free: int = 0,
                        cwd: Optional[Path] = None) -> tuple[int, int, str]:
    """(exit status, bytes that reached the file, stderr) of `argv` with its stdout redirected to a file on a full
    tmpfs mounted at `directory` (made here; mounted only for this command)."""
    directory.mkdir(parents=True, exist_ok=True)
    out, size = shlex.quote(str(directory / "out")), directory.parent / f"{directory.name}.size"
    script = (f"{mount_full(directory, free)}{shlex.join(argv)} > {out}; code=$?; "
              f"stat -c %s {out} > {shlex.quote(str(size))}; exit $code")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], env=env, cwd=cwd, stderr=subprocess.PIPE,
                          text=True, timeout=180)
    written = size.read_text().strip() if size.exists() else ""
    return done.returncode, int(written) if written.isdigit() else -1, done.stderr


def run_into_dev_full(argv: list[str], env: dict, cwd: Optional[Path] = None) -> tuple[int, str]:
    """(exit status, stderr) of `argv` writing its stdout to /dev/full."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True, timeout=180)
    return done.returncode, done.stderr
