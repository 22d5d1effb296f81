"""What `gpudiag screen` prints (text, or JSON for automation), and the process-list reader it watches the GPUs
with (both vendors at once where a node has both)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from gpudiag.active.screen.policy import Plan, ScreenPolicy
from gpudiag.model import DeviceSnapshot, to_dict
from gpudiag.model.screen import ScreenRun
from gpudiag.report.text import clean, human_duration


class _Readers:
    """One reader per vendor, read as one."""

    def __init__(self, readers: list):
        self._readers = readers

    def read(self) -> dict:
        found: dict = {}
        for reader in self._readers:
            found.update(reader.read())
        return found

    def close(self) -> None:
        for reader in self._readers:
            reader.close()


def open_reader(devices: list[DeviceSnapshot], root: Path = Path("/")):
    from gpudiag.probe.screening.gpu_users import open_usage_reader

    by_vendor: dict[str, list[str]] = {}
    for device in devices:
        by_vendor.setdefault(device.vendor.value, []).append(device.pci_bus_id)
    readers = []
    try:
        for vendor, bus_ids in by_vendor.items():
            readers.append(open_usage_reader(vendor, bus_ids, root))
    except BaseException:
        _Readers(readers).close()
        raise
    return _Readers(readers)


def render(policy: ScreenPolicy, plan: Plan, runs: list[ScreenRun], fmt: str, note: Optional[str]) -> str:
    if fmt == "json":
        return json.dumps({
            "schema_version": 1,
            "policy": {"every_seconds": policy.every_seconds, "idle_after_seconds": policy.idle_after_seconds,
                       "max_gpus": policy.max_gpus},
            "note": note,
            "decisions": [{"gpu": d.index, "pci_bus_id": d.pci_bus_id, "screen": d.screen, "reason": d.reason}
                          for d in plan.decisions],
            "runs": [dict(to_dict(r), duration_seconds=round(r.duration_seconds, 3)) for r in runs],
        }, indent=2) + "\n"
    lines = [f"gpudiag screen · {len(plan.decisions)} GPU(s) · every {human_duration(policy.every_seconds)}, idle "
             f"after {human_duration(policy.idle_after_seconds)}, {policy.max_gpus} at once"]
    if note:
        lines.append(f"  {clean(note)}")
    ran = {r.pci_bus_id: r for r in runs}
    for decision in plan.decisions:
        where = f"GPU {'?' if decision.index is None else decision.index} {decision.pci_bus_id}"
        run = ran.get(decision.pci_bus_id)
        if run is None:
            lines.append(f"  {where}  {'to screen' if decision.screen else 'not screened'}: {clean(decision.reason)}")
            continue
        gone = f", gone {run.yield_seconds:.2f} s after the stop" if run.yield_seconds is not None else ""
        held = f", held {run.footprint_bytes / 2**30:.2f} GiB at most" if run.footprint_bytes else ""
        lines.append(f"  {where}  {run.outcome.upper()} after {human_duration(run.duration_seconds)}{gone}{held}: "
                     f"{clean(run.reason)}")
    return "\n".join(lines) + "\n"
