"""What `gpudiag root-facts` reads as root for the record of record.py (kept apart from it: the probes that use the
record import that module, and this one imports them)."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Optional

from gpudiag.model import Vendor
from gpudiag.model.cper import CperLog
from gpudiag.probe import deadline

from gpudiag.probe.host import probe_host
from gpudiag.probe.kernel_log.boot_history import read_boot_history, stopped_by_deadline
from gpudiag.probe.network.rdma import read_network
from gpudiag.probe.pci import probe_pci_gpus
from gpudiag.probe.root_facts.record import JournalPart, RootFacts


def gather(root: Path, until: float, previous: Optional[RootFacts] = None,
           journalctl: Optional[str] = None) -> RootFacts:
    """Read what only root can (run as root): every bridge on the GPUs' and NICs' paths, and the systemd journal's
    earlier boots, whose faults are carried from `previous` when it is this boot's (they cannot change meanwhile)."""
    host, _ = probe_host(root)
    pci_gpus, _ = probe_pci_gpus(root)
    network = read_network(root, until, pci_gpus)
    facts = RootFacts(written_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      boot_id=host.boot_id, bridges=network.bridges)
    if previous is not None and previous.boot_id == host.boot_id and previous.journal is not None \
            and not stopped_by_deadline(previous.journal.problems):
        facts.journal = previous.journal
    else:
        history = read_boot_history(root, None, host.boot_id, host.boot_time, until, journalctl)
        facts.journal = JournalPart(faults=history.faults, sources=history.sources, problems=history.problems)
    if any(gpu.vendor == Vendor.AMD for gpu in pci_gpus):
        facts.cper, facts.cper_problem = _cper(until)
    else:
        facts.cper_problem = "no AMD GPU on the PCI bus"
    return facts


def _cper(until: float) -> tuple[Optional[dict[str, CperLog]], str]:
    """Every AMD GPU's CPER records through amdsmi, under the deadline (a hung call is left behind, named)."""
    from gpudiag.probe.amdsmi.backend import AmdsmiBackend

    def read(tracker: deadline.CallTracker) -> tuple[Optional[dict[str, CperLog]], str]:
        backend = AmdsmiBackend()
        info = backend.open(tracker)
        if not info.available:
            return None, f"amdsmi is not usable ({info.error.message if info.error else 'no GPU handles'})"
        try:
            devices = backend.cper_by_bus(tracker)
        finally:
            backend.close()
        found = {bus: device.cper for bus, device in devices.items() if device.cper is not None}
        missing = [f"{bus}: {'; '.join(e.message for e in device.errors) or '; '.join(device.unsupported.values())}"
                   for bus, device in devices.items() if device.cper is None]
        return found, "; ".join(missing)

    outcome = deadline.run_one(read, max(0.5, until - time.monotonic()), "root-facts cper")
    if not outcome.done:
        return None, f"amdsmi did not answer within the deadline (in {outcome.tracker.current or 'a call'})"
    if outcome.error is not None:
        return None, f"reading them failed: {outcome.error}"
    return outcome.value
