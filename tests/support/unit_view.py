"""The file-system view of a shipped unit's sandbox over a fake tree, set up as root inside a fresh mount namespace
(`unshare --mount`) just before the credentials change: `python -m tests.support.unit_view ROOT [--private-network] --
COMMAND` overmounts what the kernel shows that unit's process differently from root, then runs COMMAND in that view
(tests/support/as_deployed.py runs `setpriv … gpudiag …` as COMMAND). Standard library only: it runs before anything
else.

- A PCI function's `config` gives a reader without CAP_SYS_ADMIN its first 64 bytes (drivers/pci/pci-sysfs.c,
  pci_read_config: `if (!capable(CAP_SYS_ADMIN)) size = 64` past the header it may read): each one is overmounted
  with its first 64 bytes.
- PrivateNetwork=yes gives the unit a network namespace and a fresh sysfs mounted in it (systemd
  src/core/namespace.c: `if (p->private_network)` adds "/sys" as MOUNT_PRIVATE_SYSFS), whose /sys/class/net and
  device net/ directories list that namespace's interfaces only, none of the host's: they are overmounted empty.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

UNPRIVILEGED_CONFIG_BYTES = 64
_MS_BIND = 4096


def _bind(source: Path, target: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(str(source).encode(), str(target).encode(), None, _MS_BIND, None) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), str(target))


def unit_view(root: Path, private_network: bool) -> None:
    """Inside the unit's mount namespace, as root before the credentials change: the overmounts of the docstring
    (their sources beside the tree, in ROOT.view/)."""
    scratch = root.parent / f"{root.name}.view"
    scratch.mkdir(mode=0o755, exist_ok=True)
    empty = scratch / "empty"
    empty.mkdir(mode=0o755, exist_ok=True)
    configs, nets = [], []
    for directory, dirs, files in os.walk(root / "sys/devices"):  # never into links: the tree has loops
        configs += [Path(directory) / "config"] if "config" in files else []
        nets += [Path(directory) / "net"] if "net" in dirs else []
    for number, config in enumerate(sorted(configs)):
        if not config.is_symlink():
            head = scratch / f"config{number}"
            head.write_bytes(config.read_bytes()[:UNPRIVILEGED_CONFIG_BYTES])
            head.chmod(config.stat().st_mode & 0o777)
            _bind(head, config)
    if private_network:
        for directory in [root / "sys/class/net", *nets]:
            if directory.is_dir() and not directory.is_symlink():
                _bind(empty, directory)


def main(argv: list[str]) -> None:
    separator = argv.index("--")
    own, command = argv[:separator], argv[separator + 1:]
    unit_view(Path(own[0]), "--private-network" in own)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
