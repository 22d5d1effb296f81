"""A check family's declaration: its checks in checklist order, and beside them what the central views are built from.

Every family module of gpudiag/checks/ declares `FAMILY = Family(...)` (a module of two families: `FAMILIES`), as
node_exporter's collectors register themselves; gpudiag/checks/__init__.py finds the declarations and builds from them
the registry (checklist order: `order`), the verdict table (verdicts.py), the reference text and settings of
docs/reference/checks.md, and which optional probe parts a selection needs. A declaration that leaves a check without
its verdict row or its reference text raises FamilyError when the module is imported, so that no check ships
unexplained. How to add a family: docs/adding-a-check-family.md.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Callable, Mapping, Optional

from gpudiag.checks.common import Check
from gpudiag.checks.verdicts import ACTIONS
from gpudiag.model import Status
from gpudiag.model.records import dataclass

Verdicts = Mapping[Status, tuple[str, str]]  # status -> (action, fault code)

_NAME = re.compile(r"[a-z][a-z_]*")
_FAULT_CODE = re.compile(r"GPUDIAG-[A-Z0-9][A-Z0-9-]*")
# pass and skip need no verdict (verdicts.assign gives them "none").
_JUDGED = (Status.FAIL, Status.WARN, Status.UNKNOWN)


class FamilyError(ValueError):
    """A family declaration the central views cannot be built from (a gpudiag bug, found when it is imported)."""


@dataclass(frozen=True)
class DriftFact:
    """A node property `gpudiag fleet` compares across the nodes of one GPU model (a node whose value differs from
    most of its peers' drifts), read from one of the family's check results in a node's report (issue 34, item 2)."""
    name: str  # the property, unique among families: e.g. "services_enabled"
    description: str  # what it is, as the fleet view names it: "GPU services enabled"
    # the result's `observed` (a dict from a report: hostile, may be anything) -> the node's value, None for none
    read: Callable[[dict], Optional[str]]
    advice: str  # what to do about a node that drifts on it
    action: str = "watch"  # the drifting node's verdict (one of verdicts.ACTIONS)


@dataclass(frozen=True)
class Family:
    """One family of checks, e.g. `pcie`: what `--only pcie` selects and docs/reference/checks.md's `## pcie`."""
    name: str  # the check-ID prefix: every check's ID is "<name>.<check>"
    order: int  # place in the checklist, lowest first (driver 10 ... baseline 210): unique among families
    checks: tuple[Check, ...]  # in checklist order
    # check ID -> {status: (action, fault code)}, for every check; {} = the defaults (verdicts.assign). Fault codes are
    # part of the JSON contract: never rename one. docs/reference/verdicts.md shows the whole table.
    verdicts: Mapping[str, Verdicts]
    # check ID -> (what it reads, what an operator does about a finding, in short), for every check.
    reference: Mapping[str, tuple[str, str]]
    # check ID -> the Expectations fields (profile keys, `-p KEY=VALUE`) it judges with; a check not listed has none.
    settings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # optional probe part (gpudiag.probe.collector.PROBE_PARTS) -> the check-ID prefixes of this family that judge it: a
    # selection with none of them lets the probe skip the part.
    probe_parts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    note: str = ""  # one line under the family's heading in docs/reference/checks.md
    # check ID -> the node property `gpudiag fleet` reads from its results and compares across peers (drift)
    drift: Mapping[str, DriftFact] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise FamilyError(f"check family {self.name!r}: " + "; ".join(problems))

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(check.id for check in self.checks)

    def _problems(self):
        if not _NAME.fullmatch(self.name):
            yield "the name must be lower-case letters and underscores"
        ids = self.ids
        if not ids:
            yield "no checks"
        if len(set(ids)) != len(ids):
            yield "a check ID twice"
        yield from (f"{i} is not named {self.name}.<check>" for i in ids if i.split(".", 1)[0] != self.name)
        for table, what in ((self.verdicts, "verdict row"), (self.reference, "reference text")):
            yield from (f"no {what} for {i}" for i in ids if i not in table)
            yield from (f"a {what} for {i}, which is not one of its checks" for i in table if i not in ids)
        for check_id, rows in self.verdicts.items():
            for status, (action, code) in rows.items():
                if status not in _JUDGED or action not in ACTIONS or not _FAULT_CODE.fullmatch(code):
                    yield f"{check_id}: bad verdict {status!r}: ({action!r}, {code!r})"
        for check_id, (reads, remediation) in self.reference.items():
            if not reads.strip() or not remediation.strip():
                yield f"{check_id}: empty reference text"
        yield from (f"settings for {i}, which is not one of its checks" for i in self.settings if i not in ids)
        yield from (f"a drift fact for {i}, which is not one of its checks" for i in self.drift if i not in ids)
        yield from (f"{i}: drift fact {f.name!r}: bad name or action" for i, f in self.drift.items()
                    if not _NAME.fullmatch(f.name) or f.action not in ACTIONS or not f.description or not f.advice)
        for part, prefixes in self.probe_parts.items():
            yield from (f"probe part {part!r}: {p!r} names none of its checks" for p in prefixes
                        if not any(i.startswith(p) for i in ids))
