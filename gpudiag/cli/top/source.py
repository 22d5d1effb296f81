"""Where `gpudiag top`'s samples come from: the running service when one answers (the socket's `top` request: the
latest collection's rows and verdicts, so that the node keeps one NVML/amdsmi client), else a collection of its
own per sample (a Collector held open across samples, as the service holds one; each collection bounded by
--timeout as `check`'s is). Which GPUs are shown (`-i`) is decided here, over the rows, with check's selection.

No typer here; the probe is imported only where a sample is collected directly."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from gpudiag import DEFAULT_DEADLINE_SECONDS
from gpudiag.cli.shared.node_collect import UsageProblem

log = logging.getLogger("gpudiag")

DIRECT, SERVICE = "direct", "service"
# The freshest collection asked of the service: half the interval (so that two samples a second apart are two
# collections), at most the protocol's default second. The service gives other users than root and its own at
# most one a second whatever they ask (docs/service.md): with -d 1 such a user may see a collection twice.
MAX_AGE_SECONDS = 1.0


@dataclass
class Sample:
    """One sample: the rows shown (selected, and those gone since an earlier sample), when they were read, how."""

    taken_at: float  # Unix time the values were read (the collection's end)
    rows: list[dict]
    node: Optional[dict]  # the node-level verdict ({status: [check IDs]}); None: not judged
    hostname: Optional[str]
    source: str  # DIRECT | SERVICE
    nothing_probed: bool = False
    notes: list[str] = field(default_factory=list)


def _key(row: dict) -> tuple:
    return ("bus", row["pci_bus_id"]) if row.get("pci_bus_id") else ("index", row.get("index"))


def _order(row: dict) -> tuple:
    return (row.get("index") is None, row.get("index") or 0, row.get("pci_bus_id") or "")


class Sampler:
    def __init__(self, root: Path, socket: Optional[Path], timeout: Optional[float], direct: bool,
                 wanted: Optional[list[str]], interval: float):
        from gpudiag.service import socket_path

        self.root, self.timeout, self.interval = root, timeout, interval
        self._socket = None if direct else socket_path(root, socket)
        self._direct: Optional[_Direct] = None
        self._wanted = wanted
        self._chosen: Optional[set[tuple]] = None  # the keys -i picked, fixed at the first sample
        self._seen: dict[tuple, dict] = {}  # every GPU shown so far: its last row
        self._told: set[str] = set()

    def sample(self) -> Sample:
        view, taken_at, source, notes = None, time.time(), DIRECT, []
        if self._socket is not None:
            view, taken_at, why = self._from_service()
            source = SERVICE
            if why:
                notes.append(why)
                self._tell(why)
        if view is None:
            source = DIRECT
            if self._direct is None:
                self._direct = _Direct(self.root, self.timeout)
            view, taken_at = self._direct.view()
        return Sample(taken_at, self._select(view.get("gpus") or []), view.get("node"), view.get("hostname"), source,
                      bool(view.get("nothing_probed")), notes)

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()

    def _tell(self, why: str) -> None:
        if why not in self._told:  # once per reason, not once a second
            self._told.add(why)
            log.warning("%s", why)

    def _from_service(self) -> tuple[Optional[dict], float, Optional[str]]:
        """(the view, when it was read, why not the service's) — the view None where this sample is direct."""
        from gpudiag.service.client import ServiceError, ask

        # as check waits
        wait = (DEFAULT_DEADLINE_SECONDS if self.timeout is None else min(self.timeout, DEFAULT_DEADLINE_SECONDS)) + 1.0
        request = {"op": "top", "max_age": min(MAX_AGE_SECONDS, self.interval / 2), "wait": wait}
        try:
            answer = ask(self._socket, request, timeout=wait + 1.0)
        except ServiceError as exc:  # busy, or a service that has no `top` (an older gpudiag)
            return None, time.time(), f"the service at {self._socket} did not answer top ({exc}): probing directly"
        if answer is None:  # nobody listening: direct from now on (a service started later is not looked for)
            if self._seen:
                self._tell(f"the service at {self._socket} stopped answering: probing directly")
            self._socket = None
            return None, time.time(), None
        view = answer.get("view")
        if not answer.get("fresh") or not isinstance(view, dict):
            # Its last complete collection could show a node that has hung since as it was: never a stale one.
            return None, time.time(), (f"the service's collection did not finish ({answer.get('problem')}): "
                                       f"probing directly")
        taken_at = answer.get("collected_at")
        return view, float(taken_at) if isinstance(taken_at, (int, float)) else time.time(), None

    def _select(self, rows: list[dict]) -> list[dict]:
        """The rows -i picked (all without it), and a `gone` row for each GPU shown before and missing now."""
        self._remember(rows)
        if self._chosen is None and self._wanted:
            from gpudiag.report.gpu_selection import select_known

            try:
                indices, buses = select_known([(r.get("index"), r.get("pci_bus_id"), r.get("uuid")) for r in rows],
                                              self._wanted)
            except ValueError as exc:  # a GPU this node does not have: one line, exit 2
                raise UsageProblem(str(exc)) from None
            self._chosen = {_key(r) for r in rows
                            if r.get("pci_bus_id") in buses or (not r.get("pci_bus_id") and r.get("index") in indices)}
        shown = [r for r in rows if self._chosen is None or _key(r) in self._chosen]
        present = {_key(r) for r in shown}
        gone = [{"index": row.get("index"), "pci_bus_id": row.get("pci_bus_id"), "gone": True}
                for key, row in self._seen.items() if key not in present]
        for row in shown:
            self._seen[_key(row)] = row
        return sorted(shown + gone, key=_order)


    def _remember(self, rows: list[dict]) -> None:
        """A GPU that stopped answering may no longer tell its bus ID or UUID: it keeps those it had at the same
        index (as the exporter keeps a lost GPU's labels), so that it stays the same row, not a new one."""
        present = {row.get("pci_bus_id") for row in rows}
        for row in rows:
            if row.get("pci_bus_id") is None and row.get("index") is not None:
                before = next((seen for seen in self._seen.values() if seen.get("index") == row["index"]
                               and seen.get("vendor") == row.get("vendor") and seen.get("pci_bus_id")
                               and seen["pci_bus_id"] not in present), None)
                if before is not None:
                    row["pci_bus_id"], row["uuid"] = before["pci_bus_id"], row.get("uuid") or before.get("uuid")


class _Direct:
    """This process's own collections: one Collector for the whole run, all checks with the default expectations."""

    def __init__(self, root: Path, timeout: Optional[float]):
        from gpudiag.cli.shared.node_collect import collect_options
        from gpudiag.probe.collector import Collector

        # power_samples: each sample's power is the mean of the driver's samples since the previous one
        self._collector = Collector(collect_options(root, None, timeout, power_samples=True))

    def view(self) -> tuple[dict, float]:
        from gpudiag.checks import run_checks
        from gpudiag.cli.shared.node_collect import stdout_to_stderr
        from gpudiag.report.live import live_view

        with stdout_to_stderr():  # what a vendor library prints must not land among the lines on stdout
            snapshot = self._collector.collect()
        taken_at = time.time()
        return live_view(snapshot, run_checks(snapshot)), taken_at

    def close(self) -> None:
        """Bounded, as serve closes its libraries: one with a call hung may hang its shutdown too."""
        from gpudiag.probe import deadline

        if not deadline.run_one(lambda tracker: self._collector.close(), 2.0, "close").done:
            log.warning("closing the vendor libraries did not finish; exiting anyway")
