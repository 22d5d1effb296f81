"""The host's half of the stress verification: every launch's block records (ptx_parts.py: the block's SM, one
signature per tensor warp) compared bit for bit, and the streaming warps' result slot read.

Every block runs the same instructions on the same operands, so every block of a launch must leave the same
signatures, and every launch of the same length the same ones as the first. A block that differs from the
launch's majority, or from the first launch's, computed something else: silent data corruption, placed on the SM
that ran it. A launch whose blocks share no majority is counted as such (no SM can be blamed, the GPU is wrong).
The reference launch (a fixed length, run cold before the load and hot after it) must give the same majority both
times, and the same on every GPU of one model (its `reference_signature`, compared by the checks).
"""

from __future__ import annotations

import hashlib
import struct
import time
from array import array
from collections import Counter
from typing import Optional

from gpudiag.active import kernels
from gpudiag.active.ptx_parts import RECORD_WORDS, SAMPLE_WORD
from gpudiag.model import ComputeVerification, SmMismatch

MAX_LISTED_SMS = 16  # a GPU wrong on more SMs than this is wrong as a whole; the count says how many
RECORD_BYTES = RECORD_WORDS * 4


def location_name(vendor: str, raw: int) -> str:
    """How a block's location word reads: NVIDIA's %smid, AMD's XCC and HW_ID fields (ptx_parts / the MFMA kernel)."""
    if vendor == "nvidia":
        return f"SM {raw}"
    packed = raw & 0x7F  # HW_ID bits 14:8: CU_ID 11:8, SH_ID 12, SE_ID 14:13
    return f"XCC {raw >> 16} SE {packed >> 5} SH {packed >> 4 & 1} CU {packed & 0xF}"


class Verifier:
    """Compares the launches of one GPU's stress as they complete."""

    def __init__(self, vendor: str, blocks: int, tensor_warps: int):
        self.vendor, self.blocks, self.tensor_warps = vendor, blocks, tensor_warps
        self.result = ComputeVerification(blocks_per_launch=blocks, signatures_per_block=tensor_warps)
        self._first: Optional[tuple[int, ...]] = None  # the first steady launch's majority
        self._cold: Optional[tuple[int, ...]] = None
        self._sms: dict[int, SmMismatch] = {}
        self._sm_count = 0

    def parse(self, raw: bytes) -> list[tuple[int, tuple[int, ...]]]:
        """(location word, (signature of each tensor warp..., thread 0's first sample)) of every block."""
        words = array("I")
        words.frombytes(raw[:self.blocks * RECORD_BYTES])
        at = [b * RECORD_WORDS for b in range(self.blocks)]
        return [(words[a], tuple(words[a + 1:a + 1 + self.tensor_warps]) + (words[a + SAMPLE_WORD],)) for a in at]

    @staticmethod
    def _majority(records: list[tuple[int, tuple[int, ...]]]) -> Optional[tuple[int, ...]]:
        signature, count = Counter(sig for _, sig in records).most_common(1)[0]
        return signature if count * 2 > len(records) else None

    def steady(self, number: int, raw: bytes) -> None:
        """Launch `number` (0: the first of the steady load) of the steady length."""
        began = time.perf_counter()
        records = self.parse(raw)
        majority = self._majority(records)
        if self._first is None and majority is not None:
            self._first = majority
        expected = self._first if self._first is not None else majority
        if majority is None:
            self.result.launches_without_majority += 1
        wrong = [raw_sm for raw_sm, sig in records if expected is None or sig != expected]
        self.result.launches_verified += 1
        if wrong:
            self.result.launches_with_mismatch += 1
            self.result.mismatched_blocks += len(wrong)
            if expected is not None:  # with no result to hold them against, no SM is to blame
                for raw_sm in dict.fromkeys(wrong):
                    self._blame(raw_sm, number)
        self.result.host_seconds += time.perf_counter() - began

    def _blame(self, raw_sm: int, number: int) -> None:
        entry = self._sms.get(raw_sm)
        if entry is None:
            entry = self._sms[raw_sm] = SmMismatch(location_name(self.vendor, raw_sm), raw_sm, 0, number)
        entry.launches += 1
        self.result.mismatched_sms = sorted(self._sms.values(), key=lambda e: (-e.launches, e.raw))[:MAX_LISTED_SMS]

    def reference(self, raw: bytes, iterations: int, hot: bool) -> None:
        """The fixed-length launch: cold (before the load) sets the reference, hot (after it) must match it."""
        records = self.parse(raw)
        majority = self._majority(records)
        self.result.reference_iterations = iterations
        if not hot:
            self._cold = majority
            if majority is not None:
                self.result.reference_sample = struct.unpack("<f", struct.pack("<I", majority[-1]))[0]
                digest = hashlib.sha256(struct.pack(f"<{len(majority)}I", *majority)).hexdigest()
                self.result.reference_signature = digest[:16]
            return
        self.result.hot_reference_matches = majority is not None and majority == self._cold
        for raw_sm, sig in records:
            if self._cold is not None and sig != self._cold:
                self.result.mismatched_blocks += 1
                self._blame(raw_sm, self.result.launches_verified)

    def stream(self, slot: bytes, parity: int, buffer: int, half_bytes: int) -> None:
        """The streaming warps' result slot of one launch that read half `parity` of the buffer at `buffer`."""
        mismatches, first, mask = kernels.parse_result_slot(slot)
        if not mismatches:
            return
        self.result.stream_mismatches += mismatches
        address = buffer + parity * half_bytes + first * 4
        previous = self.result.stream_first_error_address
        self.result.stream_first_error_address = address if previous is None else min(previous, address)
        self.result.stream_flipped_bits_mask = (self.result.stream_flipped_bits_mask or 0) | mask
