"""The checks: pure functions from a NodeSnapshot (and Expectations) to CheckResults, one module per family.

`run_checks` runs the selected checks in registry order. A check that raises does not end the run: it becomes an
`unknown` result naming the internal error (the traceback goes to the log, on stderr).
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from gpudiag.checks import (
    active,
    amd_platform,
    baseline,
    driver,
    ecc,
    fabric,
    firmware,
    host,
    inventory,
    kernel_log,
    pcie,
    power,
    recovery,
    thermal,
    topology,
    workload,
)
from gpudiag.checks.common import Check, unknown
from gpudiag.checks.verdicts import INTERNAL_ERROR, assign, with_verdict
from gpudiag.expect import DEFAULT_EXPECTATIONS, Expectations
from gpudiag.model import CheckResult, NodeSnapshot

log = logging.getLogger(__name__)

# Checklist order: from "is there a driver at all" down to "what runs on it".
REGISTRY: tuple[Check, ...] = (
    driver.CHECKS + recovery.CHECKS + amd_platform.DRIVER_CHECKS + inventory.CHECKS + amd_platform.INVENTORY_CHECKS
    + pcie.CHECKS + amd_platform.PCIE_CHECKS + ecc.CHECKS + thermal.CHECKS + power.CHECKS
    + topology.CHECKS + fabric.CHECKS + firmware.CHECKS + kernel_log.CHECKS + host.CHECKS + workload.CHECKS
    + active.CHECKS  # judged from snapshot.active (`check --level 2`); skipped with that hint otherwise
    + baseline.CHECKS  # judged against Expectations.baseline (`check --baseline FILE`); skipped otherwise
)
CHECK_IDS: tuple[str, ...] = tuple(c.id for c in REGISTRY)
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(c.family for c in REGISTRY))
_BY_ID = {c.id: c for c in REGISTRY}
if len(_BY_ID) != len(REGISTRY):
    raise RuntimeError("duplicate check ID in the registry")


def _expand(names: Iterable[str], option: str) -> set[str]:
    ids: set[str] = set()
    for name in names:
        if name in _BY_ID:
            ids.add(name)
        elif name in FAMILIES:
            ids.update(c.id for c in REGISTRY if c.family == name)
        else:
            raise ValueError(f"{option}: unknown check or family {name!r}; families: {', '.join(FAMILIES)}; "
                             f"checks: {', '.join(CHECK_IDS)}")
    return ids


def resolve_selection(only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Check]:
    """The checks to run, in registry order. `only` and `skip` take full IDs ("pcie.link_width") or families
    ("pcie"); an empty `only` means all. An unknown name raises ValueError."""
    only_ids = _expand(only, "--only")
    skip_ids = _expand(skip, "--skip")
    return [c for c in REGISTRY if (not only_ids or c.id in only_ids) and c.id not in skip_ids]


# The optional parts of a collection (gpudiag.probe.PROBE_PARTS) and the checks that judge them: a selection that
# holds none of a part's checks lets the probe skip it.
_PART_CHECKS = {
    "kernel_log": ("kernel_log.",),
    "peers": ("topology.p2p", "baseline.fabric", "active."),
    "link_errors": ("topology.link_errors",),
}


def probe_parts_for(checks: Iterable[Check]) -> frozenset[str]:
    """The optional probe parts that the given checks judge."""
    ids = [c.id for c in checks]
    return frozenset(part for part, prefixes in _PART_CHECKS.items() if any(i.startswith(prefixes) for i in ids))


def _run_one(check: Check, snapshot: NodeSnapshot, expectations: Expectations) -> list[CheckResult]:
    """The check's results, each with its automation verdict (checks/verdicts.py)."""
    try:
        return [assign(result) for result in check.run(snapshot, expectations)]
    except Exception as exc:  # a bug in one check must not take the checklist down
        log.exception("check %s raised", check.id, extra={"bound": ("check raised", check.id)})
        error = f"{type(exc).__name__}: {exc}"
        return [with_verdict(unknown(check.id, None, f"internal error in check {check.id}: {error}",
                                     observed=error, expected="the check completes",
                                     remediation="This is a gpudiag bug: report it with the log (traceback on "
                                                 "stderr) and a snapshot of this node."), *INTERNAL_ERROR)]


def run_checks(snapshot: NodeSnapshot, expectations: Optional[Expectations] = None, only: Iterable[str] = (),
               skip: Iterable[str] = ()) -> list[CheckResult]:
    expectations = expectations or DEFAULT_EXPECTATIONS
    return [result for check in resolve_selection(only, skip) for result in _run_one(check, snapshot, expectations)]


__all__ = ["CHECK_IDS", "FAMILIES", "REGISTRY", "Check", "resolve_selection", "run_checks"]
