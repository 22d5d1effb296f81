"""Reading the kernel log: live from `root/dev/kmsg`, or from a saved file (`--kernel-log FILE`).

/dev/kmsg (Documentation/ABI/testing/dev-kmsg) hands out one record per read(), starting at the oldest record
still in the ring buffer. Opened O_NONBLOCK, a read at the end fails with EAGAIN, which is where we stop. EPIPE
means the records we were about to read were overwritten meanwhile: the next read resumes at the oldest one left.
A buffer smaller than the record fails with EINVAL, hence the generous read size.

A test tree's `dev/kmsg` is a regular file with one record per line; it is read as text.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Iterable, Optional

from gpudiag.model import ErrorKind, KernelLogInfo, ProbeError
from gpudiag.probe.kernel_log_events import parse_event, split_line

KMSG_READ_SIZE = 64 * 1024  # one record per read; the kernel caps a record at 8 KiB (CONSOLE_EXT_LOG_MAX)
# The ring buffer is finite (log_buf_len, 32 MiB at most by default), so draining it ends; this only guards
# against a log storm that writes as fast as we read.
MAX_KMSG_READS = 1_000_000

PERMISSION_HINT = (
    "run gpudiag as root, or grant it CAP_SYSLOG (e.g. AmbientCapabilities=CAP_SYSLOG in its systemd unit), "
    "or allow unprivileged reads with `sysctl kernel.dmesg_restrict=0`"
)


def read_kernel_log(root: Path = Path("/"), file: Optional[Path] = None) -> KernelLogInfo:
    """Scan the kernel log for GPU events. Never raises: an unreadable log is `readable=False` with the reason."""
    if file is not None:
        return _read_saved_file(Path(file))
    return _read_kmsg(Path(root) / "dev/kmsg")


def scan(lines: Iterable[str], info: KernelLogInfo) -> KernelLogInfo:
    """Parse log lines (any supported format, mixed) into `info.events`, counting the lines scanned."""
    for line in lines:
        split = split_line(line)
        if split is None:
            continue
        info.lines_scanned += 1
        event = parse_event(split[1], split[0])
        if event is not None:
            info.events.append(event)
    return info


def drain_kmsg(read: Callable[[], bytes], max_reads: int = MAX_KMSG_READS) -> tuple[list[str], Optional[str]]:
    """Read records with `read` (one os.read on the kmsg fd) until EAGAIN. Returns the records' lines and, when
    reading stopped early, why. EPIPE (records overwritten under us) is not an end: reading carries on."""
    lines: list[str] = []
    for _ in range(max_reads):
        try:
            record = read()
        except BlockingIOError:  # EAGAIN: every record has been read
            return lines, None
        except BrokenPipeError:  # EPIPE: the oldest unread records were overwritten; carry on from what is left
            continue
        except OSError as exc:
            return lines, f"reading stopped after {len(lines)} lines: {exc.strerror or exc}"
        if not record:
            return lines, None
        lines.extend(record.decode("utf-8", errors="replace").splitlines())
    return lines, f"stopped after {max_reads} reads; newer records were not scanned"


def _read_kmsg(path: Path) -> KernelLogInfo:
    info = KernelLogInfo(source=str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return _unreadable(info, exc, hint=PERMISSION_HINT)
    with os.fdopen(fd, "rb") as handle:
        try:
            if stat.S_ISCHR(os.fstat(fd).st_mode):
                lines, stopped = drain_kmsg(lambda: os.read(fd, KMSG_READ_SIZE))
            else:  # a recorded tree: one record per line
                lines, stopped = handle.read().decode("utf-8", errors="replace").splitlines(), None
        except OSError as exc:
            return _unreadable(info, exc)
    info.readable = True
    if stopped:
        info.error = ProbeError(source=f"kernel_log:{path}", kind=ErrorKind.ERROR, message=stopped)
    return scan(lines, info)


def _read_saved_file(path: Path) -> KernelLogInfo:
    info = KernelLogInfo(source=str(path))
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            info.readable = True
            return scan(handle, info)
    except OSError as exc:
        info.readable = False
        return _unreadable(info, exc)


def _unreadable(info: KernelLogInfo, exc: OSError, hint: Optional[str] = None) -> KernelLogInfo:
    source = f"kernel_log:{info.source}"
    if isinstance(exc, PermissionError):
        message = f"cannot read {info.source}: permission denied" + (f"; {hint}" if hint else "")
        info.error = ProbeError(source=source, kind=ErrorKind.NO_PERMISSION, message=message)
    elif isinstance(exc, FileNotFoundError):
        info.error = ProbeError(source=source, kind=ErrorKind.NOT_FOUND, message=f"{info.source} does not exist")
    else:
        info.error = ProbeError(source=source, kind=ErrorKind.ERROR, message=f"reading {info.source}: {exc}")
    return info
