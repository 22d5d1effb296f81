"""AMD GPU CPER records, decoded from their bytes (issue 32, item 9).

On MI300-series nodes amdgpu keeps each RAS event as a UEFI Common Platform Error Record in a ring; amdsmi hands them
out with amdsmi_get_gpu_cper_entries (the raw records back to back, each as long as its own header says) and
`amd-smi ras --cper --folder DIR` writes one record per `.cper` file. amdsmi's own decoder maps a record's ACA
register dumps to AMD Field IDs (amdsmi_get_afids_from_cper, over its ras-decode library): gpudiag takes the AFIDs
from amdsmi where it answers and otherwise leaves them empty, and does not decode the registers itself. The record's
own severity is what gpudiag judges first, as AMD's device-metrics-exporter does (a fatal CPER makes the GPU
unhealthy: pkg/amdgpu/gpuagent/gpuagent_health.go); its AFIDs name the fault (gpudiag/checks/ras/afid_catalog.py).
Reading them through amdsmi, bounded and fail-closed, is gpudiag/probe/amdsmi/cper_entries.py.

The layout (all little-endian, packed), from amdsmi.h amdsmi_cper_hdr_t and the UEFI specification appendix N:
- record header, 128 bytes: "CPER" (0), revision (4), 0xFFFFFFFF (6), section count (10), error severity (12: 0
  non-fatal uncorrected, 1 fatal, 2 corrected, 3 informational), valid bits (16), record length (20), timestamp (24),
  platform id (32), partition id (48), creator id (64), notification type GUID (80), record id (96), flags (104);
- one 72-byte section descriptor per section: offset (0) and length (4) of the section within the record, revision
  (8), section type GUID (16), FRU id (32), section severity (48), FRU text (52).
The section-type GUIDs are AMD's, as amdsmi's own tests spell them (rocm-systems projects/amdsmi tests, the addc
adapter unit test): crashdump (fatal register dump), non-standard error (ACA banks), boot, and the processor error.

Every length is checked against the buffer before it is read: a short, overlong or overlapping record is named and
skipped, never read past (records come from a device and a file; treat them as hostile).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterable, Optional

from gpudiag.model.cper import CperRecord, CperSection

HEADER = 128
DESCRIPTOR = 72
MAX_RECORDS = 1024  # amdgpu's CPER ring holds far fewer; a bound on a hostile buffer
MAX_AFIDS = 12  # amdsmi.h MAX_NUMBER_OF_AFIDS_PER_RECORD
SEVERITIES = {0: "non-fatal-uncorrected", 1: "fatal", 2: "corrected", 3: "informational"}
SECTION_TYPES = {
    bytes.fromhex("780cac322326f648b0d07365725fd6ae"): "crashdump",
    bytes.fromhex("780cac322326f64881a2ac691780551d"): "nonstandard",
    bytes.fromhex("66a4613d40ab9a40a698f362d464b38f"): "boot",
    bytes.fromhex("b0a03edc44a19747b95b53fa242b6e1d"): "processor",
}
# amdsmi.h amdsmi_cper_notify_type_t: the notification GUID's first 8 bytes as a little-endian integer
NOTIFY_TYPES = {
    0x450EBDD72DCE8BB1: "CMC", 0x4A55D8434E292F96: "CPE", 0x4CC5919CE8F56FFE: "MCE", 0x4DFC1A16CF93C01F: "PCIE",
    0x454A9308CC5263E8: "INIT", 0x42C9B7E65BAD89FF: "NMI", 0x409AAB403D61A466: "BOOT", 0x4C27C6B3667DD791: "DMAR",
    0x11E4BBE89A78788A: "SEA", 0x4E87B0AE5C284C81: "SEI", 0x4214520409A9D5AC: "PEI", 0x49A341DF69293BC9: "CXL",
}


class CperError(ValueError):
    """A record gpudiag could not decode; the message names why."""


def decode_one(buffer: bytes, at: int = 0) -> tuple[CperRecord, int]:
    """The record at `at` and its length (where the next one starts), or CperError."""
    if len(buffer) - at < HEADER:
        raise CperError(f"{len(buffer) - at} byte(s) at offset {at}: shorter than a CPER header ({HEADER})")
    if buffer[at:at + 4] != b"CPER" or struct.unpack_from("<I", buffer, at + 6)[0] != 0xFFFFFFFF:
        raise CperError(f"no CPER signature at offset {at}")
    (count,) = struct.unpack_from("<H", buffer, at + 10)
    (severity,) = struct.unpack_from("<I", buffer, at + 12)
    (length,) = struct.unpack_from("<I", buffer, at + 20)
    if length < HEADER or at + length > len(buffer):
        raise CperError(f"record at offset {at} says it is {length} bytes long; {len(buffer) - at} are there")
    if count == 0 or HEADER + count * DESCRIPTOR > length:
        raise CperError(f"record at offset {at}: {count} section(s) do not fit its {length} bytes")
    sections, spans = [], []
    for i in range(count):
        d = at + HEADER + i * DESCRIPTOR
        offset, size = struct.unpack_from("<II", buffer, d)
        if offset < HEADER + count * DESCRIPTOR or offset + size > length:
            raise CperError(f"record at offset {at}: section {i} lies outside the record")
        spans.append((offset, offset + size))
        kind = SECTION_TYPES.get(bytes(buffer[d + 16:d + 32]), "unknown")
        sections.append(CperSection(kind, SEVERITIES.get(struct.unpack_from("<I", buffer, d + 48)[0], "unknown")))
    spans.sort()
    if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
        raise CperError(f"record at offset {at}: sections overlap")
    notify = NOTIFY_TYPES.get(struct.unpack_from("<Q", buffer, at + 80)[0], "unknown")
    record_id = bytes(buffer[at + 96:at + 104]).split(b"\0", 1)[0].decode("ascii", "replace")
    return CperRecord(SEVERITIES.get(severity, "unknown"), record_id, notify, tuple(sections),
                      timestamp=_timestamp(buffer, at)), length


def _timestamp(buffer: bytes, at: int) -> str:
    """The header's timestamp where its valid bit (bit 1 of the valid bits at 16) says it is set: seconds, minutes,
    hours, flags, day, month, year, century at 24..31, in binary as amdgpu writes them (amdgpu_cper.c fills them from
    time64_to_tm) and amdsmi reads them (a two-digit year is 20xx). A field out of range gives "" (hostile bytes)."""
    if not struct.unpack_from("<I", buffer, at + 16)[0] & 0b10:
        return ""
    second, minute, hour, _, day, month, year, _ = buffer[at + 24:at + 32]
    if second > 60 or minute > 59 or hour > 23 or not 1 <= day <= 31 or not 1 <= month <= 12:
        return ""
    return f"{year + 2000 if year < 100 else year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"


def decode(buffer: bytes) -> tuple[list[CperRecord], list[str]]:
    """Every record of a buffer of records back to back (a ring read, or one `.cper` file), and why the rest could
    not be read: decoding stops at the first record that cannot be (its length no longer tells where the next is)."""
    records: list[CperRecord] = []
    at = 0
    while at < len(buffer) and len(records) < MAX_RECORDS:
        try:
            record, length = decode_one(buffer, at)
        except CperError as exc:
            return records, [str(exc)]
        records.append(record)
        at += length
    return records, ([f"more than {MAX_RECORDS} records: the rest not read"] if at < len(buffer) else [])


def _raw(entry: Any) -> Optional[bytes]:
    """One record's bytes as amdsmi's Python binding gives them: bytes, or {'bytes': [...], 'size': n}. The binding
    reads the buffer as `ctypes.c_byte` (signed: amdsmi_interface.py amdsmi_get_gpu_cper_entries), so every byte
    of 0x80 or more comes as a negative int (the header's 0xFFFFFFFF as four -1s): `bytes()` of that list raises."""
    if isinstance(entry, (bytes, bytearray)):
        return bytes(entry)
    if isinstance(entry, dict) and isinstance(entry.get("bytes"), (list, bytes, bytearray)):
        values = entry["bytes"]
        if isinstance(values, list) and not all(isinstance(v, int) and -128 <= v <= 255 for v in values):
            return None
        data = bytes(v & 0xFF for v in values)
        size = entry.get("size")
        return data[:size] if isinstance(size, int) and 0 <= size <= len(data) else data
    return None


def undecodable(raw: bytes) -> CperRecord:
    """A record gpudiag could not decode, kept so that it still counts (fail closed): its header's own severity where
    the bytes reach that far (offset 12), else "unknown"."""
    severity = SEVERITIES.get(struct.unpack_from("<I", raw, 12)[0], "unknown") if len(raw) >= 16 else "unknown"
    return CperRecord(severity, "", "unknown", ())


def from_amdsmi(cper_data: Iterable[Any], afids_of: Optional[Callable[[bytes], Any]] = None
                ) -> tuple[list[CperRecord], list[str]]:
    """The records of amdsmi_get_gpu_cper_entries' `cper_data` (one record per entry), with each record's AFIDs from
    `afids_of` (amdsmi_get_afids_from_cper: answers `(afids, count)`) where given; a record amdsmi cannot give the
    AFIDs of keeps none. An entry gpudiag cannot decode is still a record (`undecodable`), and the problems say why."""
    records, problems = [], []
    for n, entry in enumerate(cper_data):
        raw = _raw(entry)
        if raw is None:
            problems.append(f"entry {n}: not a CPER record amdsmi hands out ({type(entry).__name__})")
            records.append(undecodable(b""))
            continue
        decoded, why = decode(raw)
        problems += [f"entry {n}: {w}" for w in why]
        if not decoded:
            records.append(undecodable(raw))
        for record in decoded:
            afids: tuple[int, ...] = ()
            if afids_of is not None:
                try:
                    answer = afids_of(raw)
                    found = answer[0] if isinstance(answer, tuple) else answer
                    afids = tuple(int(a) for a in found)[:MAX_AFIDS]
                except Exception as exc:  # amdsmi's decoder refuses some records; the severity still stands
                    problems.append(f"entry {n}: amdsmi could not give its AFIDs ({type(exc).__name__})")
            records.append(CperRecord(record.severity, record.record_id, record.notify, record.sections, afids,
                                      record.timestamp))
    return records, problems
