"""The ras family's probe part, found by its name (probe/collector.py): root's record of each AMD GPU's CPER records
(probe/root_facts/record.py), for a process that cannot read them itself (issue 32, item 9).

amdsmi reads the CPER ring from debugfs, which only root may enter, and answers anyone else NOT_SUPPORTED
(probe/amdsmi/cper_entries.py). The shipped units run gpudiag as the `gpudiag` user and, before it, `gpudiag
root-facts` as root, which records the records. This part loads that record beside the vendor probes and, once they
are done, gives it to each AMD GPU whose own read answered NOT_SUPPORTED; a GPU the record does not hold keeps its
skip, whose reason then also says why the record did not help. Root reads the ring itself and never uses the record.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from gpudiag.model import NodeSnapshot, ProbeError, Vendor
from gpudiag.model.cper import CperLog

Recorded = tuple[dict[str, CperLog], str]


def collect(snapshot: NodeSnapshot, options, until: float) -> Recorded:
    if os.geteuid() == 0:
        return {}, "root reads the records itself"
    from gpudiag.probe.root_facts import record

    facts, why = record.load(options.state_dir, snapshot.host.boot_id)
    return record.cper_of(facts, why)


def store(snapshot: NodeSnapshot, value: Optional[Recorded], error: Optional[ProbeError]) -> None:
    if os.geteuid() == 0:
        return  # root's own read stands, NOT_SUPPORTED included: the ring is not there
    amd = [device for device in snapshot.devices if device.vendor == Vendor.AMD]
    if not amd:
        return
    from gpudiag.probe.amdsmi.cper_entries import NOT_SUPPORTED, SOURCE  # here: the amdsmi probe's, for AMD GPUs

    unread = f"root's record was not read ({error.message if error else 'no reason given'})"
    recorded, why = value if value is not None else ({}, unread)
    for device in amd:
        if device.cper is not None or device.unsupported.get(SOURCE) != NOT_SUPPORTED:
            continue
        log = recorded.get(device.physical_pci_bus_id or device.pci_bus_id or "")
        if log is None:
            device.unsupported[SOURCE] = f"{NOT_SUPPORTED}; root's record does not hold them ({why})"
            continue
        device.cper = dataclasses.replace(log, records=list(log.records), problems=list(log.problems),
                                          source=why)
        del device.unsupported[SOURCE]
