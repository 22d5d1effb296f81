"""The text formats of the RDMA sysfs attributes, and the ACS capability in a PCI config space. Parsing only.

Sources (drivers/infiniband/core/sysfs.c, Linux 6.x; Documentation/ABI/stable/sysfs-class-infiniband):
- state:      sysfs_emit("%d: %s\\n", attr.state, ib_port_state_to_str(attr.state))  → "4: ACTIVE"
- phys_state: sysfs_emit("%u: %s\\n", attr.phys_state, phys_state_to_str(...))      → "5: LinkUp"
- rate:       sysfs_emit("%d%s Gb/sec (%dX%s)\\n", rate / 10, rate % 10 ? ".5" : "", width, speed) → "400 Gb/sec
  (4X NDR)"; the speed word is " SDR" … " XDR" (kernels before 4.x printed none for SDR), a deci-Gb/s rate of an odd
  tenth prints ".5" ("2.5 Gb/sec (1X SDR)").
- counters/*: show_pma_counter prints "%u\\n"/"%llu\\n" of the PMA field; kernels before 5.x printed "N/A (no PMA)"
  when the MAD failed, later ones fail the read (the errno reaches user space).
- hw_counters/*: "%llu\\n".
- node_guid / sys_image_guid: "%04x:%04x:%04x:%04x\\n"; node_type: "%d: %s\\n" ("1: CA").
- lid / sm_lid: "0x%x\\n".
ACS: include/uapi/linux/pci_regs.h (PCI_EXT_CAP_ID_ACS 0x0d, PCI_ACS_CAP 0x04, PCI_ACS_CTRL 0x06, the PCI_ACS_* bits);
extended capabilities start at 0x100, each header dword is ID[15:0] version[19:16] next[31:20].
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import AcsControl

_STATE = re.compile(r"([0-9]{1,3}): ([A-Za-z_ <>-]{1,32})", re.ASCII)
_RATE = re.compile(r"([0-9]{1,6})(\.5)? Gb/sec \(([0-9]{1,2})X(?: ([A-Z0-9]{2,6}))?\)", re.ASCII)
_GUID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}", re.ASCII)
_HEX = re.compile(r"0x[0-9a-fA-F]{1,8}", re.ASCII)
_DECIMAL = re.compile(r"-?[0-9]{1,20}", re.ASCII)
NO_PMA = "N/A (no PMA)"
U64_MAX = (1 << 64) - 1

# lspci's names for the ACS bits, in bit order (PCI_ACS_SV 0x01 … PCI_ACS_DT 0x40).
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
PCI_EXT_CAP_ID_ACS = 0x000D
_EXT_CAP_START = 0x100


def parse_state(text: str) -> Optional[tuple[int, str]]:
    """`"4: ACTIVE"` → (4, "ACTIVE"); `"5: LinkUp"` → (5, "LinkUp"); None for anything else."""
    match = _STATE.fullmatch(text)
    return (int(match[1]), match[2]) if match else None


def parse_rate(text: str) -> Optional[tuple[float, int, Optional[str]]]:
    """`"400 Gb/sec (4X NDR)"` → (400.0, 4, "NDR"); `"2.5 Gb/sec (1X SDR)"` → (2.5, 1, "SDR")."""
    match = _RATE.fullmatch(text)
    if not match:
        return None
    return int(match[1]) + (0.5 if match[2] else 0.0), int(match[3]), match[4]


def parse_guid(text: str) -> Optional[str]:
    return text if _GUID.fullmatch(text) else None


def parse_hex(text: str) -> Optional[int]:
    """`"0x3cf"` → 975 (lid, sm_lid)."""
    return int(text, 16) if _HEX.fullmatch(text) else None


def parse_decimal(text: str) -> Optional[int]:
    """A decimal the kernel printed: ASCII digits only (`int()` would take "٧"), at most 20 of them (a u64)."""
    return int(text) if _DECIMAL.fullmatch(text) else None


def parse_counter(text: str) -> Optional[int]:
    """A counter value: a u64 in decimal; None for anything else (the caller records what it was)."""
    value = parse_decimal(text)
    return value if value is not None and 0 <= value <= U64_MAX else None


def find_acs(config: bytes) -> tuple[Optional[AcsControl], Optional[str]]:
    """The ACS capability in a PCI config space read from sysfs `config`: (capability, None), (None, None) when the
    capability list has none, or (None, problem) when the list is malformed. Bounded: at most one visit per dword of
    extended config space, so a list that loops ends."""
    offset, seen = _EXT_CAP_START, set()
    while offset:
        if offset in seen:
            return None, f"the extended capability list loops at 0x{offset:03x}"
        if offset < _EXT_CAP_START or offset % 4 or offset + 8 > len(config):
            return None, f"an extended capability points outside config space (0x{offset:03x})"
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):  # no extended capabilities (0), or a device that answers all ones
            return (None, None) if offset == _EXT_CAP_START and header == 0 else (
                None, f"config space reads 0x{header:08x} at 0x{offset:03x}")
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            cap = int.from_bytes(config[offset + 4:offset + 6], "little")
            ctrl = int.from_bytes(config[offset + 6:offset + 8], "little")
            return AcsControl(offset=offset, capability_raw=cap, control_raw=ctrl,
                              capability=_bits(cap), control=_bits(ctrl)), None
        offset = header >> 20
    return None, None


def _bits(value: int) -> dict[str, bool]:
    return {name: bool(value & (1 << bit)) for bit, name in enumerate(ACS_BITS)}
