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
from tests.support.cper_records import BOOT, CRASHDUMP, DESCRIPTOR, HEADER, NONSTANDARD, fatal_crashdump, gpu_record


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
    # An entry that is no record at all still counts, of no known severity (fail closed: the check warns on it).
    assert [(r.severity, r.afids) for r in records] == [("fatal", (28, 30)), ("non-fatal-uncorrected", ()),
                                                        ("unknown", ())]
    assert any("AFIDs" in p for p in problems) and any("entry 2" in p for p in problems)


def test_the_bindings_signed_bytes_are_read():
    """amdsmi's binding lists a record's bytes as ctypes.c_byte, signed: 0xFF comes as -1 (amdsmi_interface.py
    amdsmi_get_gpu_cper_entries). Before, bytes() of that list raised and the record was lost."""
    raw = fatal_crashdump("3:7")
    signed = [b - 256 if b > 127 else b for b in raw]
    records, problems = from_amdsmi([{"bytes": signed, "size": len(raw)}])
    assert problems == [] and [(r.severity, r.record_id, r.notify) for r in records] == [("fatal", "3:7", "MCE")]
    assert records[0].timestamp == "2026-12-05 22:41:07"


def test_a_fatal_record_gpudiag_cannot_decode_keeps_its_severity():
    raw = gpu_record([(CRASHDUMP, 4), (NONSTANDARD, 4)], severity=1)
    struct.pack_into("<I", raw, HEADER + DESCRIPTOR, HEADER + 2 * DESCRIPTOR)  # overlapping: refused
    records, problems = from_amdsmi([bytes(raw)])
    assert [r.severity for r in records] == ["fatal"] and "overlap" in problems[0]


def test_a_timestamp_without_its_valid_bit_or_out_of_range_is_not_shown():
    raw = bytearray(fatal_crashdump())
    struct.pack_into("<I", raw, 16, 0)
    assert decode_one(bytes(raw))[0].timestamp == ""
    raw = bytearray(fatal_crashdump())
    raw[29] = 13  # month 13
    assert decode_one(bytes(raw))[0].timestamp == ""
