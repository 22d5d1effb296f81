"""Firmware-first PCIe errors: APEI/GHES records in the kernel log → `KernelEvent`s naming the PCIe port.

On servers whose firmware owns error handling (AMD MI300X platforms among them), a PCIe error on a GPU's link does
not reach the AER driver: the firmware reports it through a Generic Hardware Error Source, and ghes.c prints it as
a multi-line record, every line prefixed "{seq}[Hardware Error]: " (drivers/acpi/apei/ghes.c __ghes_print_estatus,
then drivers/firmware/efi/cper.c cper_estatus_print / cper_print_pcie), e.g. from AMD node-scraper's test dmesg:

    {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
    {1}[Hardware Error]: event severity: recoverable
    {1}[Hardware Error]:  Error 0, type: recoverable
    {1}[Hardware Error]:   section_type: PCIe error
    {1}[Hardware Error]:   port_type: 4, root port
    {1}[Hardware Error]:   device_id: 0000:11:01.0
    {1}[Hardware Error]:   vendor_id: 0x1002, device_id: 0x74a1

The record names the port (its `device_id: DDDD:BB:DD.F`), not the GPU below it: the checks find the GPUs below
that port in the PCI tree (PciGpu.upstream_ports). Lines are assembled per `{seq}` (records of two sources may
interleave); at most a few records are open at once, so a flood of headers cannot grow memory. Severity is the
record's own ("event severity: fatal|recoverable|corrected|info", cper_severity_str): fatal and recoverable
(uncorrected) PCIe errors become events; corrected ones do not (the AER counters, pcie.aer, judge their rate).
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import KernelEvent, normalize_pci_bus_id
from gpudiag.probe.kernel_log.text import BUS_ID

_LINE = re.compile(r"\{([0-9]{1,10})\}\[Hardware Error\]: ", re.ASCII)
_SOURCE = re.compile(r"Hardware error from APEI Generic Hardware Error Source: ([0-9]{1,10})", re.ASCII)
_SEVERITY = re.compile(r"event severity: (fatal|recoverable|corrected|info)\b", re.ASCII)
_SECTION = re.compile(r"Error [0-9]{1,4}, type: ", re.ASCII)
_PORT_TYPE = re.compile(r"port_type: [0-9]{1,2}, ([a-z /-]{1,64})$", re.ASCII)
_DEVICE = re.compile(rf"device_id: ({BUS_ID})$", re.ASCII | re.IGNORECASE)
_KINDS = {"fatal": "ghes_pcie_fatal", "recoverable": "ghes_pcie_uncorrected"}
GHES_EVENT_KINDS = tuple(_KINDS.values())
MAX_OPEN_RECORDS = 8


class _Record:
    __slots__ = ("source", "severity", "pcie", "port_type")

    def __init__(self, source: str):
        self.source, self.severity, self.pcie, self.port_type = source, None, False, None


class GhesRecords:
    """Feed it every message of a scan, in order; it returns an event when a PCIe section names its port."""

    def __init__(self) -> None:
        self._open: dict[str, _Record] = {}

    def feed(self, message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
        line = _LINE.match(message)
        if not line:
            return None
        seq, body = line[1], message[line.end():].strip()
        source = _SOURCE.match(body)
        if source:
            self._open.pop(seq, None)
            if len(self._open) >= MAX_OPEN_RECORDS:
                self._open.pop(next(iter(self._open)))
            self._open[seq] = _Record(source[1])
            return None
        record = self._open.get(seq)
        if record is None:
            return None
        if (severity := _SEVERITY.match(body)) is not None:
            record.severity = severity[1]
        elif _SECTION.match(body):
            record.pcie, record.port_type = False, None
        elif body == "section_type: PCIe error":
            record.pcie = True
        elif record.pcie and (port_type := _PORT_TYPE.match(body)) is not None:
            record.port_type = port_type[1]
        elif record.pcie and (device := _DEVICE.match(body)) is not None:
            record.pcie = False  # one event per PCIe section
            kind = _KINDS.get(record.severity or "")
            if kind is None:
                return None
            port = normalize_pci_bus_id(device[1])
            return KernelEvent(vendor=None, kind=kind, message=message, pci_bus_id=port, timestamp_seconds=seconds,
                               decoded=(f"{record.severity} PCIe error at {record.port_type or 'PCIe device'} {port}, "
                                       f"APEI generic hardware error source {record.source}"))
        return None
