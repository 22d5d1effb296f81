"""Bounded sysfs reads for the RDMA probe: every attribute read is capped in size, every directory listing in length,
and the errnos that sysfs attributes use to say "not supported here" are told apart from real failures.

Why a reader of its own beside files.FileReader (whose error recording it shares): RDMA attributes refuse reads in
ways that are no fault of the node.
- A counter on a PF the firmware restricts fails with EINVAL (mlx5: the ACCESS_REG command behind it is refused, and
  the kernel logs `mlx5_cmd_out_err … ACCESS_REG(0x805) … failed … err(-22)` each time: GPUd issue 1164, node_exporter
  issue 3434). Such a file is "unsupported", remembered in `skip` so that it is not read (and logged) again.
- gid_attrs/ndevs/<n> of a port with no netdev (InfiniBand, an empty GID entry) fails with EINVAL
  (drivers/infiniband/core/sysfs.c _show_port_gid_attr: "-EINVAL is returned for user space compatibility").
- /sys/class/net/<if>/speed and carrier of an interface that is not up fail with EINVAL (net/core/net-sysfs.c).
A real failure (EACCES, EIO of a NIC that fell off the bus, ELOOP) is a recorded ProbeError, never an exception.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional, Union

from gpudiag.model import ErrorKind
from gpudiag.probe.files import FileReader

# sysfs attributes are at most one page (fs/sysfs/file.c: PAGE_SIZE); a PCI config space is 4 KiB. Anything larger
# under --root is not what the kernel writes and is read only up to this much.
MAX_ATTRIBUTE_BYTES = 4096
MAX_CONFIG_BYTES = 4096
# errnos by which an attribute says "this device or port does not offer it", not "the read failed".
UNSUPPORTED_ERRNOS = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENODATA, errno.ENOTSUP, errno.ENXIO})


class Unsupported:
    """The attribute exists but the kernel refuses it in a way that means "not offered here" (an errno above)."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Unsupported({self.why!r})"


class BoundedReader(FileReader):
    """A FileReader whose reads are bounded and errno-aware. `skip`: paths known to refuse reads (EINVAL), shared
    across reads by a caller that reads the node again (the exporter's collection loop)."""

    def __init__(self, root: Path, errors: Optional[list] = None, skip: Optional[set[str]] = None):
        super().__init__(root, errors)
        self.skip = skip if skip is not None else set()

    def raw(self, path: Path, limit: int = MAX_ATTRIBUTE_BYTES,
            remember: bool = False) -> Union[bytes, Unsupported, None]:
        """The file's first `limit` bytes; None when missing (or unreadable: recorded); Unsupported for the errnos
        that mean "not offered". `remember`: an EINVAL is kept in `skip` (counters only: a netdev's speed refuses
        reads only while it is down)."""
        key = os.fspath(path)
        if remember and key in self.skip:
            return Unsupported("refused an earlier read (EINVAL)")
        try:
            with open(path, "rb") as handle:
                return handle.read(limit)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            self.record(path, ErrorKind.ERROR, f"{self.shown(path)} is a directory, not an attribute")
            return None
        except OSError as exc:
            if exc.errno in UNSUPPORTED_ERRNOS:
                if remember and exc.errno == errno.EINVAL:
                    self.skip.add(key)
                return Unsupported(os.strerror(exc.errno or 0) or "not supported")
            self._failed(path, exc)
            return None

    def attribute(self, path: Path, remember: bool = False) -> Union[str, Unsupported, None]:
        """An attribute's first line, stripped; None when missing, unreadable or empty."""
        data = self.raw(path, remember=remember)
        if data is None or isinstance(data, Unsupported):
            return data
        text = data.decode("utf-8", errors="replace")
        first = text.splitlines()[0].strip() if text.strip() else ""
        return first or None

    def value(self, path: Path) -> Optional[str]:
        """An attribute's first line, with "not offered" folded into None."""
        text = self.attribute(path)
        return None if isinstance(text, Unsupported) else text

    def names(self, path: Path, cap: int) -> tuple[Optional[list[str]], int]:
        """Up to `cap` sorted names in a directory and how many more there were; None when the directory does not
        exist or cannot be listed (the latter recorded). The listing stops reading at 16 × cap entries, so a
        directory of millions costs no more than that (what was passed over is still counted)."""
        try:
            with os.scandir(path) as it:
                names = []
                for count, entry in enumerate(it):
                    if count >= cap * 16:
                        return sorted(names)[:cap], len(names) - cap + 1
                    names.append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return None, 0
        except OSError as exc:
            self._failed(path, exc)
            return None, 0
        names.sort()
        return names[:cap], max(0, len(names) - cap)

    def link_target(self, path: Path) -> Optional[Path]:
        """Where a symlink resolves to (within the root's own tree, as the kernel lays it out); None when it is
        no link. A loop or an unreadable link is recorded."""
        try:
            os.readlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # not a symlink
                return None
            self._failed(path, exc)
            return None
        try:
            return Path(os.path.realpath(path, strict=True))
        except (FileNotFoundError, NotADirectoryError):
            return None  # a dangling link: the device it named is gone
        except OSError as exc:
            self._failed(path, exc)
            return None
