"""The amdsmi backend: AMD Instinct GPUs through the `amdsmi` Python wrapper over ROCm's libamd_smi.so.

(In gpudiag/probe/amdsmi/, named for the library it reads: `import amdsmi` here is still the vendor's package, imports
being absolute.)

Partitions. In CPX mode an MI300X is 8 logical GPUs, each its own processor handle (8 GPUs → 64 handles). Per
AMD SMI's partitioning guide (ROCm/amdsmi docs, "GPU partitioning", "Device enumeration"): all partitions of a
physical GPU share its PCIe domain:bus:device, the function field of the BDF that amdsmi reports carries the
partition number (0000:0c:00.0 … 0000:0c:00.7), `amdsmi_get_gpu_kfd_info()["current_partition_id"]` gives the
partition ID, and partition 0 (the primary) is the only one backed by the PCI device: device-wide data (power,
gpu_metrics, serials, partition modes) answer NOT_SUPPORTED on the others. So logical GPUs are grouped by
domain:bus:device and `physical_pci_bus_id` is the BDF of the group's partition 0. Kernels that moved the
partition number to bits [31:28] of the KFD location_id report every partition at function .0 (gpudiag issue 15
item 4): they are still grouped by domain:bus:device, share `pci_bus_id`, and are told apart by the KFD partition
ID (or, without it, the location_id bits from amdsmi_get_gpu_bdf_id), so 64 partitions stay 8 physical GPUs.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import field
from types import ModuleType
from typing import Any, Optional

from gpudiag.model import BackendInfo, DeviceSnapshot, ErrorKind, PeerLink, ProbeError, Vendor, normalize_pci_bus_id
from gpudiag.model.records import dataclass
from gpudiag.probe.amdsmi.calls import AmdsmiCaller, describe, get, integer, text
from gpudiag.probe.amdsmi.device import fill_device
from gpudiag.probe.amdsmi.peers import probe_pair
from gpudiag.probe.base import DeviceLost
from gpudiag.probe.deadline import CallTracker, abandoned_calls
from gpudiag.probe.stdout_capture import capture_stdout

log = logging.getLogger(__name__)

SOURCE = "amdsmi"


@dataclass
class Processor:
    """One amdsmi processor handle (a GPU, or one partition of a partitioned GPU) and where it belongs."""

    handle: Any  # ctypes.c_void_p
    pci_bus_id: Optional[str] = None
    partition_id: Optional[int] = None
    physical_pci_bus_id: Optional[str] = None
    primary: Optional["Processor"] = None  # partition 0 of the same physical GPU
    errors: list[ProbeError] = field(default_factory=list)  # met while enumerating; handed to its snapshot
    libdrm_missing: Optional[str] = None  # why, when amdsmi answered a BDF no PCI device has (LIBDRM_MISSING)


def import_amdsmi() -> tuple[Optional[ModuleType], Optional[ProbeError]]:
    """`import amdsmi` with its stdout chatter captured. Without libamd_smi.so the wrapper prints two lines and
    raises KeyError (not ImportError; docs/vendor-api.md §0)."""
    with capture_stdout() as captured:
        try:
            module = importlib.import_module("amdsmi")
        except ImportError as exc:
            error = ProbeError("amdsmi.import", ErrorKind.NOT_FOUND, f"amdsmi Python package not importable: {exc}")
        except (KeyError, OSError) as exc:
            error = ProbeError("amdsmi.import", ErrorKind.NOT_FOUND, f"libamd_smi.so could not be loaded ({exc!r})")
        else:
            error = None
    noise = captured.text.strip()
    if noise:
        log.debug("import amdsmi printed: %s", noise)
        if error is not None:
            error.message += ": " + " / ".join(line.strip() for line in noise.splitlines() if line.strip())
    return (None, error) if error is not None else (module, None)


# libamd_smi.so reads a GPU's BDF, ASIC, VBIOS and driver info through libdrm_amdgpu, which it dlopens; when that
# fails (ROCm tarball and TheRock installs ship it under another soname) it prints "Fail to open libdrm_amdgpu.so.1"
# to stderr, those calls answer NOT_SUPPORTED and the BDF is uninitialised memory: amd-smi showed an MI350 OAM at
# "BDF: 695f7570672f:31:05.7" (ROCm/rocm-systems PR 2987; fixed by the soname fallback of PR 8427). The KFD
# location ID (amdsmi_get_gpu_bdf_id, read from sysfs) still carries the real address.
LIBDRM_MISSING = (
    "amdsmi could not load libdrm_amdgpu (it reported the PCI address {bdf!r}, which no PCI device has): the BDF, "
    "ASIC, VBIOS and driver information it reads through libdrm are missing. Install the libdrm_amdgpu that ROCm "
    "ships (`libdrm-amdgpu1` / `libdrm-amdgpu-amdgpu1`; check `ldconfig -p | grep libdrm_amdgpu`), or a ROCm whose "
    "amd-smi falls back across libdrm sonames (ROCm/rocm-systems PR 8427)"
)
_LIBDRM_CALLS = (("amdsmi_get_gpu_asic_info", "name"), ("amdsmi_get_gpu_vbios_info", "vbios_version"))


class AmdsmiBackend:
    name = "amdsmi"
    vendor = Vendor.AMD

    def __init__(self) -> None:
        self._smi: Optional[ModuleType] = None
        self._initialised = False
        self._processors: list[Processor] = []

    def open(self, tracker: CallTracker) -> BackendInfo:
        info = BackendInfo(name=self.name, vendor=self.vendor)
        smi, info.error = import_amdsmi()
        if smi is None:
            return info
        self._smi = smi
        tracker.enter("amdsmi.amdsmi_init")
        try:
            smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)  # the flag must be the enum member (§0)
        except Exception as exc:  # noqa: BLE001 - any failure here means "amdsmi unusable", reported
            info.error = ProbeError("amdsmi.amdsmi_init", *describe(smi, exc))
            return info
        finally:
            tracker.leave()
        self._initialised = True
        try:
            return self._open_initialised(smi, tracker, info)
        except BaseException:
            # Every successful amdsmi_init is balanced by amdsmi_shut_down: the collector closes only the backends
            # it uses, and a failed open is not one of them.
            self.close()
            raise

    def _open_initialised(self, smi: ModuleType, tracker: CallTracker, info: BackendInfo) -> BackendInfo:
        errors: list[ProbeError] = []
        call = AmdsmiCaller(smi, tracker, errors)
        handles = call("amdsmi_get_processor_handles")
        if handles is None:
            info.error = errors[0] if errors else ProbeError(
                "amdsmi.amdsmi_get_processor_handles", ErrorKind.ERROR, "no processor handles"
            )
            self.close()  # the collector closes only backends it uses
            return info
        info.available = True
        info.library_version = _library_version(call("amdsmi_get_lib_version"))
        rocm = call("amdsmi_get_rocm_version")  # (found, "7.0.2") or (False, reason)
        info.runtime_version = rocm[1] if isinstance(rocm, tuple) and rocm[0] else None
        self._processors = self._enumerate(call, handles)
        info.device_count = len(self._processors)
        if self._processors:
            driver = self._quietly(call, "amdsmi_get_gpu_driver_info", self._processors[0].handle)
            info.driver_version = driver_release(text(get(driver, "driver_version")))
        degraded = next((p.libdrm_missing for p in self._processors if p.libdrm_missing), None)
        if degraded is not None:  # usable, but blind to what libdrm gives: driver.library says so
            info.error = ProbeError("amdsmi.libdrm", ErrorKind.ERROR, degraded)
        return info

    def _enumerate(self, call: AmdsmiCaller, handles: list[Any]) -> list[Processor]:
        processors = []
        for handle in handles:
            processor = Processor(handle=handle)
            own = AmdsmiCaller(call.smi, call.tracker, processor.errors)
            bdf = text(self._quietly(own, "amdsmi_get_gpu_device_bdf", handle))
            processor.pci_bus_id = self._bus_id(own, handle, bdf, processor)
            kfd = self._quietly(own, "amdsmi_get_gpu_kfd_info", handle)
            processor.partition_id = integer(get(kfd, "current_partition_id"))
            if processor.partition_id is None:
                # The KFD location_id: (domain << 32) | (partition << 28) | (bus << 8) | (device << 3) | function
                # (amdsmi.h). Kernels that give every partition function .0 carry the partition here.
                location = integer(self._quietly(own, "amdsmi_get_gpu_bdf_id", handle))
                processor.partition_id = (location >> 28) & 0xF if location is not None else None
            processors.append(processor)
        _group_partitions(processors)
        return processors

    def _bus_id(self, call: AmdsmiCaller, handle: Any, bdf: Optional[str], processor: Processor) -> Optional[str]:
        """The processor's BDF; one no PCI device can have (amdsmi without libdrm) is replaced by the KFD location
        ID's, and recorded on that processor alone, so that the other GPUs and the other calls are not affected."""
        if not bdf:
            return None
        try:
            return normalize_pci_bus_id(bdf)
        except ValueError:
            pass
        processor.libdrm_missing = LIBDRM_MISSING.format(bdf=bdf)
        processor.errors.append(ProbeError("amdsmi.amdsmi_get_gpu_device_bdf", ErrorKind.ERROR,
                                           processor.libdrm_missing))
        return _bdf_from_location(integer(self._quietly(call, "amdsmi_get_gpu_bdf_id", handle)))

    @staticmethod
    def _quietly(call: AmdsmiCaller, name: str, *args: Any) -> Any:
        """A call during enumeration: a lost device must not stop the others from being listed."""
        try:
            return call(name, *args)
        except DeviceLost:
            return None

    def device_count(self) -> int:
        return len(self._processors)

    def probe_device(self, index: int, tracker: CallTracker) -> DeviceSnapshot:
        processor = self._processors[index]
        device = DeviceSnapshot(
            index=index,
            vendor=self.vendor,
            source=SOURCE,
            pci_bus_id=processor.pci_bus_id,
            partition_id=processor.partition_id,
            physical_pci_bus_id=processor.physical_pci_bus_id,
        )
        tracker.partial = device  # a probe that misses its deadline is still reported with this identity
        device.errors.extend(processor.errors)
        call = AmdsmiCaller(self._smi, tracker, device.errors)
        try:
            fill_device(device, call, processor.handle)
            self._inherit_partition_modes(device, call, processor)
            if processor.libdrm_missing:  # NOT_SUPPORTED from these calls is libdrm's absence, not the GPU's
                device.errors.extend(ProbeError(f"amdsmi.{name}", ErrorKind.ERROR, processor.libdrm_missing)
                                     for name, attribute in _LIBDRM_CALLS if getattr(device, attribute) is None)
        except DeviceLost as exc:
            device.reachable = False
            source, _, message = str(exc).partition(": ")
            device.errors.append(ProbeError(source, ErrorKind.GPU_LOST, message))
        return device

    def cper_by_bus(self, tracker: CallTracker) -> dict[str, DeviceSnapshot]:
        """Each physical GPU's CPER records alone, by PCI bus ID (`gpudiag root-facts`: the ring is in debugfs, which
        only root may enter; probe/root_facts/gather.py)."""
        from gpudiag.probe.amdsmi.cper_entries import fill_cper

        found = {}
        for index, processor in enumerate(self._processors):
            if processor.pci_bus_id is None or processor.partition_id not in (None, 0):
                continue
            device = DeviceSnapshot(index=index, vendor=self.vendor, source=SOURCE, pci_bus_id=processor.pci_bus_id)
            try:
                fill_cper(device, AmdsmiCaller(self._smi, tracker, device.errors), processor.handle)
            except DeviceLost as exc:
                device.errors.append(ProbeError("amdsmi.amdsmi_get_gpu_cper_entries", ErrorKind.GPU_LOST, str(exc)))
            found[processor.pci_bus_id] = device
        return found

    @staticmethod
    def _inherit_partition_modes(device: DeviceSnapshot, call: AmdsmiCaller, processor: Processor) -> None:
        """Secondary partitions do not report the partition modes; they are those of partition 0 (the
        partitioning guide: "read it from the partition with ID 0 in the same socket")."""
        primary = processor.primary
        if primary is None or primary is processor:
            return
        if device.compute_partition is None:
            device.compute_partition = text(call("amdsmi_get_gpu_compute_partition", primary.handle))
        if device.memory_partition is None:
            device.memory_partition = text(call("amdsmi_get_gpu_memory_partition", primary.handle))

    def probe_peers(self, devices: list[DeviceSnapshot], tracker: CallTracker) -> list[PeerLink]:
        """XGMI/PCIe link and P2P access between physical GPUs. Logical partitions share their physical GPU's
        links, so 64 CPX partitions are not paired 2016 times."""
        known = len(self._processors)
        physical = [d for d in devices if d.reachable and not d.is_logical_partition and d.index < known]
        errors: list[ProbeError] = []
        call = AmdsmiCaller(self._smi, tracker, errors)
        peers = []
        for position, first in enumerate(physical):
            for second in physical[position + 1 :]:
                try:
                    peers.append(probe_pair(call, first, second, self._handle(first), self._handle(second)))
                except DeviceLost as exc:
                    log.warning("amdsmi peers %s-%s: %s", first.index, second.index, exc,
                                extra={"bound": ("amdsmi peers", first.index, second.index)})
        for error in errors:
            log.warning("amdsmi peers: %s: %s", error.source, error.message, extra={"bound": ("amdsmi peers",)})
        return peers

    def _handle(self, device: DeviceSnapshot) -> Any:
        return self._processors[device.index].handle

    def close(self) -> None:
        # Shutting the library down under a thread still hung inside it can hang too (deadline.py).
        if self._smi is None or not self._initialised or abandoned_calls():
            return
        try:
            self._smi.amdsmi_shut_down()  # with an underscore; there is no amdsmi_shutdown (§0)
        except Exception as exc:  # noqa: BLE001 - nothing to do about it at exit but say so
            log.warning("amdsmi_shut_down failed: %s", exc)
        self._initialised = False


# amdsmi 6.4-7.0 with the in-tree amdgpu (no /sys/module/amdgpu/version) reports the whole /proc/version with its
# spaces removed, e.g. "Linuxversion6.8.0-79-generic(buildd@lcy02-amd64-100)(x86_64-linux-gnu-gcc-13…"
# (ROCm/k8s-device-plugin#157). The kernel release in it is the in-tree driver's version.
_PROC_VERSION = re.compile(r"^Linux\s*version\s*([^\s(]+)")


def driver_release(version: Optional[str]) -> Optional[str]:
    match = _PROC_VERSION.match(version or "")
    return match.group(1) if match else version


def _bdf_from_location(location: Optional[int]) -> Optional[str]:
    """(domain << 32) | (partition << 28) | (bus << 8) | (device << 3) | function (amdsmi.h) → "dddd:bb:dd.f"."""
    if location is None or location < 0 or location >> 32 > 0xFFFFFFFF:
        return None
    return (f"{location >> 32:04x}:{(location >> 8) & 0xFF:02x}:{(location >> 3) & 0x1F:02x}."
            f"{location & 0x7}")


def _library_version(version: Any) -> Optional[str]:
    parts = [get(version, name) for name in ("major", "minor", "release")]
    return ".".join(str(p) for p in parts) if all(isinstance(p, int) for p in parts) else None


def _group_partitions(processors: list[Processor]) -> None:
    """Group handles by PCIe domain:bus:device (one physical GPU) and point each at its partition 0."""
    groups: dict[str, list[Processor]] = {}
    for processor in processors:
        if processor.pci_bus_id is not None:
            groups.setdefault(processor.pci_bus_id.rsplit(".", 1)[0], []).append(processor)
    for physical_device, members in groups.items():
        if len(members) > 1:
            for member in members:
                if member.partition_id is None:  # the guide's fallback: the function field carries it
                    member.partition_id = int(member.pci_bus_id.rsplit(".", 1)[1])
        primary = next((m for m in members if m.partition_id in (0, None)), None)
        # Partition 0 sits at function 0 (the BDF layout above), so that is the physical BDF even when the
        # primary's own handle could not be read.
        physical_bus_id = primary.pci_bus_id if primary is not None else f"{physical_device}.0"
        for member in members:
            member.physical_pci_bus_id = physical_bus_id
            member.primary = primary
