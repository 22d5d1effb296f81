"""A builder for fake `/sys`, `/proc`, `/etc` and `/dev/kmsg` trees, laid out as the kernel lays them out, for any
probe that reads under `--root`.

Structure, as on a real machine (so that realpath, symlink basenames and parent directories mean what they
mean there):

    sys/devices/pci0000:00/<upstream bdf>/<device bdf>/      the device's attributes (vendor, class, link …)
    sys/bus/pci/devices/<bdf>        -> ../../../devices/pci0000:00/…/<bdf>
    <device>/driver                  -> …/sys/bus/pci/drivers/<name>
    <device>/iommu_group             -> …/sys/kernel/iommu_groups/<n>   (with a `type` file)
    sys/module/<name>/version, sys/class/iommu/<name>, sys/devices/system/node/node<N>
    proc/cmdline, proc/modules, proc/sys/kernel/{hostname,osrelease}, proc/driver/nvidia/version
    etc/os-release, dev/kmsg (a regular file: one record per line)

Symlinks are relative, like the kernel's, so the tree can be moved. Everything is written in the kernel's own text
formats (a trailing newline on every attribute). Methods return the path they wrote so a test can break or
remove it afterwards. `deny_reads` simulates files the probing user may not read, which chmod cannot do when
the tests run as root.

Usage:
    tree = SysfsTree(tmp_path)
    tree.add_pci_gpu("0000:3b:00.0", upstream=("0000:3a:00.0", "32.0 GT/s PCIe", 16))
    gpus, errors = probe_pci_gpus(tree.root)
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Iterable, Optional

# (current speed, current width, max speed, max width) as the kernel prints them: "32.0 GT/s PCIe" on kernels
# >= 5.7, "32 GT/s" before, "Unknown" for a link that is down.
Link = tuple[str, int, str, int]
Upstream = tuple[str, str, int]  # (bus ID, max_link_speed, max_link_width) of the port the device hangs off

H200_LINK: Link = ("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
# aer_dev_* totals line per kind (drivers/pci/pcie/aer.c, aer_stats_dev_attr).
AER_TOTAL_NAME = {"correctable": "TOTAL_ERR_COR", "nonfatal": "TOTAL_ERR_NONFATAL", "fatal": "TOTAL_ERR_FATAL"}
AER_FILE = {"correctable": "aer_dev_correctable", "nonfatal": "aer_dev_nonfatal", "fatal": "aer_dev_fatal"}
IORESOURCE_MEM_64_PREFETCH = 0x14220C  # flags of a 64-bit prefetchable memory BAR as `resource` shows them
IORESOURCE_MEM_32 = 0x40200
IORESOURCE_IO = 0x40101


class SysfsTree:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    # -- generic ----------------------------------------------------------------------------------------------

    def path(self, relative: str) -> Path:
        return self.root / relative.lstrip("/")

    def write(self, relative: str, text: str) -> Path:
        """Write an attribute; a trailing newline is added as sysfs does (pass text ending in one to keep it)."""
        path = self.path(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") or text == "" else text + "\n")
        return path

    def symlink(self, relative: str, target_relative: str) -> Path:
        """A relative symlink at `relative` pointing to `target_relative` (both root-relative)."""
        link, target = self.path(relative), self.path(target_relative)
        link.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir(parents=True, exist_ok=True)  # link targets are directories (drivers, groups, devices)
        link.symlink_to(os.path.relpath(target, link.parent))
        return link

    # -- PCI --------------------------------------------------------------------------------------------------

    def add_pci_device(
        self,
        bdf: str,
        *,
        vendor: str,
        device: str,
        class_code: str,
        link: Optional[Link] = None,
        upstream: Optional[Upstream] = None,
        aer: Optional[dict[str, dict[str, int]]] = None,
        numa_node: Optional[int] = None,
        local_cpulist: Optional[str] = None,
        iommu_group: Optional[int] = None,
        iommu_type: Optional[str] = None,
        bars: Optional[list[tuple[int, int, int]]] = None,
        driver: Optional[str] = None,
        bridges: tuple[str, ...] = (),
    ) -> Path:
        """Any PCI function. `aer`: {"correctable": {"RxErr": 2, …}, …} — each kind given gets its file with the
        TOTAL_ERR_* line added (the sum); kinds not given get no file. `bars`: (start, size, flags) per resource
        line, in index order; (0, 0, 0) is an unassigned BAR. Optional attributes left None are not written.
        `bridges`: the ports above `upstream`, root port first (a root port and a PCIe switch's upstream port)."""
        parent = "sys/devices/pci0000:00"
        for bridge in bridges:
            parent = f"{parent}/{bridge}"
            if not self.path(f"sys/bus/pci/devices/{bridge}").is_symlink():
                self._attributes(parent, vendor="0x1000", device="0xc030", **{"class": "0x060400"})
                self.symlink(f"sys/bus/pci/devices/{bridge}", parent)
        if upstream is not None:
            up_bdf, up_speed, up_width = upstream
            parent = f"{parent}/{up_bdf}"
            if not self.path(f"sys/bus/pci/devices/{up_bdf}").is_symlink():
                self._attributes(parent, vendor="0x8086", device="0x352a", **{"class": "0x060400"})
                self._attributes(parent, max_link_speed=up_speed, max_link_width=up_width)
                self.symlink(f"sys/bus/pci/devices/{up_bdf}", parent)
        directory = f"{parent}/{bdf}"
        self._attributes(directory, vendor=vendor, device=device, **{"class": class_code})
        if link is not None:
            cur_speed, cur_width, max_speed, max_width = link
            self._attributes(directory, current_link_speed=cur_speed, current_link_width=cur_width,
                             max_link_speed=max_speed, max_link_width=max_width)
        self._attributes(directory, numa_node=numa_node, local_cpulist=local_cpulist)
        for kind, counters in (aer or {}).items():
            lines = [f"{name} {count}" for name, count in counters.items()]
            lines.append(f"{AER_TOTAL_NAME[kind]} {sum(counters.values())}")
            self.write(f"{directory}/{AER_FILE[kind]}", "\n".join(lines))
        if bars is not None:
            self.write(f"{directory}/resource", "\n".join(
                f"0x{start:016x} 0x{(start + size - 1) if size else 0:016x} 0x{flags:016x}"
                for start, size, flags in bars
            ))
        if driver is not None:
            self.symlink(f"{directory}/driver", f"sys/bus/pci/drivers/{driver}")
        if iommu_group is not None:
            group = f"sys/kernel/iommu_groups/{iommu_group}"
            self.symlink(f"{directory}/iommu_group", group)
            if iommu_type is not None:
                self.write(f"{group}/type", iommu_type)
        self.symlink(f"sys/bus/pci/devices/{bdf}", directory)
        return self.path(directory)

    def add_pci_gpu(
        self,
        bdf: str,
        *,
        vendor: str = "0x10de",
        device: str = "0x2335",  # H200 SXM
        class_code: str = "0x030200",  # 3D controller
        link: Optional[Link] = H200_LINK,
        driver: Optional[str] = "nvidia",
        numa_node: Optional[int] = 0,
        local_cpulist: Optional[str] = "0-47,96-143",
        **kwargs,
    ) -> Path:
        """A GPU with an H200's defaults; every `add_pci_device` keyword may be given."""
        return self.add_pci_device(bdf, vendor=vendor, device=device, class_code=class_code, link=link,
                                   driver=driver, numa_node=numa_node, local_cpulist=local_cpulist, **kwargs)

    def _attributes(self, directory: str, **values) -> None:
        for name, value in values.items():
            if value is not None:
                self.write(f"{directory}/{name}", str(value))

    # -- host -------------------------------------------------------------------------------------------------

    def add_module(self, name: str, version: Optional[str] = None, *, builtin: bool = False) -> None:
        """A loaded module: a /proc/modules line (unless built in) and /sys/module/<name>[/version]."""
        if not builtin:
            line = f"{name} 54140928 12 - Live 0x0000000000000000 (POE)\n"
            modules = self.path("proc/modules")
            self.write("proc/modules", (modules.read_text() if modules.exists() else "") + line)
        self.path(f"sys/module/{name}/parameters").mkdir(parents=True, exist_ok=True)
        if version is not None:
            self.write(f"sys/module/{name}/version", version)

    def set_cmdline(self, cmdline: str) -> Path:
        return self.write("proc/cmdline", cmdline)

    def set_hostname(self, hostname: str) -> Path:
        return self.write("proc/sys/kernel/hostname", hostname)

    def set_kernel_release(self, release: str) -> Path:
        return self.write("proc/sys/kernel/osrelease", release)

    def set_os_release(self, text: str) -> Path:
        return self.write("etc/os-release", text)

    def set_proc_nvidia_version(self, text: str) -> Path:
        return self.write("proc/driver/nvidia/version", text)

    def add_iommu(self, name: str = "dmar0") -> Path:
        self.path("sys/class/iommu").mkdir(parents=True, exist_ok=True)
        return self.symlink(f"sys/class/iommu/{name}", f"sys/devices/virtual/iommu/{name}")

    def add_numa_nodes(self, count: int) -> None:
        for node in range(count):
            self.write(f"sys/devices/system/node/node{node}/cpulist", f"{node * 48}-{node * 48 + 47}")
        self.write("sys/devices/system/node/possible", f"0-{count - 1}")

    def add_kmsg(self, lines: Iterable[str]) -> Path:
        """Append lines to dev/kmsg (a regular file here: one record per line, continuation lines as given)."""
        kmsg = self.path("dev/kmsg")
        existing = kmsg.read_text() if kmsg.exists() else ""
        if not kmsg.exists():
            return self.write("dev/kmsg", "".join(f"{line}\n" for line in lines))
        # Replaced whole, as the kernel's ring buffer grows: a service collecting meanwhile must never read a log
        # cut short (it would see its Xid 48 vanish and come back, an episode ended and begun again).
        fresh = kmsg.with_name(".kmsg.new")
        fresh.write_text(existing + "".join(f"{line}\n" for line in lines))
        os.replace(fresh, kmsg)
        return kmsg


def deny_reads(monkeypatch, *paths: Path) -> None:
    """Make opening, listing or following any of `paths` fail with EACCES, as for a file the user may not read.
    Patches the builtin `open`, `os.open`, `os.listdir` and `os.readlink`, which is what the probes read with."""
    denied = {os.fspath(p) for p in paths}

    def guard(original):
        def guarded(path, *args, **kwargs):
            if os.fspath(path) in denied:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return original(path, *args, **kwargs)

        return guarded

    monkeypatch.setattr(builtins, "open", guard(builtins.open))
    for name in ("open", "listdir", "readlink"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
