"""What the kernel log parsers share: the record length cap, the bus-ID pattern and bounded numbers.

Hostile input (see events.py): digits are ASCII only (re.ASCII; `\\d` would take `٧٩` for 79) and a
number longer than a driver can print makes its record unparsable instead of reaching int(), whose 4,300-digit
limit would raise from deep inside the scan.
"""

from __future__ import annotations

import re

# The longest record /dev/kmsg hands out is CONSOLE_EXT_LOG_MAX = 8192 bytes (include/linux/printk.h), \xNN
# escapes and prefix included; the text of one printk is at most PRINTKRB_RECORD_MAX = 1024 bytes
# (kernel/printk/internal.h). A longer line is not one kernel record as the kernel wrote it: only its head is read.
MAX_RECORD_CHARS = 8192

# A PCI bus ID as the drivers print it: the domain is `%04x` of a 32-bit number, so an Intel VMD domain (0x10000 and
# up, drivers/pci/controller/vmd.c) has five hex digits; normalize_pci_bus_id keeps such a domain as it is.
DOMAIN = r"[0-9a-f]{4,8}"
BUS_ID = rf"{DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}}\.[0-7]"
FLAGS = re.ASCII | re.IGNORECASE

# u64 printed in decimal: at most 20 digits. Anything longer is not a number the kernel printed.
MAX_DIGITS = 20


class MalformedRecord(ValueError):
    """A record that looks like a driver's but carries a field no driver prints; it is skipped and counted."""


def bounded_int(digits: str, what: str, max_digits: int = MAX_DIGITS) -> int:
    if len(digits) > max_digits or not digits.isascii() or not digits.isdigit():
        raise MalformedRecord(f"{what} is not a number of at most {max_digits} digits")
    return int(digits)
