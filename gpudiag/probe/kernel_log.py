"""Reading the kernel log: live from `root/dev/kmsg`, or from a saved file (`--kernel-log FILE`).

/dev/kmsg (Documentation/ABI/testing/dev-kmsg) hands out one record per read(), starting at the oldest record
still in the ring buffer. Opened O_NONBLOCK, a read at the end fails with EAGAIN, which is where we stop. EPIPE
means the records we were about to read were overwritten meanwhile: the next read resumes at the oldest one left.
A buffer smaller than the record fails with EINVAL, hence the generous read size.

A test tree's `dev/kmsg` is a regular file with one record per line; it is read as text.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Optional

from gpudiag.model import ErrorKind, KernelLogInfo, ProbeError
from gpudiag.probe.kernel_log_events import MAX_RECORD_CHARS, parse_event, split_line
from gpudiag.probe.kernel_log_ghes import GhesRecords

log = logging.getLogger(__name__)

KMSG_READ_SIZE = 64 * 1024  # one record per read; the kernel caps a record at 8 KiB (CONSOLE_EXT_LOG_MAX)
# The ring buffer is finite (log_buf_len, 32 MiB at most by default), so draining it ends; this only guards
# against a log storm that writes as fast as we read.
MAX_KMSG_READS = 1_000_000
# At most this much of a log is read: twice the largest default ring buffer (CONFIG_LOG_BUF_SHIFT ≤ 25). A larger
# saved file is read from its end, where the newest records are.
MAX_LOG_BYTES = 64 * 1024 * 1024
# The scan looks at the clock every this many lines: a line costs microseconds, so it stops well within a millisecond
# of its deadline.
_CLOCK_EVERY = 16
# Only lines with one of these can be a GPU driver's record: the rest are counted and passed over unparsed.
_DRIVER_MARKERS = ("NVRM", "amdgpu", "pcieport", "[Hardware Error]", "[drm] VRAM is lost")

PERMISSION_HINT = (
    "run gpudiag as root, or grant it CAP_SYSLOG (e.g. AmbientCapabilities=CAP_SYSLOG in its systemd unit), "
    "or allow unprivileged reads with `sysctl kernel.dmesg_restrict=0`"
)


def read_kernel_log(root: Path = Path("/"), file: Optional[Path] = None, until: Optional[float] = None) -> KernelLogInfo:
    """Scan the kernel log for GPU events. Never raises: an unreadable log is `readable=False` with the reason.
    `until` (time.monotonic()) bounds the scan: past it, the scan stops and says so in `incomplete`."""
    if file is not None:
        return _read_saved_file(Path(file), until)
    return _read_kmsg(Path(root) / "dev/kmsg", until)


def scan(lines: Iterable[str], info: KernelLogInfo, until: Optional[float] = None) -> KernelLogInfo:
    """Parse log lines (any supported format, mixed) into `info.events`. Each record is parsed alone: one that
    cannot be parsed is counted in `records_skipped` and the scan goes on. APEI/GHES records span lines: they are
    assembled as they come (kernel_log_ghes.py)."""
    ghes = GhesRecords()
    for number, line in enumerate(lines):
        if until is not None and number % _CLOCK_EVERY == 0 and time.monotonic() > until:
            info.incomplete = (f"the scan reached its deadline after {info.lines_scanned} lines; the rest of the log "
                               f"was not scanned")
            break
        if line[:1] == " " and "=" in line[:66]:  # a kmsg dictionary line ( KEY=value): not a record
            continue
        info.lines_scanned += 1
        if not any(marker in line for marker in _DRIVER_MARKERS):
            continue
        try:
            split = split_line(line)
            if split is None:
                info.lines_scanned -= 1
                continue
            if not split.kernel:
                info.records_not_kernel += 1
                continue
            event = parse_event(split.message, split.seconds) or ghes.feed(split.message, split.seconds)
        except Exception as exc:  # noqa: BLE001 - hostile input: one bad record must not hide the others
            info.records_skipped += 1
            log.debug("kernel log record skipped: %s", exc)
            continue
        if event is not None:
            info.events.append(event)
    return info


def bounded_lines(handle: BinaryIO, info: KernelLogInfo, max_bytes: int = MAX_LOG_BYTES) -> Iterator[str]:
    """The lines of a binary stream, each cut to MAX_RECORD_CHARS (the rest of a longer line is read and dropped,
    never taken for a line of its own), and no more than `max_bytes` in all."""
    total = 0
    while total < max_bytes:
        head = handle.readline(MAX_RECORD_CHARS + 1)
        if not head:
            return
        total += len(head)
        if len(head) > MAX_RECORD_CHARS and not head.endswith(b"\n"):
            info.lines_truncated += 1
            head = head[:MAX_RECORD_CHARS]
            while total < max_bytes:  # drop the rest of the line, in bounded pieces
                rest = handle.readline(KMSG_READ_SIZE)
                total += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
        yield head.decode("utf-8", errors="replace")
    if handle.readline(1):
        info.incomplete = info.incomplete or f"only {max_bytes // 2**20} MiB of the log were scanned"


def drain_kmsg(read: Callable[[], bytes], max_reads: int = MAX_KMSG_READS,
               max_bytes: int = MAX_LOG_BYTES) -> tuple[list[str], Optional[str]]:
    """Read records with `read` (one os.read on the kmsg fd) until EAGAIN. Returns the records' lines and, when
    reading stopped early, why. EPIPE (records overwritten under us) is not an end: reading carries on."""
    lines: list[str] = []
    total = 0
    for _ in range(max_reads):
        if total >= max_bytes:
            return lines, f"stopped after {max_bytes // 2**20} MiB; newer records were not scanned"
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
        total += len(record)
        lines.extend(record.decode("utf-8", errors="replace").splitlines())
    return lines, f"stopped after {max_reads} reads; newer records were not scanned"


def _read_kmsg(path: Path, until: Optional[float]) -> KernelLogInfo:
    info = KernelLogInfo(source=str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return _unreadable(info, exc, hint=PERMISSION_HINT)
    with os.fdopen(fd, "rb") as handle:
        try:
            if stat.S_ISCHR(os.fstat(fd).st_mode):
                lines, stopped = drain_kmsg(lambda: os.read(fd, KMSG_READ_SIZE))
                info.readable = True
                if stopped:
                    info.error = ProbeError(source=f"kernel_log:{path}", kind=ErrorKind.ERROR, message=stopped)
                    info.incomplete = stopped
                return scan(_capped(lines, info), info, until)
            info.readable = True  # a recorded tree: one record per line
            return scan(bounded_lines(handle, info), info, until)
        except OSError as exc:
            info.readable = False
            return _unreadable(info, exc)


def _capped(lines: Iterable[str], info: KernelLogInfo) -> Iterator[str]:
    for line in lines:
        if len(line) > MAX_RECORD_CHARS:
            info.lines_truncated += 1
            line = line[:MAX_RECORD_CHARS]
        yield line


def _read_saved_file(path: Path, until: Optional[float]) -> KernelLogInfo:
    info = KernelLogInfo(source=str(path))
    try:
        with open(path, "rb") as handle:
            info.readable = True
            size = os.fstat(handle.fileno()).st_size if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else 0
            if size > MAX_LOG_BYTES:  # the newest records are at the end
                handle.seek(size - MAX_LOG_BYTES)
                handle.readline(MAX_RECORD_CHARS)  # the rest of a line cut in two; a longer rest reads as one line
                info.incomplete = (f"the log is {size / 2**20:.0f} MiB: only its last {MAX_LOG_BYTES // 2**20} MiB "
                                   f"were scanned")
            return scan(bounded_lines(handle, info), info, until)
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
