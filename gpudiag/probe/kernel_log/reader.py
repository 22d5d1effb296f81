"""Reading the kernel log: live from `root/dev/kmsg`, or from a saved file (`--kernel-log FILE`).

/dev/kmsg (Documentation/ABI/testing/dev-kmsg) hands out one record per read(), starting at the oldest record
still in the ring buffer. Opened O_NONBLOCK, a read at the end fails with EAGAIN, which is where we stop. EPIPE
means the records we were about to read were overwritten meanwhile: the next read resumes at the oldest one left.
A buffer smaller than the record fails with EINVAL, hence the generous read size.

A test tree's `dev/kmsg` is a regular file with one record per line; it is read as text.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import stat
import time
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Optional

from gpudiag.model import ErrorKind, KernelLogInfo, ProbeError, normalize_pci_bus_id
from gpudiag.probe.kernel_log.events import FAMILY_MARKERS, KEPT_IN, MAX_RECORD_CHARS, EventReader, split_line
from gpudiag.probe.kernel_log.export import export_entries, is_export
from gpudiag.probe.kernel_log.formats import _KMSG_PROPERTY, LogLine, json_records, structured_kind, wall_seconds
from gpudiag.probe.kernel_log.framing import console_stamps, continues
from gpudiag.probe.patterns import lazy_compile

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

PERMISSION_HINT = (
    "run gpudiag as root, or grant it CAP_SYSLOG (e.g. AmbientCapabilities=CAP_SYSLOG in its systemd unit), "
    "or allow unprivileged reads with `sysctl kernel.dmesg_restrict=0`"
)


def read_kernel_log(
    root: Path = Path("/"), file: Optional[Path] = None, until: Optional[float] = None
) -> KernelLogInfo:
    """Scan the kernel log for GPU events. Never raises: an unreadable log is `readable=False` with the reason.
    `until` (time.monotonic()) bounds the scan: past it, the scan stops and says so in `incomplete`."""
    if file is not None:
        return _read_saved_file(Path(file), until)
    return _read_kmsg(Path(root) / "dev/kmsg", until)


def scan(lines: Iterable[str], info: KernelLogInfo, until: Optional[float] = None) -> KernelLogInfo:
    """Parse log lines (any supported format, mixed; or one of the structured forms, told by the first line) into
    `info.events`. Each record is parsed alone: one that cannot be parsed is counted in `records_skipped` and the scan
    goes on. A line in no format the scanner reads that holds a driver record after some unknown prefix is counted in
    `unreadable_lines` (the first one kept): the checks say so instead of judging the log clean."""
    lines = iter(lines)
    head: list[str] = []
    for line in lines:
        head.append(line)
        if line.strip() or len(head) > 16:
            break
    kind = structured_kind(head[-1]) if head else None
    lines = itertools.chain(head, lines)
    if kind is not None:
        return _scan_structured(lines, kind, info, until)
    reader = EventReader()
    context: Optional[LogLine] = None  # the last driver record read, whose continuation lines may finish it
    head: Optional[str] = None  # the last line that began a record: an indented line at its message column continues it
    console: Optional[str] = None  # the kernel's stamp on the line above, in a console log: a line that repeats it too
    boot, last_seconds = 0, None
    for number, line in enumerate(lines):
        if number % _CLOCK_EVERY == 0 and until is not None and time.monotonic() > until:
            info.incomplete = (f"the scan reached its deadline after {info.lines_scanned} lines; the rest of the log "
                               f"was not scanned")
            break
        if line[:1] == " ":
            if line[1:2] != " " and _KMSG_PROPERTY.match(line):
                continue  # a kmsg dictionary line ( KEY=value): not a record
            if head is not None and line[1:2] == " " and continues(head, line):
                # dmesg and journalctl print a record's later lines indented to its message column: they are that
                # record's text, whoever wrote it (a segfault report's file name), never a record (issue 32, item 1)
                _read_continuation(context, line, info, reader)
                continue
        stamps = console_stamps(line)  # a console prints a record's stamps on each of its lines (framing.py)
        if stamps is not None and stamps[2] == console and head is not None:
            _read_continuation(context, line[stamps.end():], info, reader)
            continue
        console = stamps[2] if stamps is not None else None
        info.lines_scanned += 1
        head = line
        if line[:1].isdigit():
            _note_seq(line, info)
        if not _has_marker(line):
            context = None
            if "Linux version " in line and number and _is_boot_banner(line):
                boot, last_seconds = boot + 1, None
            continue
        try:
            split = split_line(line)
        except Exception as exc:  # noqa: BLE001 - hostile input: one bad record must not hide the others
            info.records_skipped += 1
            log.debug("kernel log record skipped: %s", exc)
            context = None
            continue
        if split is None:
            info.lines_scanned -= 1
            continue
        if split.seconds is not None:
            if last_seconds is not None and split.seconds < last_seconds - _BOOT_STEP_SECONDS:
                boot += 1  # the since-boot clock went back: a later boot (kern.log, journalctl -b all)
            last_seconds = split.seconds
        if boot:
            split = split._replace(boot=f"log-boot-{boot}")
        if not split.message.startswith(_DRIVER_PREFIXES) and (
                (split.fmt is None and _SIGNATURE.search(split.message)) or _WRAPPED.search(split.message)):
            _unreadable_line(info, number, line)
            context = None  # its later lines are its own: no earlier record's
            continue
        context = split
        _read(split, info, reader)
    if boot:
        info.boots = boot + 1
        for event in info.events:
            event.boot = event.boot or "log-boot-0"
    return info


# Only lines with one of these can be a GPU or NIC driver's record: the rest are counted and passed over unparsed.
def _has_marker(line: str) -> bool:
    return ("NVRM" in line or "amdgpu" in line or "pcieport" in line or "SXid" in line
            or "[Hardware Error]" in line or "[drm] VRAM is lost" in line
            or any(marker in line for marker in FAMILY_MARKERS)  # the families' records (RDMA NICs': mlx5_core …)
            or ": probe of " in line)  # the driver core's probe failure of a GPU driver (issue 32, item 6)


_DRIVER_PREFIXES = ("NVRM: ", "nvidia-nvswitch", "amdgpu", "[drm:", "pcieport ")
# A driver's record somewhere in a line no format explains: the line is unreadable, not clean.
_SIGNATURE = lazy_compile(r"NVRM: (?:Xid \(|GPU )|nvidia-nvswitch[0-9]{1,3}: SXid|amdgpu [0-9a-f]{4,8}:[0-9a-f]{2}:"
                          r"|pcieport [0-9a-f]{4,8}:", re.ASCII)
# A stamped driver record inside a line of a known format: a wrapper gpudiag does not read (a container log's
# "<time> stdout F ", say). A driver's text quoted in another message ("segfault at 0 in NVRM: …") has no stamp.
_WRAPPED = lazy_compile(r"\[ {0,16}[0-9]{1,12}\.[0-9]{1,9}\] (?:NVRM: |nvidia-nvswitch|amdgpu |pcieport )", re.ASCII)
_BOOT_STEP_SECONDS = 10.0  # a since-boot stamp this much lower than the one before starts a new boot


def _is_boot_banner(line: str) -> bool:
    """The first record of every boot, "Linux version …" (init/main.c linux_banner), from the kernel."""
    try:
        split = split_line(line)
    except Exception:  # noqa: BLE001
        return False
    return split is not None and split.kernel and _BANNER.match(split.message) is not None


# init/version.c linux_banner: "Linux version " UTS_RELEASE " (" LINUX_COMPILE_BY "@" LINUX_COMPILE_HOST ") ("
# LINUX_COMPILER ") " UTS_VERSION (Talos builds leave LINUX_COMPILE_BY empty). A segfault report of a program named
# "Linux version x" (facility 0 too) has "[pid]: segfault" right after the 15-byte name, where the release would be.
_BANNER = lazy_compile(r"Linux version [^ \[\]]{1,64} \([^()\[\]]{0,128}@[^()\[\]]{1,128}\) \(.{1,256}?\) #[0-9]",
                       re.ASCII)


_KMSG_SEQ = lazy_compile(r"[0-9]{1,10},([0-9]{1,20}),[0-9]{1,20},[^;]{0,64};", re.ASCII)


def _note_seq(line: str, info: KernelLogInfo) -> None:
    """The highest kmsg sequence number so far (any record): the cursor the daemon follows the log by."""
    record = _KMSG_SEQ.match(line)
    if record:
        seq = int(record[1])
        info.last_seq = seq if info.last_seq is None else max(info.last_seq, seq)


def _read_continuation(context: Optional[LogLine], line: str, info: KernelLogInfo, reader: EventReader) -> None:
    info.lines_scanned += 1
    if context is None or not context.kernel or not (reader.awaits_more or _has_marker(line)):
        return
    try:
        event = reader.continue_record(line.strip(), context.seconds)
    except Exception as exc:  # noqa: BLE001 - hostile input: one bad record must not hide the others
        info.records_skipped += 1
        log.debug("kernel log record skipped: %s", exc)
        return
    if event is not None:
        if context.wall_time is not None or context.boot is not None:
            event.wall_time, event.boot = wall_seconds(context.wall_time), context.boot
        event.seq = context.seq
        getattr(info, KEPT_IN.get(event.kind, "events")).append(event)


def _read(split: LogLine, info: KernelLogInfo, reader: EventReader) -> None:
    if not split.kernel:
        info.records_not_kernel += 1
        return
    info.formats[split.fmt or "bare"] = info.formats.get(split.fmt or "bare", 0) + 1
    try:
        for event in reader.feed(split):
            getattr(info, KEPT_IN.get(event.kind, "events")).append(event)  # a family's list, or the GPU events
    except Exception as exc:  # noqa: BLE001 - hostile input: one bad record must not hide the others
        info.records_skipped += 1
        log.debug("kernel log record skipped: %s", exc)


# The GPU an unreadable line names (an Xid's `PCI:DDDD:BB:DD`, a device prefix's `DDDD:BB:DD.F`), so that its warning
# stays on that GPU (issue 32, item 5).
_UNREADABLE_BUS = lazy_compile(r"(?:NVRM: Xid \((?:PCI:)?|NVRM: GPU |amdgpu )([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2})"
                               r"(\.[0-7])?", re.ASCII)
MAX_UNREADABLE_GPUS = 64


def _unreadable_line(info: KernelLogInfo, number: int, line: str) -> None:
    info.unreadable_lines += 1
    text = line.strip()
    shown = f"line {number + 1}: {text[:160]}{'…' if len(text) > 160 else ''}"
    if info.first_unreadable is None:
        info.first_unreadable = shown
    named = _UNREADABLE_BUS.search(text[:MAX_RECORD_CHARS])
    bus = normalize_pci_bus_id(named[1] + (named[2] or ".0")) if named else None
    if bus is not None and (bus in info.unreadable_gpus or len(info.unreadable_gpus) < MAX_UNREADABLE_GPUS):
        info.unreadable_gpus[bus] = info.unreadable_gpus.get(bus, 0) + 1
        info.unreadable_gpu_first.setdefault(bus, shown)
    else:  # the first line that names no GPU, under "" (model/node.py)
        info.unreadable_gpu_first.setdefault("", shown)


def _scan_structured(lines: Iterable[str], kind: str, info: KernelLogInfo, until: Optional[float]) -> KernelLogInfo:
    bad: list[str] = []
    if kind == "journal-export":  # lines handed over as text: read on their bytes (export.py)
        records = export_entries("".join(lines).encode("utf-8", errors="replace"), bad)
    else:
        records = json_records(lines, bad)
    return _scan_records(records, kind, bad, info, until)


def _scan_records(records: Iterable[LogLine], kind: str, bad: list[str], info: KernelLogInfo,
                  until: Optional[float]) -> KernelLogInfo:
    reader = EventReader()
    boots: dict[str, None] = {}
    for number, record in enumerate(records):
        if number % _CLOCK_EVERY == 0 and until is not None and time.monotonic() > until:
            info.incomplete = (f"the scan reached its deadline after {info.lines_scanned} records; the rest of the log "
                               f"was not scanned")
            break
        info.lines_scanned += 1
        if record.boot:
            boots.setdefault(record.boot)
        if _has_marker(record.message):
            _read(record, info, reader)
    if bad:
        info.unreadable_lines += len(bad)
        info.first_unreadable = info.first_unreadable or f"{kind}: {bad[0][:160]}"
    if len(boots) > 1:
        info.boots = len(boots)
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
            head = handle.read(4096)
            if is_export(head):  # journalctl -o export: read on bytes, by length (issue 32, item 2)
                return _read_export(handle, size, info, until)
            # `dmesg --kmsg-file` dumps (util-linux tests/ts/dmesg/*kmsg-input): /dev/kmsg records, each ended by NUL.
            nul_separated = b"\x00" in head and _KMSG_DUMP.match(head.lstrip(b"\x00")) is not None
            binary = None if nul_separated else _binary_kind(head)
            if binary:
                info.unreadable_lines = 1
                info.first_unreadable = f"line 1: {binary}"
                return info
            handle.seek(0)
            if size > MAX_LOG_BYTES:  # the newest records are at the end
                handle.seek(size - MAX_LOG_BYTES)
                handle.readline(MAX_RECORD_CHARS)  # the rest of a line cut in two; a longer rest reads as one line
                info.incomplete = (f"the log is {size / 2**20:.0f} MiB: only its last {MAX_LOG_BYTES // 2**20} MiB "
                                   f"were scanned")
            lines = bounded_lines(handle, info)
            return scan((line.replace("\x00", "") for line in lines) if nul_separated else lines, info, until)
    except OSError as exc:
        info.readable = False
        return _unreadable(info, exc)


def _read_export(handle: BinaryIO, size: int, info: KernelLogInfo, until: Optional[float]) -> KernelLogInfo:
    handle.seek(0)
    if size > MAX_LOG_BYTES:  # the newest entries are at the end; the first whole one starts at a cursor
        handle.seek(size - MAX_LOG_BYTES)
        info.incomplete = (f"the log is {size / 2**20:.0f} MiB: only its last {MAX_LOG_BYTES // 2**20} MiB "
                           f"were scanned")
    data = handle.read(MAX_LOG_BYTES)
    if size > MAX_LOG_BYTES:
        start = data.find(b"\n\n__CURSOR=")
        data = data[start + 2:] if start >= 0 else b""
    bad: list[str] = []
    return _scan_records(export_entries(data, bad), "journal-export", bad, info, until)


_KMSG_DUMP = lazy_compile(rb"[0-9]{1,4},[0-9]{1,20},[0-9]{1,20},")
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bzip2"),
          (b"LPKSHHRH", "a binary systemd journal file"))


def _binary_kind(head: bytes) -> Optional[str]:
    """What a saved log that is no text is (compressed, a journal file, anything with NUL bytes), or None."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            what, hint = (name, "read it with `journalctl --file FILE -k`") if "journal" in name else (
                f"{name}-compressed", "decompress it")
            return f"binary data ({what}): {hint} first"
    return "binary data (NUL bytes): not a text log" if b"\x00" in head else None


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
