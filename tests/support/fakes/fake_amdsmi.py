"""A fake libamd_smi.so under the real amdsmi 7.0.2 Python wrapper.

`ctypes.CDLL` is patched so that `import amdsmi` loads `FakeLibAmdSmi` instead of ROCm's library (docs/vendor-api.md
§13). The wrapper binds every C symbol at import and sets `restype`/`argtypes` on it; then, on each call, it hands
our functions the same ctypes objects it would hand C (`c_void_p` handles, `byref()` structs, string buffers,
IntEnum arguments) and decodes what we write into them. So the wrapper's own behaviour is exercised: "N/A" for
sentinel values, enum members, exceptions from status codes.

The node is described by `amd_node.FakeAmdNode`. Partitioned GPUs (CPX) show one processor handle per partition,
with the BDF function = partition number, and answer NOT_SUPPORTED on secondary partitions for the device-wide
calls, as AMD SMI's partitioning guide describes.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import sys
from typing import Any, Callable, Iterator

from tests.support.fakes.amd_node import XGMI_DISABLED, FakeAmdGpu, FakeAmdNode
from tests.support.fakes.fake_amdsmi_identity import NEEDS_LIBDRM, IdentityCalls

SUCCESS, NOT_SUPPORTED, INVAL, NOT_FOUND, AMDGPU_RESTART_ERR = 0, 2, 1, 31, 54
API_FAILED, UNEXPECTED_DATA, OUT_OF_RESOURCES, MORE_DATA = 7, 43, 15, 39
UINT16_NA, UINT32_NA, UINT64_NA = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF

# amdsmi_temperature_type_t and amdsmi_temperature_metric_t values of the C header.
SENSOR = {0: "edge", 1: "hotspot", 2: "vram"}
METRIC_CURRENT, METRIC_CRITICAL, METRIC_EMERGENCY = 0, 5, 7
LINK_TYPE_INTERNAL, LINK_TYPE_XGMI = 0, 2

# Answered only by partition 0 of a partitioned GPU: the device-wide data (partitioning guide, "Primary and
# secondary partitions").
PRIMARY_ONLY = {
    "amdsmi_get_gpu_board_info", "amdsmi_get_gpu_vbios_info", "amdsmi_get_fw_info", "amdsmi_get_pcie_info",
    "amdsmi_get_gpu_ecc_enabled", "amdsmi_get_gpu_total_ecc_count", "amdsmi_get_gpu_ecc_count",
    "amdsmi_get_gpu_bad_page_info", "amdsmi_get_gpu_bad_page_threshold", "amdsmi_get_temp_metric",
    "amdsmi_get_power_info", "amdsmi_get_power_cap_info", "amdsmi_get_energy_count",
    "amdsmi_get_gpu_xgmi_link_status", "amdsmi_gpu_xgmi_error_status", "amdsmi_get_gpu_compute_partition",
    "amdsmi_get_gpu_memory_partition", "amdsmi_get_gpu_metrics_header_info", "amdsmi_get_gpu_cper_entries",
}
# Still answered for a lost GPU: cached by the library at discovery.
CACHED_AT_DISCOVERY = {"amdsmi_get_gpu_device_bdf", "amdsmi_get_gpu_kfd_info"}


def _target(argument: Any) -> Any:
    """The ctypes object behind `ctypes.byref(obj)`, or the object itself (arrays, buffers)."""
    return getattr(argument, "_obj", argument)


class Processor:
    def __init__(self, gpu: FakeAmdGpu, partition: int, handle: int):
        self.gpu, self.partition, self.handle = gpu, partition, handle

    @property
    def secondary(self) -> bool:
        return self.partition > 0


class _CFunction:
    """One C symbol: the wrapper sets restype/argtypes on it and calls it."""

    def __init__(self, name: str, implementation: Callable[..., int]):
        self.__name__ = name
        self.implementation = implementation
        self.restype = self.argtypes = None

    def __call__(self, *args: Any) -> int:
        return self.implementation(*args)


class FakeLibAmdSmi(IdentityCalls):
    def __init__(self, node: FakeAmdNode):
        self.node = node
        self.calls: list[str] = []
        self.unmodelled: set[str] = set()  # symbols called that this fake does not model (answered NOT_SUPPORTED)
        self.processors: dict[int, Processor] = {}
        self.sockets: dict[int, list[Processor]] = {}
        self._keep_alive: list[Any] = []

    def __getattr__(self, name: str) -> _CFunction:
        if not name.startswith("amdsmi_"):
            raise AttributeError(name)
        implementation = getattr(type(self), "c_" + name, None)
        function = _CFunction(name, self._guarded(name, implementation))
        setattr(self, name, function)  # bound once, like a real symbol
        return function

    def _guarded(self, name: str, implementation: Any) -> Callable[..., int]:
        def call(*args: Any) -> int:
            self.calls.append(name)
            failure = self.node.failing_calls.get(name)
            if isinstance(failure, list) and failure:
                code = failure.pop(0)
                if code is not None:  # None: this call answers normally, the next ones in the list fail
                    return code
                failure = None
            if isinstance(failure, int):
                return failure
            if self.node.libdrm_missing and name in NEEDS_LIBDRM:
                return NOT_SUPPORTED
            if implementation is None:
                self.unmodelled.add(name)
                return NOT_SUPPORTED
            processors = [self.processors.get(a.value) for a in args if isinstance(a, ctypes.c_void_p)]
            if any(p is None for p in processors) and name not in ("amdsmi_get_processor_handles",):
                return NOT_FOUND
            if processors and name not in ("amdsmi_get_processor_handles",):
                if processors[0].gpu.hang_in == name:
                    self.node.unhang.wait(10)  # a call wedged in the driver; bounded so the thread ends
                if any(p.gpu.lost for p in processors) and name not in CACHED_AT_DISCOVERY:
                    return AMDGPU_RESTART_ERR
                if processors[0].secondary and name in PRIMARY_ONLY:
                    return NOT_SUPPORTED
                return implementation(self, *processors, *args[len(processors) :])
            return implementation(self, *args)

        return call

    # -- discovery -------------------------------------------------------------------------------------------

    def c_amdsmi_init(self, flags: int) -> int:
        if self.node.init_status == SUCCESS:
            handle = 0x1000
            for socket, gpu in enumerate(self.node.gpus):
                members = []
                for partition in range(gpu.partitions):
                    if partition in gpu.missing_partitions:
                        continue  # its DRM node is held by another driver: amdsmi does not list it
                    members.append(Processor(gpu, partition, handle))
                    self.processors[handle] = members[-1]
                    handle += 1
                self.sockets[0x100 + socket] = members
        return self.node.init_status

    def c_amdsmi_shut_down(self) -> int:
        return SUCCESS

    def c_amdsmi_get_lib_version(self, version: Any) -> int:
        v = _target(version)
        v.major, v.minor, v.release = self.node.lib_version
        build = ctypes.create_string_buffer(b"0")
        self._keep_alive.append(build)
        v.build = ctypes.cast(build, ctypes.POINTER(ctypes.c_char))
        return SUCCESS

    def c_amdsmi_get_socket_handles(self, count: Any, handles: Any) -> int:
        _target(count).value = len(self.sockets)
        if isinstance(handles, ctypes.Array):
            for i, socket in enumerate(self.sockets):
                handles[i] = socket
        return SUCCESS

    def c_amdsmi_get_processor_handles(self, socket: Any, count: Any, handles: Any) -> int:
        members = self.sockets.get(socket.value)
        if members is None:
            return INVAL
        _target(count).value = len(members)
        if isinstance(handles, ctypes.Array):
            for i, processor in enumerate(members):
                handles[i] = processor.handle
        return SUCCESS

    def _undecodable(self, p: Processor) -> bool:
        """A gpu_metrics table newer than this library decodes (amdsmi 7.0.2: v1.8): its values read N/A."""
        return p.gpu.metrics_version > self.node.metrics_decoded_up_to

    # -- PCIe, RAS -------------------------------------------------------------------------------------------

    def c_amdsmi_get_pcie_info(self, p: Processor, info: Any) -> int:
        pcie = _target(info)
        static, metric = pcie.pcie_static, pcie.pcie_metric
        static.max_pcie_width, static.max_pcie_speed = p.gpu.pcie_max_width, p.gpu.pcie_max_mts
        static.pcie_interface_version, static.slot_type = 5, 1  # OAM
        metric.pcie_width, metric.pcie_speed = p.gpu.pcie_width, p.gpu.pcie_mts
        metric.pcie_bandwidth = UINT32_NA
        metric.pcie_replay_count, metric.pcie_replay_roll_over_count = p.gpu.pcie_replay_count, 0
        metric.pcie_l0_to_recovery_count = p.gpu.pcie_l0_to_recovery
        metric.pcie_nak_sent_count, metric.pcie_nak_received_count = p.gpu.pcie_nak_sent, p.gpu.pcie_nak_received
        metric.pcie_lc_perf_other_end_recovery_count = UINT32_NA  # not in this firmware's gpu_metrics
        if self._undecodable(p):  # the counters come from gpu_metrics: N/A from a table amdsmi cannot read
            metric.pcie_l0_to_recovery_count = metric.pcie_nak_sent_count = metric.pcie_nak_received_count = 2**64 - 1
            metric.pcie_replay_count = 2**64 - 1
        return SUCCESS

    def c_amdsmi_get_gpu_ecc_enabled(self, p: Processor, blocks: Any) -> int:
        # rocm-smi-lib reads ras/features: absent (amdgpu.ras_enable=0) → NOT_SUPPORTED, a mask of 0 → API_FAILED
        # (gpudiag issue 15 item 7).
        if not p.gpu.ras_features_present:
            return NOT_SUPPORTED
        if not p.gpu.ras_blocks:
            return API_FAILED
        _target(blocks).value = sum(p.gpu.ras_blocks)
        return SUCCESS

    def c_amdsmi_get_gpu_total_ecc_count(self, p: Processor, counts: Any) -> int:
        if not p.gpu.ras_features_present or not p.gpu.ras_blocks:
            return NOT_SUPPORTED
        # The sum over the blocks that answered, and SUCCESS even when some did not ("Query currently
        # inaccessible" while RAS is not ready or a reset runs; gpudiag issue 15 item 2).
        readable = [b for b in p.gpu.ras_blocks if b not in p.gpu.ras_inaccessible]
        return self._fill_counts(_target(counts), [p.gpu.ecc(block) for block in readable])

    def c_amdsmi_get_gpu_ecc_count(self, p: Processor, block: int, counts: Any) -> int:
        if int(block) not in p.gpu.ras_blocks or int(block) in p.gpu.ras_inaccessible:
            return NOT_SUPPORTED
        return self._fill_counts(_target(counts), [p.gpu.ecc(int(block))])

    @staticmethod
    def _fill_counts(counts: Any, per_block: list[tuple[int, int, int]]) -> int:
        counts.correctable_count = sum(c for c, _, _ in per_block)
        counts.uncorrectable_count = sum(u for _, u, _ in per_block)
        counts.deferred_count = sum(d for _, _, d in per_block)
        return SUCCESS

    def c_amdsmi_get_gpu_bad_page_info(self, p: Processor, count: Any, records: Any) -> int:
        _target(count).value = len(p.gpu.bad_pages)
        if isinstance(records, ctypes.Array):
            for record, (address, status) in zip(records, p.gpu.bad_pages):
                record.page_address, record.page_size, record.status = address << 12, 4096, status
        return SUCCESS

    def c_amdsmi_get_gpu_bad_page_threshold(self, p: Processor, threshold: Any) -> int:
        # Read from debugfs: root only (NOT_SUPPORTED otherwise); a VF has no bad-page retirement of its own.
        if not self.node.root or p.gpu.vf:
            return NOT_SUPPORTED
        _target(threshold).value = p.gpu.bad_page_threshold
        return SUCCESS

    def c_amdsmi_get_gpu_cper_entries(self, p: Processor, mask: Any, buffer: Any, size: Any, headers: Any,
                                      count: Any, cursor: Any) -> int:
        """As amd_smi_cper.cc amdsmi_get_gpu_cper_entries_by_path: the ring's records whose `1 << severity` is in
        the mask, from the cursor on (it counts the records that passed the mask), while the buffer and the header
        array have room; MORE_DATA when one is full, OUT_OF_RESOURCES when not even one record fits. The ring is in
        debugfs: a reader who may not enter it (not root) cannot stat it, which answers NOT_SUPPORTED."""
        if not self.node.root or p.gpu.cper_records is None:
            return NOT_SUPPORTED
        mask, capacity, room = int(getattr(mask, "value", mask)), _target(size).value, _target(count).value
        at, copied, index = 0, 0, 0
        for record in p.gpu.cper_records:
            severity = struct.unpack_from("<I", record, 12)[0]
            if severity >= 32 or not (mask >> severity) & 1:
                continue
            if capacity - at < len(record) or copied == room:
                _target(count).value, _target(size).value = copied, at
                return OUT_OF_RESOURCES if at == 0 else MORE_DATA
            if index != _target(cursor).value:  # the C compares with *cursor, which each copy moves on
                index += 1
                continue
            ctypes.memmove(ctypes.addressof(buffer) + at, record, len(record))
            headers[copied] = ctypes.cast(ctypes.addressof(buffer) + at, headers._type_)
            copied, index = copied + 1, index + 1
            _target(cursor).value = index
            at += len(record)
        _target(count).value, _target(size).value = copied, at
        return SUCCESS

    def c_amdsmi_get_afids_from_cper(self, buffer: Any, size: Any, afids: Any, count: Any) -> int:
        """The AFIDs the scenario gives the record, found by its record id (this fake decodes no ACA registers)."""
        raw = ctypes.string_at(buffer, int(getattr(size, "value", size)))
        record_id = raw[96:104].split(b"\0", 1)[0].decode("ascii", "replace")
        found = next((gpu.cper_afids[record_id] for gpu in self.node.gpus if record_id in gpu.cper_afids), ())
        for i, afid in enumerate(found[:_target(count).value]):
            afids[i] = afid
        _target(count).value = len(found)
        return SUCCESS

    # -- thermal, power, throttling -------------------------------------------------------------------------

    def c_amdsmi_get_temp_metric(self, p: Processor, sensor: int, metric: int, value: Any) -> int:
        reading = p.gpu.temperatures.get(SENSOR.get(int(sensor), ""))
        chosen = {
            METRIC_CURRENT: reading and reading.current,
            METRIC_CRITICAL: reading and reading.critical,
            METRIC_EMERGENCY: reading and reading.emergency,
        }.get(int(metric))
        if chosen is None:
            return NOT_SUPPORTED
        _target(value).value = chosen
        return SUCCESS

    def c_amdsmi_get_power_info(self, p: Processor, info: Any) -> int:
        if p.gpu.vf:
            return NOT_SUPPORTED  # the host owns power: an MI300X VF reports none
        power = _target(info)
        power.socket_power = p.gpu.power_watts
        # MI300 reports the current socket power, MI200 and older the average; the other reads 0xFFFF.
        average = p.gpu.reports_average_power
        power.current_socket_power = UINT16_NA if average or self._undecodable(p) else p.gpu.power_watts
        power.average_socket_power = p.gpu.power_watts if average else UINT16_NA
        power.gfx_voltage, power.soc_voltage, power.mem_voltage = UINT16_NA, UINT16_NA, UINT16_NA
        power.power_limit = p.gpu.power_cap_watts
        return SUCCESS

    def c_amdsmi_get_power_cap_info(self, p: Processor, sensor: Any, info: Any) -> int:
        if p.gpu.vf:
            return NOT_SUPPORTED
        caps = _target(info)
        # MI300 (smu_v13_0_6_get_power_limit): the default is the current cap and the minimum 0.
        caps.power_cap = caps.default_power_cap = caps.max_power_cap = p.gpu.power_cap_watts * 1_000_000
        caps.min_power_cap, caps.dpm_cap = 0, 2100
        return SUCCESS

    def c_amdsmi_get_energy_count(self, p: Processor, accumulator: Any, resolution: Any, timestamp: Any) -> int:
        # The counter ticks in 15.259 µJ (gpu_metrics energy_accumulator units).
        _target(accumulator).value = round(p.gpu.energy_microjoules / 15.259)
        _target(resolution).value = 15.259
        _target(timestamp).value = 1_700_000_000_000
        return SUCCESS

    def c_amdsmi_get_violation_status(self, p: Processor, info: Any) -> int:
        status = _target(info)
        for flag in ("active_prochot_thrm", "active_ppt_pwr", "active_socket_thrm", "active_vr_thrm",
                     "active_hbm_thrm"):
            setattr(status, flag, 1 if flag in p.gpu.violations else 0)
        status.active_gfx_clk_below_host_limit = 0xFF  # UINT8 max: "N/A" in the wrapper
        for name in ("acc_counter", "acc_prochot_thrm", "acc_ppt_pwr", "acc_socket_thrm", "acc_vr_thrm",
                     "acc_hbm_thrm", "acc_gfx_clk_below_host_limit"):
            setattr(status, name, p.gpu.violation_counters.get(name, UINT64_NA))
        return SUCCESS

    def c_amdsmi_get_clock_info(self, p: Processor, clock_type: int, info: Any) -> int:
        clocks = p.gpu.clocks_mhz.get(int(clock_type))
        if clocks is None:
            return NOT_SUPPORTED
        _target(info).clk, _target(info).max_clk = clocks
        _target(info).min_clk = 500 if int(clock_type) == 0 else clocks[1]
        return SUCCESS

    # -- memory, XGMI, placement -----------------------------------------------------------------------------

    def c_amdsmi_get_gpu_vram_usage(self, p: Processor, usage: Any) -> int:
        vram = _target(usage)
        # Partition 0 reports the whole GPU's VRAM, the others their share (192 GB and 24 GB on an MI300X in CPX).
        vram.vram_total = p.gpu.vram_total_mib // (1 if p.partition == 0 else p.gpu.partitions)
        vram.vram_used = p.gpu.vram_used_mib // p.gpu.partitions
        return SUCCESS

    def c_amdsmi_get_gpu_activity(self, p: Processor, usage: Any) -> int:
        activity = _target(usage)
        activity.gfx_activity, activity.umc_activity, activity.mm_activity = p.gpu.gfx_activity_percent, 0, UINT16_NA
        return SUCCESS

    def c_amdsmi_get_gpu_xgmi_link_status(self, p: Processor, info: Any) -> int:
        if p.gpu.vf:
            return UNEXPECTED_DATA  # what a VF answers (gpudiag issue 15 item 10)
        status = _target(info)
        status.total_links = len(p.gpu.xgmi_links)
        # xgmi_link_status is in gpu_metrics from v1.7; without it amdsmi 7.0 reports every link disabled ("X").
        readable = (1, 7) <= p.gpu.metrics_version and not self._undecodable(p)
        for i, state in enumerate(p.gpu.xgmi_links):
            status.status[i] = state if readable else XGMI_DISABLED
        return SUCCESS

    def c_amdsmi_gpu_xgmi_error_status(self, p: Processor, status: Any) -> int:
        if not p.gpu.df_fica:
            return INVAL  # xgmi_error reads EINVAL on MI300/MI350 (ROCm/rocm-systems#11468)
        _target(status).value = p.gpu.xgmi_error_status
        return SUCCESS

    def c_amdsmi_get_gpu_topo_numa_affinity(self, p: Processor, numa: Any) -> int:
        _target(numa).value = p.gpu.numa_node
        return SUCCESS

    def c_amdsmi_get_gpu_compute_partition(self, p: Processor, buffer: Any, length: Any) -> int:
        buffer.value = p.gpu.compute_partition.encode()
        return SUCCESS

    def c_amdsmi_get_gpu_memory_partition(self, p: Processor, buffer: Any, length: Any) -> int:
        buffer.value = p.gpu.memory_partition.encode()
        return SUCCESS

    def c_amdsmi_get_gpu_process_list(self, p: Processor, count: Any, records: Any) -> int:
        running = [process for i, process in enumerate(p.gpu.processes) if i % p.gpu.partitions == p.partition]
        if len(running) > _target(count).value:
            return 41  # AMDSMI_STATUS_INSUFFICIENT_SIZE
        _target(count).value = len(running)
        for record, (pid, name, vram) in zip(records, running):
            record.pid, record.name, record.mem = pid, name.encode(), vram
            record.memory_usage.vram_mem = vram
            record.cu_occupancy = UINT32_NA
        return SUCCESS

    # -- topology between two processors --------------------------------------------------------------------

    def c_amdsmi_topo_get_link_type(self, a: Processor, b: Processor, hops: Any, link_type: Any) -> int:
        same_gpu = a.gpu is b.gpu
        _target(hops).value = 0 if same_gpu else 1
        _target(link_type).value = LINK_TYPE_INTERNAL if same_gpu else LINK_TYPE_XGMI
        return SUCCESS

    def c_amdsmi_is_P2P_accessible(self, a: Processor, b: Processor, accessible: Any) -> int:
        _target(accessible).value = True
        return SUCCESS

    def c_amdsmi_topo_get_p2p_status(self, a: Processor, b: Processor, link_type: Any, capability: Any) -> int:
        _target(link_type).value = LINK_TYPE_XGMI
        cap = _target(capability)
        cap.is_iolink_coherent = cap.is_iolink_atomics_32bit = cap.is_iolink_atomics_64bit = 1
        cap.is_iolink_dma = cap.is_iolink_bi_directional = 1
        return SUCCESS


class FakeLibRocmCore:
    """librocm-core.so, which amdsmi_get_rocm_version() loads on its own."""

    def __init__(self, version: tuple[int, int, int]):
        self.getROCmVersion = _CFunction("getROCmVersion", self._version)
        self.version = version

    def _version(self, major: Any, minor: Any, patch: Any) -> int:
        _target(major).value, _target(minor).value, _target(patch).value = self.version
        return 0


def forget_amdsmi() -> None:
    """`import amdsmi` caches the loaded library in module state: every test starts from a fresh import."""
    for name in [n for n in sys.modules if n == "amdsmi" or n.startswith("amdsmi.")]:
        del sys.modules[name]


@contextlib.contextmanager
def installed(node: FakeAmdNode) -> Iterator[FakeLibAmdSmi]:
    """Patch ctypes.CDLL so that libamd_smi.so (and librocm-core.so) resolve to fakes of `node`."""
    library = FakeLibAmdSmi(node)
    real_cdll = ctypes.CDLL

    def fake_cdll(name: Any, *args: Any, **kwargs: Any) -> Any:
        path = str(name)
        if "amd_smi" in path:
            if not node.library_present:
                raise OSError(f"{path}: cannot open shared object file: No such file or directory")
            return library
        if "rocm-core" in path:
            if node.rocm_version is None:
                raise OSError(f"{path}: cannot open shared object file: No such file or directory")
            return FakeLibRocmCore(node.rocm_version)
        return real_cdll(name, *args, **kwargs)

    forget_amdsmi()
    ctypes.CDLL = fake_cdll
    try:
        yield library
    finally:
        ctypes.CDLL = real_cdll
        forget_amdsmi()
