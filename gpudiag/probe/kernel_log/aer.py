"""Native PCIe AER records (the kernel's own AER driver, not firmware-first: ghes.py reads those) → `KernelEvent`s
naming the device or port (issue 32, item 6). Parsing only; the checks place an event on the GPUs at or below the
bus ID it names (PciGpu.upstream_ports), as they do GHES records.

Sources (Linux, drivers/pci/pcie/aer.c and err.c; the prefix is dev_printk's `pcieport <port>: ` and aer.c's dev_fmt
`AER: `):
- aer_print_port_info: `%s%s error received: %s` (4.x-6.6: "Uncorrected (Fatal) error received: 0000:01:00.0", 3.x:
  "… received: id=0008") and `%s%s error message received from %04x:%02x:%02x.%d` (6.7+, "Uncorrectable (Fatal)"):
  the source's bus ID where it is printed, else the port's;
- pcie_do_recovery (err.c): `device recovery failed`: the link and the devices below it stay down;
- __aer_print_error: the error bits, bit 5 printed "Surprise Down Error" (before 4.16) or "SDES": the link below the
  port that printed it went down without notice.
Only fatal records become events; corrected and non-fatal errors are counted by the AER counters (pcie.aer).
"""

from __future__ import annotations

from typing import Optional

from gpudiag.model import KernelEvent, normalize_pci_bus_id
from gpudiag.probe.kernel_log.text import BUS_ID, FLAGS
from gpudiag.probe.patterns import lazy_compile

AER_EVENT_KINDS = ("aer_fatal", "aer_recovery_failed", "aer_surprise_down")
_AER = lazy_compile(
    rf"pcieport ({BUS_ID}): (?:AER: )?(?:"
    rf"(?:Multiple )?Uncorrect(?:ed|able) \(Fatal\) error (?:received|message received from)(?::? ({BUS_ID}))?"
    r"|(device recovery failed)"
    r"|( {1,8}\[ ?5\] (?:Surprise Down Error|SDES)\b))", FLAGS)


def aer_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The fatal AER event one `pcieport <port>: ` record reports, or None."""
    match = _AER.match(message)
    if match is None:
        return None
    port = normalize_pci_bus_id(match[1])
    if match[3]:
        kind, bus, decoded = "aer_recovery_failed", port, f"device recovery failed below port {port}"
    elif match[4]:
        kind, bus, decoded = "aer_surprise_down", port, f"Surprise Down: the link below port {port} went down"
    else:
        source = normalize_pci_bus_id(match[2]) if match[2] else port
        kind, bus, decoded = "aer_fatal", source, f"uncorrectable fatal PCIe error from {source}, reported by {port}"
    return KernelEvent(vendor=None, kind=kind, message=message, pci_bus_id=bus, timestamp_seconds=seconds,
                       decoded=decoded)
