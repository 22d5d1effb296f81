"""AMD CPER records decoded from their bytes (issue 32, item 9): gpudiag/probe/amdsmi/cper.py.

The records are built the way AMD's own test of amdsmi's CPER decoder builds them (ROCm/rocm-systems
projects/amdsmi/tests/amd_smi_test/unit/gpu/addc_adapter_test.cc at 28e2074caca9cd0e27485d3aa81de81e05a19715:
make_gpu_record, make_mi300_crashdump_record, make_mi300_event_record, make_record_without_sections,
make_record_needing_repair): the same header and descriptor offsets, the same MI300 section-type GUIDs (in the
mixed-endian byte order CPER stores them), and the same refusals. The header's severity is the one field those
records leave at 0; the fatal case sets it to AMDSMI_CPER_SEV_FATAL (amdsmi.h amdsmi_cper_sev_t)."""

from __future__ import annotations

import struct

import pytest

from gpudiag.probe.amdsmi.cper import CperError, decode, decode_one, from_amdsmi

HEADER, DESCRIPTOR = 128, 72
CRASHDUMP = bytes([0x78, 0x0c, 0xac, 0x32, 0x23, 0x26, 0xf6, 0x48, 0xb0, 0xd0, 0x73, 0x65, 0x72, 0x5f, 0xd6, 0xae])
NONSTANDARD = bytes([0x78, 0x0c, 0xac, 0x32, 0x23, 0x26, 0xf6, 0x48, 0x81, 0xa2, 0xac, 0x69, 0x17, 0x80, 0x55, 0x1d])
BOOT = bytes([0x66, 0xa4, 0x61, 0x3d, 0x40, 0xab, 0x9a, 0x40, 0xa6, 0x98, 0xf3, 0x62, 0xd4, 0x64, 0xb3, 0x8f])
MI300_REVISION_MAJOR = 0x22


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


def test_an_mi300_crashdump_record_as_amds_test_builds_it():
    record, length = decode_one(bytes(gpu_record([(CRASHDUMP, 64)])))
    assert (record.severity, length, [s.kind for s in record.sections]) == ("non-fatal-uncorrected", 264,
                                                                              ["crashdump"])


def test_a_fatal_record_and_its_notification_type():
    raw = gpu_record([(CRASHDUMP, 64)], severity=1)
    struct.pack_into("<Q", raw, 80, 0x4CC5919CE8F56FFE)  # AMDSMI_CPER_NOTIFY_TYPE_MCE
    raw[96:104] = b"2:1\0\0\0\0\0"
    record, _ = decode_one(bytes(raw))
    assert (record.severity, record.notify, record.record_id) == ("fatal", "MCE", "2:1")


def test_an_aca_and_a_boot_section_in_one_record():
    record, _ = decode_one(bytes(gpu_record([(NONSTANDARD, 48), (BOOT, 48)], severity=2)))
    assert [s.kind for s in record.sections] == ["nonstandard", "boot"] and record.severity == "corrected"


def test_records_back_to_back_and_bytes_beyond_the_last_are_named():
    ring = bytes(gpu_record([(CRASHDUMP, 64)], severity=1) + gpu_record([(NONSTANDARD, 48)]) + b"\xab" * 20)
    records, problems = decode(ring)
    assert [r.severity for r in records] == ["fatal", "non-fatal-uncorrected"]
    assert problems and "shorter than a CPER header" in problems[0]


@pytest.mark.parametrize("why, raw", [
    ("shorter than a CPER header", bytes(127)),
    ("no CPER signature", bytes(b"X" + gpu_record([(CRASHDUMP, 8)])[1:])),
    ("do not fit", bytes(gpu_record([])[:HEADER])),  # make_record_without_sections: addc refuses it
    ("says it is", bytes(gpu_record([(CRASHDUMP, 8)])[:-1])),  # record length past the buffer
])
def test_records_amds_decoder_refuses_are_refused_with_the_reason(why, raw):
    with pytest.raises(CperError, match=why):
        decode_one(raw)


def test_overlapping_sections_are_refused_as_amds_strict_parse_does():
    raw = gpu_record([(CRASHDUMP, 4), (NONSTANDARD, 4)])
    struct.pack_into("<I", raw, HEADER + DESCRIPTOR, HEADER + 2 * DESCRIPTOR)  # make_record_needing_repair
    with pytest.raises(CperError, match="overlap"):
        decode_one(bytes(raw))


def test_amdsmi_entries_with_their_afids_and_a_refusal_kept_apart():
    fatal = gpu_record([(CRASHDUMP, 64)], severity=1)
    entries = [bytes(fatal), {"bytes": list(gpu_record([(NONSTANDARD, 48)])), "size": 248}, 42]

    def afids_of(raw: bytes):
        if raw[12] == 1:
            return ([28, 30], 2)  # amdsmi_get_afids_from_cper answers (afids, count)
        raise RuntimeError("AMDSMI_STATUS_UNEXPECTED_DATA")

    records, problems = from_amdsmi(entries, afids_of)
    assert [(r.severity, r.afids) for r in records] == [("fatal", (28, 30)), ("non-fatal-uncorrected", ())]
    assert any("AFIDs" in p for p in problems) and any("entry 2" in p for p in problems)
