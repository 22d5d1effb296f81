"""Reading sysfs, procfs and /etc files under a root directory, with failures turned into data.

Every host-side probe reads through a `FileReader`, so that `--root DIR` (and the tests' temporary trees) can stand
in for `/`, and so that the one rule holds everywhere: a missing file is `None` (the kernel or the device does not
offer it), while a file that exists but cannot be read is `None` *plus* a `ProbeError` naming the file, so that a
check can say "unknown: permission denied" instead of passing on absent data. Nothing here raises an OSError.

All reads go through the builtin `open`, `os.readlink` and `os.listdir`, which is where tests inject failures.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from gpudiag.model import ErrorKind, ProbeError

# Error sources name the file as it is on a live machine ("/sys/…"), whatever the root, with the kind of tree.
_SOURCE_KIND = {"sys": "sysfs", "proc": "procfs", "dev": "dev"}


class FileReader:
    def __init__(self, root: Path = Path("/"), errors: Optional[list[ProbeError]] = None):
        self.root = Path(root)
        self.errors: list[ProbeError] = [] if errors is None else errors

    def path(self, relative: str) -> Path:
        """`"sys/bus/pci/devices"` → `<root>/sys/bus/pci/devices`."""
        return self.root / relative.lstrip("/")

    def shown(self, path: Path) -> str:
        """The path as it would be on the live machine: `<root>/sys/x` → `/sys/x`."""
        try:
            return "/" + str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)

    def record(self, path: Path, kind: ErrorKind, message: str) -> None:
        shown = self.shown(path)
        top = shown.lstrip("/").split("/", 1)[0]
        self.errors.append(ProbeError(source=f"{_SOURCE_KIND.get(top, 'file')}:{shown}", kind=kind, message=message))

    def _failed(self, path: Path, exc: OSError) -> None:
        if isinstance(exc, PermissionError):
            self.record(path, ErrorKind.NO_PERMISSION, f"permission denied reading {self.shown(path)}")
        else:
            # EIO and friends: sysfs attributes of a device that has fallen off the bus fail this way.
            self.record(path, ErrorKind.ERROR, f"reading {self.shown(path)} failed: {exc.strerror or exc}")

    def text(self, path: Path) -> Optional[str]:
        """The whole file, or None if missing/unreadable (the latter recorded)."""
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self._failed(path, exc)
            return None

    def line(self, path: Path) -> Optional[str]:
        """The first line, stripped; None when missing, unreadable or empty (no value to report)."""
        text = self.text(path)
        if text is None or not text.strip():
            return None
        return text.splitlines()[0].strip()

    def integer(self, path: Path, base: int = 10) -> Optional[int]:
        value = self.line(path)
        if value is None:
            return None
        try:
            return int(value, base)
        except ValueError:
            self.record(path, ErrorKind.ERROR, f"unexpected content in {self.shown(path)}: {value!r}")
            return None

    def link_name(self, path: Path) -> Optional[str]:
        """The last component of a symlink's target (`driver` → "nvidia"); None when there is no link."""
        try:
            return os.path.basename(os.readlink(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self._failed(path, exc)
            return None

    def entries(self, path: Path) -> Optional[list[str]]:
        """Sorted names in a directory; None when it does not exist or cannot be listed (the latter recorded)."""
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self._failed(path, exc)
            return None
