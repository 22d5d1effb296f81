"""Files gpudiag writes and reads, treated as if someone on the node were trying to trip it up.

Writing (snapshots, baselines, textfile collector output): a reader never sees half a file, and nothing is done by
path that an attacker could redirect. gpudiag often runs as root into a directory another user can write
(node_exporter's textfile directory), so the temporary file is created with O_CREAT|O_EXCL|O_NOFOLLOW and its mode
is given at creation, on the descriptor; nothing is ever chmod-ed by path, which a symlink swapped in between the
write and the chmod would redirect onto another file. The target must be a regular file or absent: `--output
/dev/null` run as root would otherwise replace the device node with a regular file.

Modes: PUBLIC (0666) and PRIVATE (0600) are creation modes, so the process umask applies as it does to any file a
program creates (0644 and 0600 under the usual umask 022). Snapshots and baselines are PRIVATE: a snapshot holds
the kernel command line, process owners and root-only kernel-log lines.

Reading (`--replay`, `--baseline`, `--profile`, `--web-config`): regular files only (a FIFO would block forever,
/dev/zero would read until memory runs out), at most a size cap per kind of file, UTF-8, and nested no deeper than
MAX_NESTING levels (a deeply nested document makes a recursive parser raise RecursionError). Every problem is a
DocumentError whose message is a few words on one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

PUBLIC, PRIVATE = 0o666, 0o600  # creation modes: the umask applies
STDOUT = "-"  # an output path that means standard output

# Size caps, far above any real file of the kind, far below what hurts: parsing JSON costs ~25x its size in memory
# (a 100 MB recording took 2.5 GB RSS). A shipped profile is ~3 KB, a web config a few hundred bytes (1 MiB holds
# ~15,000 bcrypt users), a baseline of 8 GPUs ~10 KB, and a recording of the lab's 2x H200 25 KB; a recording grows
# with the kernel-log events it keeps, so it gets the most room (at the cap, ~90,000 events: 3.3 s and 125 MB RSS
# to load on the development machine).
CONFIG_MAX_BYTES = 1 << 20  # --profile TOML, --web-config YAML
BASELINE_MAX_BYTES = 4 << 20  # --baseline
RECORDING_MAX_BYTES = 16 << 20  # --replay
MAX_NESTING = 64  # a snapshot nests ~6 levels deep, a profile or web config 3

# Signals whose default action would kill the process mid-write and leave the temporary file behind.
_CLEANUP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class DocumentError(ValueError):
    """A file that cannot be used as input; the message says why in a few words on one line."""


class NotARegularFile(OSError):
    """An output path that exists and is not a regular file (a device, FIFO, directory or socket)."""


# -- writing ----------------------------------------------------------------------------------------------------


def write_output(path: Path | str, text: str, mode: int = PUBLIC) -> None:
    """`text` to standard output when `path` is `-` (whole, or gpudiag.stdout.Unwritable), else atomically to the
    file."""
    if str(path) == STDOUT:
        from gpudiag import stdout

        stdout.write(text, "the output")
        return
    write_atomically(Path(path), text, mode)


def write_atomically(path: Path, text: str, mode: int = PUBLIC, exact: bool = False) -> None:
    """Write to a new temporary file in the same directory, fsync it, then rename it over `path`.

    The rename is atomic within one filesystem, so a concurrent reader (node_exporter's textfile collector, a
    scheduler reading a baseline) sees the old file or the new one, never a truncated one. `mode` is the creation
    mode (the umask applies). A SIGTERM, SIGINT or SIGHUP during the write removes the temporary file and then
    ends the process as the signal would have. `exact`: the file gets `mode` whatever the umask (set on the
    descriptor: the service's journal is group-readable under its unit's UMask=0077).
    """
    path = Path(path)
    _refuse_non_regular(path)
    directory = path.parent if str(path.parent) else Path(".")
    data = text.encode("utf-8")
    with _cleanup_on_signals():
        fd, tmp = _create_temporary(directory, path.name, mode)
        try:
            try:
                if exact:
                    os.fchmod(fd, mode)
                _write_all(fd, data)
                os.fsync(fd)
                _still_ours(fd, tmp)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    _fsync_directory(directory)


def _refuse_non_regular(path: Path) -> None:
    try:
        st = os.stat(path)  # follows symlinks: /dev/stdout is a link to /proc/self/fd/1
    except FileNotFoundError:
        return
    except OSError:
        return  # the write itself will say what is wrong with the path
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(errno.EINVAL, f"not a regular file ({file_kind(st.st_mode)}); use - for standard output",
                              str(path))


def _create_temporary(directory: Path, name: str, mode: int) -> tuple[int, Path]:
    """A new file nobody else can have opened or linked: O_EXCL fails on any existing name, symlinks included."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    import secrets  # here, not at the top: it pulls in hashlib and hmac, which `gpudiag check` never needs

    for _ in range(100):
        # The name does not end in .prom, so node_exporter's textfile collector never reads a half-written file.
        tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(directory))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _still_ours(fd: int, tmp: Path) -> None:
    """The name still points at the file written: in a directory others can write, it could have been swapped for a
    symlink or another file, which the rename would then install as the output."""
    ours, now = os.fstat(fd), os.lstat(tmp)
    if (ours.st_dev, ours.st_ino) != (now.st_dev, now.st_ino):
        raise OSError(errno.EEXIST, "the temporary file was replaced while it was written", str(tmp))


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class _Signalled(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum: int, _frame: object) -> None:
    raise _Signalled(signum)


@contextlib.contextmanager
def _cleanup_on_signals() -> Iterator[None]:
    """While the body runs, the signals that would kill the process outright raise instead, so that the `except`
    around the write removes its temporary file; then the signal is delivered again with its default action, and
    the process ends as it would have (killed by SIGTERM: status 143 in a shell). Handlers someone else installed
    are left alone (SIGINT's usual one raises KeyboardInterrupt, which cleans up the same way); Python can only set
    handlers from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _CLEANUP_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_DFL:
            previous[signum] = signal.signal(signum, _raise_signalled)
    try:
        yield
    except _Signalled as exc:
        _restore(previous)
        previous = {}
        os.kill(os.getpid(), exc.signum)
        raise SystemExit(128 + exc.signum) from None  # only if the signal did not end the process
    finally:
        _restore(previous)


def _restore(handlers: dict) -> None:
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


# -- reading ----------------------------------------------------------------------------------------------------


def read_text(path: Path | str, max_bytes: int) -> str:
    """The UTF-8 text of the regular file `path`, at most `max_bytes` long, or DocumentError."""
    data = read_bytes(path, max_bytes)
    if len(data) > max_bytes:
        raise DocumentError(_too_large(None, max_bytes))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_bytes(path: Path | str, max_bytes: int, truncate: bool = False) -> bytes:
    """The bytes of the regular file `path`: at most `max_bytes`, else DocumentError, or with `truncate` the first
    `max_bytes + 1` of them (the caller tells a file cut short by that one byte too many)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears (forever).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)  # the file opened, not whatever the name points at by now
        if not stat.S_ISREG(st.st_mode):
            raise DocumentError(f"not a regular file ({file_kind(st.st_mode)})")
        if st.st_size > max_bytes and not truncate:
            raise DocumentError(_too_large(st.st_size, max_bytes))
        return _read_at_most(fd, max_bytes + 1)  # st_size can lie (a file growing, /proc files say 0)
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _too_large(size: int | None, limit: int) -> str:
    over = f"{size} bytes" if size is not None else "larger than"
    return f"too large: {over} over the {_human(limit)} limit for this kind of file"


def _human(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 and not size % (1 << 20) else f"{size} bytes"


def parse_bounded(parse: Callable[[str], Any], text: str, max_depth: int = MAX_NESTING) -> Any:
    """parse(text) (json.loads, yaml.safe_load, tomllib.loads), refused when nested deeper than `max_depth`.

    A recursive parser raises RecursionError somewhere between ~300 and ~1,000 levels, depending on the parser;
    that and anything nested deeper than `max_depth` is a DocumentError. The parser's own errors pass through."""
    try:
        data = parse(text)
    except RecursionError:
        raise DocumentError(f"nested deeper than {max_depth} levels") from None
    if nesting_exceeds(data, max_depth):
        raise DocumentError(f"nested deeper than {max_depth} levels")
    return data


def nesting_exceeds(data: Any, max_depth: int) -> bool:
    """Whether lists/dicts nest deeper than `max_depth`. Iterative, and each container is revisited only when
    reached deeper than before: YAML aliases share containers (a "billion laughs" document stays cheap) and can
    make a list contain itself (which then nests infinitely deep, and is refused)."""
    deepest: dict[int, int] = {}
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if not isinstance(value, (dict, list, tuple)):
            continue
        if depth > max_depth:
            return True
        if deepest.get(id(value), 0) >= depth:
            continue
        deepest[id(value)] = depth
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return False


def read_json(path: Path | str, max_bytes: int) -> Any:
    """The JSON document in `path` (recordings, baselines), or DocumentError: cannot read / too large / not JSON."""
    text = read_text(path, max_bytes)
    try:
        return parse_bounded(json.loads, text)
    except DocumentError:
        raise
    except ValueError as exc:  # JSONDecodeError, and a number over Python's int-string limit
        raise DocumentError(f"not JSON: {exc}") from None


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words: "a FIFO", "a character device", … (from its st_mode)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"
