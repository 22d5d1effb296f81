"""What a check result is about, read from the result's own fields, in one place for every output that names it or
keys by it (the text checklist, the exporter's series, serve's log of changes, the history). It is one of:

- a GPU (the result's device: its index, bus ID, vendor);
- a NIC port, or a NIC (the network family's results carry no device: their observed value names the RDMA device
  as `nic`, its PCI function as `pci_bus_id` and the port as `port`, gpudiag/checks/network/common.py `ident`);
- a GPU on the PCI bus that no vendor library lists (no device; its bus ID as observed `pci_bus_id`);
- the node (None).

A NIC's bus ID is the NIC's, never a GPU's (issue 36 item 4: `GPU at 0000:3b:00.0` named mlx5_4).
"""

from __future__ import annotations

from typing import Hashable, Optional

from gpudiag.model import CheckResult
from gpudiag.model.records import dataclass


@dataclass(frozen=True)
class Subject:
    """A GPU (index, bus ID, vendor), a GPU on the bus that no library enumerated (bus ID alone), or a NIC (`nic`,
    its bus ID, and `port` when the result is about one port)."""
    index: Optional[int]
    bus: Optional[str]
    vendor: Optional[str] = None
    nic: Optional[str] = None
    port: Optional[int] = None

    @property
    def is_nic(self) -> bool:
        return self.nic is not None

    @property
    def label(self) -> str:
        """`GPU 3 (0000:5d:00.0)`, `GPU at 0000:5d:00.0`, `NIC mlx5_4 (0000:3b:00.0) port 1`."""
        if self.nic is not None:
            where = f" ({self.bus})" if self.bus else ""
            return f"NIC {self.nic}{where}" + (f" port {self.port}" if self.port is not None else "")
        if self.index is None:
            return f"GPU at {self.bus}"
        return f"GPU {self.index} ({self.bus or 'unknown bus'})"

    @property
    def key(self) -> Hashable:
        """What two results about the same thing share (a GPU by its bus ID where it has one)."""
        if self.nic is not None:
            return ("nic", self.nic, self.port)
        if self.bus:
            return ("bus", self.bus)
        return ("gpu", self.vendor, self.index)


def subject(result: CheckResult) -> Optional[Subject]:
    """What `result` is about; None: the node."""
    device = result.device
    if device is not None:
        return Subject(device.index, device.pci_bus_id, device.vendor.value)
    observed = result.observed if isinstance(result.observed, dict) else {}
    bus = observed.get("pci_bus_id")
    bus = bus if isinstance(bus, str) and bus else None
    nic = observed.get("nic")
    if isinstance(nic, str) and nic:
        port = observed.get("port")
        return Subject(None, bus, nic=nic, port=port if isinstance(port, int) and not isinstance(port, bool) else None)
    return Subject(None, bus) if bus else None


def key(result: CheckResult) -> Hashable:
    """`subject(result).key`, or "node"."""
    about = subject(result)
    return "node" if about is None else about.key
