"""`check -i 0,3` / `--gpu`: judge some GPUs only, as nvidia-smi's `-i` picks them, by index, PCI bus ID or UUID.

Every check still runs over the whole node (a GPU's peers, the driver, the host are read as always); the report,
JSON, JUnit and the exit code then hold only the results about the selected GPUs, and the node-level results (those
about no GPU: the driver and its library, the host, the GPU count against the profile, kernel-log lines that name
no GPU), which a chosen GPU depends on as much as any."""

from __future__ import annotations

from typing import Iterable, Optional

from gpudiag.model import CheckResult, NodeSnapshot
from gpudiag.model.common import normalize_pci_bus_id

MAX_SHOWN = 16  # GPUs named in the refusal of one that is not there
MAX_INDEX_DIGITS = 9


def _bus(text: str) -> Optional[str]:
    try:
        return normalize_pci_bus_id(text)
    except ValueError:
        return None


def _index(text: str) -> Optional[int]:
    """A GPU index: a few decimal digits. Python refuses to convert more than 4300 digits (its message names
    sys.set_int_max_str_digits: no answer to `-i`), and no node has a GPU past 9 of them."""
    return int(text) if text.isdigit() and len(text) <= MAX_INDEX_DIGITS else None


def _named(text: str) -> str:
    """What the user wrote, quoted, and shortened when long (a line of 5,000 digits is no clear error)."""
    return repr(text) if len(text) <= 60 else f"{text[:40]!r}… ({len(text)} characters)"


def known_gpus(snapshot: NodeSnapshot) -> list[tuple[Optional[int], Optional[str], Optional[str]]]:
    """(index, bus ID, UUID) of every GPU the snapshot knows: the backends' and the PCI bus's (a lost GPU too)."""
    found = [(d.index, d.pci_bus_id, d.uuid) for d in snapshot.devices]
    seen = {bus for _, bus, _ in found if bus}
    found += [(None, p.pci_bus_id, None) for p in snapshot.pci_gpus if p.pci_bus_id not in seen]
    return found


def select_gpus(snapshot: NodeSnapshot, wanted: Iterable[str]) -> tuple[set[int], set[str]]:
    """(indices, bus IDs) of the GPUs `wanted` names; ValueError, one line naming what exists, for one not here."""
    return select_known(known_gpus(snapshot), wanted)


def select_known(known: list[tuple[Optional[int], Optional[str], Optional[str]]],
                 wanted: Iterable[str]) -> tuple[set[int], set[str]]:
    """select_gpus among `known` GPUs, (index, bus ID, UUID) each: also what `gpudiag top -i` picks from the rows
    the service sends (gpudiag/report/live.py)."""
    indices, buses = set(), set()
    for name in wanted:
        text = name.strip()
        bus = _bus(text) if ":" in text else None
        number = _index(text)
        match = [g for g in known if (number is not None and g[0] == number) or (bus is not None and g[1] == bus)
                 or (g[2] is not None and g[2].lower() == text.lower())]
        if not match:
            shown = "; ".join(f"{'?' if index is None else index} ({', '.join(p for p in (bus_id, uuid) if p)})"
                              for index, bus_id, uuid in known[:MAX_SHOWN])
            more = f", and {len(known) - MAX_SHOWN} more" if len(known) > MAX_SHOWN else ""
            raise ValueError(f"--gpu {_named(text)}: no such GPU on this node; it has "
                             f"{shown + more if known else 'none'}")
        for index, bus_id, _ in match:
            if index is not None:
                indices.add(index)
            if bus_id:
                buses.add(bus_id)
    return indices, buses


def about_selected(results: list[CheckResult], indices: set[int], buses: set[str]) -> list[CheckResult]:
    """The node-level results and those about a selected GPU (by bus ID where the result has one, else index)."""
    def kept(result: CheckResult) -> bool:
        device = result.device
        if device is None:
            return True
        if device.pci_bus_id:
            return device.pci_bus_id in buses
        return device.index in indices

    return [r for r in results if kept(r)]
