"""The identity calls of the fake libamd_smi.so (fake_amdsmi.py): BDF, UUID, KFD, ASIC, board, VBIOS, firmware,
driver, virtualization mode and the gpu_metrics header. A mixin of FakeLibAmdSmi, which dispatches `c_<symbol>`.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.fakes.fake_amdsmi import Processor

SUCCESS, NOT_SUPPORTED = 0, 2
# What amd-smi without libdrm_amdgpu printed as an MI350 OAM's BDF (ROCm/rocm-systems PR 2987: "BDF:
# 695f7570672f:31:05.7"): the DRM query never ran and the BDF is uninitialised memory. The same bytes on every GPU
# is this fake's worst case (one group of "partitions").
GARBAGE_BDF = (0x695F7570672F, 0x31, 0x05, 7)
# The calls PR 2987 / PR 8427 list as answering NOT_SUPPORTED without libdrm: asic, vbios and driver info.
NEEDS_LIBDRM = ("amdsmi_get_gpu_asic_info", "amdsmi_get_gpu_vbios_info", "amdsmi_get_gpu_driver_info")
VIRTUALIZATION_BAREMETAL, VIRTUALIZATION_GUEST = 1, 3  # amdsmi_virtualization_mode_t
# amdsmi_fw_block_t values of the C header.
FW_ID = {"SMU": 1, "CP_MEC1": 7, "PSP_SOSDRV": 30, "PM": 77}


def _target(argument: Any) -> Any:
    """The ctypes object behind `ctypes.byref(obj)`, or the object itself."""
    return getattr(argument, "_obj", argument)


class IdentityCalls:
    node: Any  # FakeAmdNode, set by FakeLibAmdSmi

    # -- identity ----------------------------------------------------------------------------------------------

    def c_amdsmi_get_gpu_device_bdf(self, p: Processor, bdf: Any) -> int:
        fields = _target(bdf).struct_amdsmi_bdf_t
        if self.node.libdrm_missing:
            fields.domain_number, fields.bus_number, fields.device_number, fields.function_number = GARBAGE_BDF
            return SUCCESS
        fields.domain_number, fields.bus_number, fields.device_number = 0, p.gpu.bus, 0
        # The partition number, in CPX; kernels that moved it to location_id bits [31:28] report function 0 for all.
        fields.function_number = 0 if self.node.partitions_at_function_zero else p.partition
        return SUCCESS

    def c_amdsmi_get_gpu_bdf_id(self, p: Processor, bdf_id: Any) -> int:
        # (domain << 32) | (partition << 28) | (bus << 8) | (device << 3) | function (amdsmi.h)
        function = 0 if self.node.partitions_at_function_zero else p.partition
        _target(bdf_id).value = (p.partition << 28) | (p.gpu.bus << 8) | function
        return SUCCESS

    def c_amdsmi_get_gpu_virtualization_mode(self, p: Processor, mode: Any) -> int:
        _target(mode).value = VIRTUALIZATION_GUEST if p.gpu.vf else VIRTUALIZATION_BAREMETAL
        return SUCCESS

    def c_amdsmi_get_gpu_metrics_header_info(self, p: Processor, header: Any) -> int:
        table = _target(header)
        table.format_revision, table.content_revision = p.gpu.metrics_version
        table.structure_size = 1000
        return SUCCESS

    def c_amdsmi_get_gpu_device_uuid(self, p: Processor, length: Any, buffer: Any) -> int:
        uuid = f"{p.partition:02x}ff74a1-0000-1000-80{p.gpu.index:02x}-{p.gpu.unique_id & 0xFFFFFFFFFFFF:012x}"
        ctypes.memmove(buffer, uuid.encode() + b"\0", len(uuid) + 1)
        return SUCCESS

    def c_amdsmi_get_gpu_kfd_info(self, p: Processor, info: Any) -> int:
        kfd = _target(info)
        kfd.kfd_id, kfd.node_id, kfd.current_partition_id = 0xBEEF00 + p.handle, p.handle - 0x1000 + 1, p.partition
        return SUCCESS

    def c_amdsmi_get_gpu_asic_info(self, p: Processor, info: Any) -> int:
        asic = _target(info)
        asic.market_name = p.gpu.market_name.encode()
        asic.vendor_id, asic.vendor_name = 0x1002, b"Advanced Micro Devices Inc. [AMD/ATI]"
        asic.subvendor_id, asic.device_id, asic.rev_id = 0x1002, p.gpu.device_id, 0
        # Only the primary partition reports the ASIC serial; an empty one becomes "N/A" in the wrapper.
        asic.asic_serial = b"" if p.secondary else f"0x{p.gpu.unique_id:016X}".encode()
        asic.oam_id, asic.num_of_compute_units = p.gpu.index, p.gpu.compute_units // p.gpu.partitions
        asic.target_graphics_version, asic.subsystem_id = p.gpu.gfx_target, 0x74A1
        return SUCCESS

    def c_amdsmi_get_gpu_board_info(self, p: Processor, info: Any) -> int:
        board = _target(info)
        board.model_number, board.product_serial = p.gpu.board_part_number.encode(), p.gpu.serial.encode()
        board.product_name, board.manufacturer_name = b"AMD Instinct MI300X OAM", b"AMD"
        return SUCCESS

    def c_amdsmi_get_gpu_vbios_info(self, p: Processor, info: Any) -> int:
        vbios = _target(info)
        vbios.name, vbios.build_date = b"AMD MI300X_HW_SRIOV_CVS_1VF", b"2024/05/28 10:57"
        vbios.part_number, vbios.version = p.gpu.vbios_part_number.encode(), p.gpu.vbios_version.encode()
        return SUCCESS

    def c_amdsmi_get_fw_info(self, p: Processor, info: Any) -> int:
        fw = _target(info)
        fw.num_fw_info = len(p.gpu.firmware)
        for i, (name, version) in enumerate(p.gpu.firmware.items()):
            fw.fw_info_list[i].fw_id, fw.fw_info_list[i].fw_version = FW_ID[name], version
        return SUCCESS

    def c_amdsmi_get_gpu_driver_info(self, p: Processor, info: Any) -> int:
        driver = _target(info)
        driver.driver_name, driver.driver_version = b"amdgpu", p.gpu.driver_version.encode()
        driver.driver_date = b"2015/01/01 00:00"
        return SUCCESS
