"""What `gpudiag root-facts` reads as root for the record of record.py (kept apart from it: the probes that use the
record import that module, and this one imports them)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Optional

from gpudiag.probe.host import probe_host
from gpudiag.probe.kernel_log.boot_history import read_boot_history
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
            and not any("deadline" in p for p in previous.journal.problems):
        facts.journal = previous.journal
    else:
        history = read_boot_history(root, None, host.boot_id, host.boot_time, until, journalctl)
        facts.journal = JournalPart(faults=history.faults, sources=history.sources, problems=history.problems)
    return facts
