"""Which results follow from which: one cause, said once.

A GPU that stops answering makes every other check on it `unknown` and the node's GPU count short; a CUDA driver
library that is not installed leaves every load test on every GPU unjudged. Those results are true, and the JSON
report keeps every one of them, but they are consequences: the operator acts on the result they follow from. This
module names, for each result, the results it follows from (none for a finding of its own), by rules that read only
what the checks wrote (their IDs, devices, fault codes and observed values), so that a new check is covered by
them without being listed here:

- A GPU that does not answer its vendor library (`inventory.gpus_visible` fails on it): every result on that GPU
  that says it could not be judged because the GPU did not answer (the fault code of checks.common.unreachable),
  and the kernel log's record of that very GPU falling off the bus (Xid 79, its PCIe slot's link down), follow from
  that failure; so does `inventory.gpu_count` when the GPUs on the PCI bus are all there and the lost GPUs account
  for the shortfall of those answering.
- A vendor library that failed (`driver.library`): the GPUs on the PCI bus it should have enumerated, which
  `inventory.gpus_visible` then cannot cross-check, follow from that failure.
- Uncorrectable errors that two checks count: an AMD GPU's uncorrected ECC errors all in the XGMI_WAFL RAS block
  are the XGMI link's errors that `topology.link_errors` reports on the same GPU, and follow from it.
- A load test that could not run for a reason shared by the node (the same runtime error on several results: a
  runtime library that would not load, a driver that would not initialise): every later result with that error
  follows from the first one, which says it.

A reference to a result is `"<check> <where>"`: where is the GPU's PCI bus ID, `GPU <index>` for a GPU whose bus ID
is unknown, or `node`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Optional

from gpudiag.model import CheckResult, Status

# checks.verdicts.UNREACHABLE's code, written out: the checklist's renderer (which the fleet command imports too)
# does not import every check module for it (tests/report/test_causes.py holds the two equal).
UNREACHABLE_CODE = "GPUDIAG-GPU-UNREACHABLE"
GPUS_VISIBLE = "inventory.gpus_visible"
GPU_COUNT = "inventory.gpu_count"
LIBRARY = "driver.library"
ECC_UNCORRECTED = "ecc.uncorrected"
LINK_ERRORS = "topology.link_errors"
XGMI_BLOCK = "xgmi_wafl"
# Kernel-log verdicts that record the very loss inventory.gpus_visible reports (checks/kernel_log/nvidia.py
# FALLEN_OFF_BUS and Xid 79; checks/kernel_log/common.py: the slot above the GPU lost its link or card).
LOSS_RECORDS = frozenset({"GPUDIAG-XID-79", "GPUDIAG-PCIE-SLOT-LOST"})
_UNJUDGED = (Status.UNKNOWN, Status.FAIL, Status.WARN)


def where(result: CheckResult) -> str:
    device = result.device
    if device is None:
        return "node"
    return device.pci_bus_id or f"GPU {device.index}"


def reference(result: CheckResult) -> str:
    """`"<check> <where>"`: how the JSON report names a result another follows from."""
    return f"{result.check} {where(result)}"


def _gpu_key(result: CheckResult) -> Optional[Hashable]:
    device = result.device
    if device is None:
        return None
    return ("bus", device.pci_bus_id) if device.pci_bus_id else ("index", device.vendor, device.index)


def _lost_gpus(results: list[CheckResult]) -> dict[Hashable, int]:
    """GPU → the position of the inventory.gpus_visible failure that says it does not answer."""
    lost = {}
    for position, result in enumerate(results):
        key = _gpu_key(result)
        observed = result.observed if isinstance(result.observed, dict) else {}
        if (result.check == GPUS_VISIBLE and result.status is Status.FAIL and key is not None
                and observed.get("reachable") is False):
            lost.setdefault(key, position)
    return lost


def _count_explained(result: CheckResult, lost: int) -> bool:
    """inventory.gpu_count short only because `lost` GPUs on the bus stopped answering."""
    observed, expected = result.observed, result.expected
    if not isinstance(observed, dict) or not isinstance(expected, int) or isinstance(expected, bool):
        return False
    on_bus, answering = observed.get("pci_bus"), observed.get("enumerated")
    if not isinstance(on_bus, int) or not isinstance(answering, int):
        return False
    return on_bus >= expected > answering and lost >= expected - answering


def _shared_error(result: CheckResult) -> Optional[str]:
    """The runtime error a load test could not run for (checks/active/common._not_judged's observed value)."""
    observed = result.observed
    if result.status is not Status.UNKNOWN or not result.check.startswith("active."):
        return None
    if isinstance(observed, dict) and set(observed) == {"error"} and isinstance(observed["error"], str):
        return observed["error"]
    return None


def _observed(result: CheckResult) -> dict:
    return result.observed if isinstance(result.observed, dict) else {}


def _libraries_failed(results: list[CheckResult]) -> dict[str, int]:
    """Bus ID of a GPU on the PCI bus → the position of the driver.library failure that left it without a driver."""
    left = {}
    for position, result in enumerate(results):
        buses = _observed(result).get("gpus_on_bus")
        if result.check == LIBRARY and result.status is Status.FAIL and isinstance(buses, list):
            left.update({bus: position for bus in buses if isinstance(bus, str) and bus not in left})
    return left


def _unenumerated_bus(result: CheckResult) -> Optional[str]:
    """The bus ID of an inventory.gpus_visible result that could not cross-check a GPU no library enumerated."""
    observed = _observed(result)
    if result.check == GPUS_VISIBLE and result.status is Status.UNKNOWN and set(observed) == {"pci_bus_id"}:
        return observed["pci_bus_id"] if isinstance(observed["pci_bus_id"], str) else None
    return None


def _uncorrected(counts: object) -> int:
    value = counts.get("uncorrected") if isinstance(counts, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _xgmi_only(result: CheckResult) -> int:
    """ecc.uncorrected's errors when every one of them is in the XGMI_WAFL block (its observed by_block), else 0."""
    blocks = _observed(result).get("by_block")
    if result.check != ECC_UNCORRECTED or result.status is Status.PASS or not isinstance(blocks, dict):
        return 0
    counted = {name for name, counts in blocks.items() if _uncorrected(counts)}
    return _uncorrected(blocks[XGMI_BLOCK]) if counted == {XGMI_BLOCK} else 0


def _xgmi_errors(results: list[CheckResult]) -> dict[Hashable, tuple[int, int]]:
    """GPU → (position, count) of topology.link_errors failing on uncorrectable XGMI_WAFL errors."""
    found = {}
    for position, result in enumerate(results):
        count = _uncorrected(_observed(result).get(XGMI_BLOCK))
        if result.check == LINK_ERRORS and result.status is Status.FAIL and count and _gpu_key(result) is not None:
            found.setdefault(_gpu_key(result), (position, count))
    return found


def follows_from(results: list[CheckResult]) -> list[list[int]]:
    """For each result (by position), the positions of the results it follows from; empty for a finding."""
    causes: list[list[int]] = [[] for _ in results]
    lost, left, xgmi = _lost_gpus(results), _libraries_failed(results), _xgmi_errors(results)
    first_with: dict[str, int] = {}
    for position, result in enumerate(results):
        key = _gpu_key(result)
        root = lost.get(key) if key is not None else None
        link = xgmi.get(key) if key is not None else None
        if root is not None and root != position and result.status in _UNJUDGED and (
                result.fault_code == UNREACHABLE_CODE or result.fault_code in LOSS_RECORDS):
            causes[position] = [root]
        elif result.check == GPU_COUNT and result.status is Status.FAIL and _count_explained(result, len(lost)):
            causes[position] = sorted(lost.values())
        elif _unenumerated_bus(result) in left:
            causes[position] = [left[_unenumerated_bus(result)]]
        elif link is not None and 0 < _xgmi_only(result) <= link[1]:
            causes[position] = [link[0]]
        elif (error := _shared_error(result)) is not None:
            if error in first_with:
                causes[position] = [first_with[error]]
            else:
                first_with[error] = position
    for position, roots in enumerate(causes):  # a cause that follows from another: name the first cause
        seen = {position}
        while len(roots) == 1 and causes[roots[0]] and roots[0] not in seen:
            seen.add(roots[0])
            roots = causes[roots[0]]
        causes[position] = roots
    return causes


def caused_by(results: list[CheckResult]) -> list[list[str]]:
    """follows_from as the JSON report says it: references (`reference`) in place of positions."""
    return [[reference(results[p]) for p in positions] for positions in follows_from(results)]


def consequences(results: list[CheckResult]) -> dict[int, list[int]]:
    """Root position → the positions that follow from it (a result following from several roots is listed under
    the first)."""
    found: dict[int, list[int]] = defaultdict(list)
    for position, roots in enumerate(follows_from(results)):
        if roots:
            found[roots[0]].append(position)
    return dict(found)
