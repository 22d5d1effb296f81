"""AMD CPER records as bytes, built the way AMD's own test of amdsmi's CPER decoder builds them
(ROCm/rocm-systems projects/amdsmi/tests/amd_smi_test/unit/gpu/addc_adapter_test.cc at
28e2074caca9cd0e27485d3aa81de81e05a19715: make_gpu_record, make_mi300_crashdump_record, make_mi300_event_record,
make_record_without_sections, make_record_needing_repair): the same header and descriptor offsets, the same MI300
section-type GUIDs (in the mixed-endian byte order CPER stores them), and the same refusals. The header's severity is
the one field those records leave at 0; a fatal record sets it to AMDSMI_CPER_SEV_FATAL (amdsmi.h amdsmi_cper_sev_t).
`stamped` adds what amdgpu fills in besides (amdgpu_cper.c amdgpu_cper_entry_fill_hdr): the record id, the
notification type and the timestamp with its valid bit.

Used by the decoder's tests (tests/probe/amdsmi/test_cper.py) and by the fake libamd_smi.so, which hands such
records out through the real amdsmi binding (tests/support/fakes/fake_amdsmi.py)."""

from __future__ import annotations

import struct

HEADER, DESCRIPTOR = 128, 72
CRASHDUMP = bytes([0x78, 0x0c, 0xac, 0x32, 0x23, 0x26, 0xf6, 0x48, 0xb0, 0xd0, 0x73, 0x65, 0x72, 0x5f, 0xd6, 0xae])
NONSTANDARD = bytes([0x78, 0x0c, 0xac, 0x32, 0x23, 0x26, 0xf6, 0x48, 0x81, 0xa2, 0xac, 0x69, 0x17, 0x80, 0x55, 0x1d])
BOOT = bytes([0x66, 0xa4, 0x61, 0x3d, 0x40, 0xab, 0x9a, 0x40, 0xa6, 0x98, 0xf3, 0x62, 0xd4, 0x64, 0xb3, 0x8f])
MI300_REVISION_MAJOR = 0x22
# amdsmi_cper_sev_t
NON_FATAL_UNCORRECTED, FATAL, CORRECTED = 0, 1, 2
# amdsmi.h amdsmi_cper_notify_type_t: the notification GUID's first 8 bytes as a little-endian integer
NOTIFY_MCE, NOTIFY_CMC, NOTIFY_BOOT = 0x4CC5919CE8F56FFE, 0x450EBDD72DCE8BB1, 0x409AAB403D61A466


def gpu_record(sections: list[tuple[bytes, int]], severity: int = 0) -> bytearray:
    """[header][descriptors][sections]: addc_adapter_test.cc make_gpu_record / make_mi300_event_record."""
    first = HEADER + len(sections) * DESCRIPTOR
    size = first + sum(length for _, length in sections)
    record = bytearray(size)
    struct.pack_into("<I", record, 0, 0x52455043)  # "CPER", little endian (kCperSignature)
    struct.pack_into("<I", record, 6, 0xFFFFFFFF)  # kSignatureEnd
    struct.pack_into("<H", record, 10, len(sections))
    struct.pack_into("<I", record, 12, severity)
    struct.pack_into("<I", record, 20, size)
    offset = first
    for i, (guid, length) in enumerate(sections):
        d = HEADER + i * DESCRIPTOR
        struct.pack_into("<II", record, d, offset, length)
        record[d + 9] = MI300_REVISION_MAJOR  # cper_sec_desc.revision_major (revision_minor is byte 8)
        record[d + 16:d + 32] = guid
        offset += length
    return record


def stamped(record: bytearray, record_id: str, notify: int, when: tuple[int, int, int, int, int, int]) -> bytes:
    """The record with its id (8 bytes at 96), notification type (80) and timestamp (24: second, minute, hour, flags,
    day, month, two-digit year, century) and the timestamp's valid bit (bit 1 of the valid bits at 16)."""
    year, month, day, hour, minute, second = when
    record[96:104] = record_id.encode().ljust(8, b"\0")[:8]
    struct.pack_into("<Q", record, 80, notify)
    struct.pack_into("<I", record, 16, 0b10)
    record[24:32] = bytes([second, minute, hour, 0, day, month, year % 100, year // 100])
    return bytes(record)


def fatal_crashdump(record_id: str = "1:1", when=(2026, 12, 5, 22, 41, 7)) -> bytes:
    """A fatal MI300 crash dump (an uncorrectable error amdgpu could not contain), as an MCE."""
    return stamped(gpu_record([(CRASHDUMP, 64)], severity=FATAL), record_id, NOTIFY_MCE, when)


def corrected_aca(record_id: str = "1:2", when=(2026, 12, 5, 22, 40, 0)) -> bytes:
    """A corrected error's ACA bank dump (the non-standard section), as a CMC."""
    return stamped(gpu_record([(NONSTANDARD, 48)], severity=CORRECTED), record_id, NOTIFY_CMC, when)
