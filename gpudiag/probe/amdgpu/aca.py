"""An amdgpu ACA/MCA bank's STATUS register, decoded as the kernel decodes it.

The bit layout is amdgpu_aca.h's ACA_REG__STATUS__* (the MCA_STATUS layout of the AMD64 Architecture Programmer's
Manual vol. 2). Which error a bank counts as is the kernel's rule, not the bit names': since "drm/amdgpu: Decode
deferred error type in gfx aca bank parser" (amd-gfx, Xiang Liu, 2025-03-20) amdgpu_aca.h has

    #define ACA_BANK_ERR_IS_DEFFERED(bank) (ACA_REG__STATUS__POISON(status) || ACA_REG__STATUS__DEFERRED(status))
    #define ACA_BANK_ERR_UE_DE_DECODE(bank) (ACA_BANK_ERR_IS_DEFFERED(bank) ? ACA_ERROR_TYPE_DEFERRED : ..._UE)
    #define ACA_BANK_ERR_CE_DE_DECODE(bank) (ACA_BANK_ERR_IS_DEFFERED(bank) ? ACA_ERROR_TYPE_DEFERRED : ..._CE)

so a bank with the Poison bit (43) alone, e.g. STATUS=0x98000800003e0000 (Val, En, MiscV, Poison: AMD node-scraper's
test dmesg), is a deferred error, and so is an uncorrected bank that carries Poison or Deferred; an uncorrected bank
without them is uncorrectable; anything else the firmware logged is corrected (ecc.* judges those from the counters).
A bank whose Val bit (63) is clear holds no error at all (MCA_STATUS: "the register contains valid information").
"""

from __future__ import annotations

from typing import Optional

# amdgpu_aca.h ACA_REG__STATUS__*: name → bit.
STATUS_BITS = {
    "Val": 63, "Overflow": 62, "UC": 61, "En": 60, "MiscV": 59, "AddrV": 58, "PCC": 57, "ErrCoreIdVal": 56,
    "TCC": 55, "SyndV": 53, "CECC": 46, "UECC": 45, "Deferred": 44, "Poison": 43, "Scrub": 40,
}
ACA_KINDS = ("aca_uncorrectable", "aca_deferred")


def status_bits(status: int) -> list[str]:
    """The named STATUS bits that are set, highest first."""
    return [name for name, bit in STATUS_BITS.items() if status >> bit & 1]


def aca_kind(status: int) -> Optional[str]:
    """The error a bank with this STATUS counts as ("aca_uncorrectable", "aca_deferred"), or None for a corrected
    error and a bank with no valid error."""
    bits = set(status_bits(status))
    if "Val" not in bits:
        return None
    if "Poison" in bits or "Deferred" in bits:  # ACA_BANK_ERR_IS_DEFFERED, for UE banks too
        return "aca_deferred"
    if "UC" in bits:
        return "aca_uncorrectable"
    return None


def describe(status: int) -> str:
    """`STATUS bits Val, En, MiscV, Poison` — what an operator reads (the register itself is in the message)."""
    return f"STATUS bits {', '.join(status_bits(status)) or '(none set)'}"
