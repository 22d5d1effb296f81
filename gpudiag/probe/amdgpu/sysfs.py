"""The amdgpu sysfs backend: what the kernel driver itself exposes, for when amdsmi is unusable (library missing,
an older ROCm, no permission).

It reads `sys/class/drm/card*/device` under `root` for the cards bound to amdgpu: hwmon (temperatures in
millidegrees, power in µW), RAS error counters and retired pages, VRAM usage, the PCI link, identity and partition
modes. Every device it fills says `source="amdgpu-sysfs"`. File formats: sysfs_formats.py.

What sysfs cannot give, and stays None: throttle reasons (only in the binary gpu_metrics), XGMI link states,
P2P, the bad-page threshold when the driver computes it, and the logical GPUs of a partitioned device (their DRM
render nodes hang off platform devices, not off the PCI device; the card's partition modes are reported).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from gpudiag.model import BackendInfo, DeviceSnapshot, ErrorKind, PeerLink, ProbeError, TemperatureSensor, Vendor
from gpudiag.model import normalize_pci_bus_id
from gpudiag.probe.amdgpu import sysfs_formats as formats
from gpudiag.probe.deadline import CallTracker
from gpudiag.probe.files import FileReader
from gpudiag.probe.pcie_generation import generation_from_gts_text

SOURCE = "amdgpu-sysfs"
_CARD = re.compile(r"^card(\d+)$")  # not renderD*, not connectors such as card0-DP-1
_TEMP_INPUT = re.compile(r"^temp(\d+)_input$")
# hwmon temp*_label values (amdgpu_pm.c temp_label[]) → the sensor names probe/amdsmi/device.py uses.
_SENSOR_NAMES = {"edge": "edge", "junction": "hotspot", "mem": "vram"}


class _TrackedReader(FileReader):
    """A FileReader that names each file to the tracker: a read of a wedged GPU's hwmon can block in the driver."""

    def __init__(self, root: Path, errors: list[ProbeError], tracker: CallTracker):
        super().__init__(root, errors)
        self.tracker = tracker

    def _tracked(self, method, path: Path):
        self.tracker.enter(f"sysfs:{self.shown(path)}")
        try:
            return method(path)
        finally:
            self.tracker.leave()

    def text(self, path: Path) -> Optional[str]:
        return self._tracked(super().text, path)

    def link_name(self, path: Path) -> Optional[str]:
        return self._tracked(super().link_name, path)

    def entries(self, path: Path) -> Optional[list[str]]:
        return self._tracked(super().entries, path)


class AmdgpuSysfsBackend:
    name = "amdgpu-sysfs"
    vendor = Vendor.AMD

    def __init__(self, root: Path = Path("/")):
        self.root = Path(root)
        self._cards: list[tuple[str, Optional[str]]] = []  # (card name, PCI bus ID)

    def open(self, tracker: CallTracker) -> BackendInfo:
        info = BackendInfo(name=self.name, vendor=self.vendor)
        errors: list[ProbeError] = []
        reader = _TrackedReader(self.root, errors, tracker)
        drm = reader.path("sys/class/drm")
        names = reader.entries(drm)
        if names is None:
            info.error = errors[0] if errors else ProbeError(
                f"sysfs:{reader.shown(drm)}", ErrorKind.NOT_FOUND, "no DRM devices: is the amdgpu driver loaded?"
            )
            return info
        cards = sorted((n for n in names if _CARD.match(n)), key=lambda n: int(_CARD.match(n).group(1)))
        for card in cards:
            device = drm / card / "device"
            if reader.link_name(device / "driver") == "amdgpu":
                self._cards.append((card, _bus_id(device)))
        info.available = True
        info.device_count = len(self._cards)
        # Only out-of-tree (DKMS) amdgpu has a version; the in-kernel driver is the kernel release (host probe).
        info.driver_version = reader.line(reader.path("sys/module/amdgpu/version"))
        return info

    def device_count(self) -> int:
        return len(self._cards)

    def probe_device(self, index: int, tracker: CallTracker) -> DeviceSnapshot:
        card, bus_id = self._cards[index]
        device = DeviceSnapshot(index=index, vendor=self.vendor, source=SOURCE, pci_bus_id=bus_id)
        tracker.partial = device  # a read that hangs past the deadline still leaves the GPU named
        reader = _TrackedReader(self.root, device.errors, tracker)
        path = reader.path(f"sys/class/drm/{card}/device")
        if not path.is_dir():
            device.reachable = False
            reader.record(path, ErrorKind.GPU_LOST, "the device is gone from sysfs (fell off the bus?)")
            return device
        _identity(device, reader, path)
        _pcie(device, reader, path)
        _hwmon(device, reader, path)
        _ras(device, reader, path)
        device.memory.total_bytes = reader.integer(path / "mem_info_vram_total")
        device.memory.used_bytes = reader.integer(path / "mem_info_vram_used")
        return device

    def probe_peers(self, devices: list[DeviceSnapshot], tracker: CallTracker) -> list[PeerLink]:
        return []  # sysfs has no P2P or XGMI topology the way amdsmi reports it

    def close(self) -> None:
        pass


def _bus_id(device: Path) -> Optional[str]:
    """`card0/device` links to the PCI device's directory, named by its bus ID."""
    try:
        return normalize_pci_bus_id(device.resolve().name)
    except (ValueError, OSError):
        return None


def _identity(device: DeviceSnapshot, reader: FileReader, path: Path) -> None:
    device.name = reader.line(path / "product_name") or None  # from the board FRU; empty when there is none
    device.serial = reader.line(path / "serial_number") or reader.line(path / "unique_id") or None
    device.vbios_version = reader.line(path / "vbios_version") or None
    device.compute_partition = reader.line(path / "current_compute_partition") or None
    device.memory_partition = reader.line(path / "current_memory_partition") or None
    numa = reader.integer(path / "numa_node")
    device.numa_node = numa if numa is not None and numa >= 0 else None
    for entry in reader.entries(path / "fw_version") or []:
        if entry.endswith("_fw_version"):
            version = reader.line(path / "fw_version" / entry)
            if version:
                device.firmware_versions[entry.removesuffix("_fw_version").upper()] = version


def _pcie(device: DeviceSnapshot, reader: FileReader, path: Path) -> None:
    pcie = device.pcie
    pcie.current_generation = generation_from_gts_text(reader.line(path / "current_link_speed"))
    pcie.current_width = reader.integer(path / "current_link_width")
    # The endpoint's max_link_* is the GPU's own capability; the slot's is the upstream port's (host probe).
    pcie.device_max_generation = generation_from_gts_text(reader.line(path / "max_link_speed"))
    pcie.device_max_width = reader.integer(path / "max_link_width")
    if pcie.current_generation is None:
        # pp_dpm_pcie marks the level the link runs at; some ASICs have no such file.
        levels = formats.parse_pp_dpm_pcie(reader.text(path / "pp_dpm_pcie") or "")
        current = [level for level in levels if level.current]
        if current:
            pcie.current_generation, pcie.current_width = current[0].generation, current[0].width


def _hwmon(device: DeviceSnapshot, reader: FileReader, path: Path) -> None:
    monitors = [m for m in reader.entries(path / "hwmon") or [] if m.startswith("hwmon")]
    if not monitors:
        return
    hwmon = path / "hwmon" / monitors[0]
    for entry in reader.entries(hwmon) or []:
        match = _TEMP_INPUT.match(entry)
        if not match:
            continue
        prefix = f"temp{match.group(1)}"
        label = reader.line(hwmon / f"{prefix}_label") or prefix
        current = _millidegrees(reader.integer(hwmon / entry))
        if current is None:
            continue
        device.temperatures[_SENSOR_NAMES.get(label, label)] = TemperatureSensor(
            current_celsius=current,
            slowdown_celsius=_millidegrees(reader.integer(hwmon / f"{prefix}_crit")),
            shutdown_celsius=_millidegrees(reader.integer(hwmon / f"{prefix}_emergency")),
        )
    power = device.power
    power.draw_watts = _watts(reader.integer(hwmon / "power1_average"))
    if power.draw_watts is None:
        power.draw_watts = _watts(reader.integer(hwmon / "power1_input"))  # newer kernels and ASICs (MI300)
    power.limit_watts = _watts(reader.integer(hwmon / "power1_cap"))
    power.default_limit_watts = _watts(reader.integer(hwmon / "power1_cap_default"))
    power.min_limit_watts = _watts(reader.integer(hwmon / "power1_cap_min"))
    power.max_limit_watts = _watts(reader.integer(hwmon / "power1_cap_max"))


def _millidegrees(value: Optional[int]) -> Optional[float]:
    return value / 1000 if value is not None else None


def _watts(microwatts: Optional[int]) -> Optional[float]:
    return microwatts / 1e6 if microwatts is not None else None


def _ras(device: DeviceSnapshot, reader: FileReader, path: Path) -> None:
    ras = path / "ras"
    entries = reader.entries(ras)
    if entries is None:  # no RAS on this ASIC, or RAS switched off (amdgpu.ras_enable=0)
        device.unsupported[f"sysfs:{reader.shown(ras)}"] = ("amdgpu publishes no ras/ directory (RAS is off, "
                                                             "amdgpu.ras_enable=0, or the part has no RAS)")
        return
    features = reader.text(ras / "features")
    device.ecc.enabled = formats.umc_ecc_enabled(features) if features is not None else None
    complete = True
    for entry in (e for e in entries if e.endswith("_err_count")):
        text = reader.text(ras / entry)
        counts = formats.parse_err_count(text) if text is not None else None
        if counts is None:
            complete = False
            if text is not None:
                inaccessible = formats.RAS_QUERY_INACCESSIBLE in text
                why = "a RAS interrupt is being handled" if inaccessible else "unexpected"
                if inaccessible:
                    device.ecc.unreadable_blocks.append(entry.removesuffix("_err_count"))
                shown = reader.shown(ras / entry)
                reader.record(ras / entry, ErrorKind.ERROR, f"{shown} reads {text.strip()!r} ({why})")
            continue
        device.ecc.by_block[entry.removesuffix("_err_count")] = counts
    if complete and device.ecc.by_block:  # a total over some of the blocks would under-count
        blocks = device.ecc.by_block.values()
        device.ecc.volatile_corrected = sum(b["corrected"] for b in blocks)
        device.ecc.volatile_uncorrected = sum(b["uncorrected"] for b in blocks)
        if all("deferred" in b for b in blocks):
            device.ecc.deferred = sum(b["deferred"] for b in blocks)
    _bad_pages(device, reader, ras)


def _bad_pages(device: DeviceSnapshot, reader: FileReader, ras: Path) -> None:
    text = reader.text(ras / "gpu_vram_bad_pages")
    if text is not None:
        counts = formats.parse_bad_pages(text)
        if counts is None:
            reader.record(ras / "gpu_vram_bad_pages", ErrorKind.ERROR, "unrecognised gpu_vram_bad_pages content")
        else:
            health = device.memory_health
            health.bad_pages_reserved, health.bad_pages_pending = counts.reserved, counts.pending
            health.bad_pages_unreservable = counts.unreservable
    # The amdgpu.bad_page_threshold parameter: a positive value is the threshold; -1 (default) means the driver
    # computes it from the VRAM size, which sysfs does not show, and -2 / 0 switch the limit off.
    threshold = reader.integer(reader.path("sys/module/amdgpu/parameters/bad_page_threshold"))
    device.memory_health.bad_page_threshold = threshold if threshold is not None and threshold > 0 else None
