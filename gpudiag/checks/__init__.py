"""The checks: pure functions from a NodeSnapshot (and Expectations) to CheckResults, one module per family (a family
with modules of its own keeps them in a sub-package: kernel_log/, network/, active/).

Each family module declares its Family (family.py): its checks, verdict rows, reference text, settings and the
optional probe parts it judges. This package finds the declarations and builds the registry in checklist order and
the central views from them (docs/adding-a-check-family.md).

`run_checks` runs the selected checks in registry order. A check that raises does not end the run: it becomes an
`unknown` result naming the internal error (the traceback goes to the log, on stderr).
"""

from __future__ import annotations

import importlib
import logging
from typing import Iterable, Optional

from gpudiag.checks.common import Check, unknown
from gpudiag.checks.family import Family, FamilyError
from gpudiag.checks.index import FAMILY_MODULES
from gpudiag.checks import verdicts
from gpudiag.checks.verdicts import INTERNAL_ERROR, assign, with_verdict
from gpudiag.expect import DEFAULT_EXPECTATIONS, Expectations
from gpudiag.model import CheckResult, NodeSnapshot, Status

log = logging.getLogger(__name__)


def _declared_families() -> tuple[Family, ...]:
    """Every family the modules of this package declare (`FAMILY`, or `FAMILIES` for a module of two), in
    checklist order: from "is there a driver at all" down to "what runs on it", then the load tests (judged from
    snapshot.active, `check --level 2`) and the baseline (`check --baseline FILE`). The declaring modules are
    listed in index.py (tools/gen_registry_index.py writes it from a walk of the package): a check's start does not
    walk the package, nor import the modules that declare nothing (a family imports its own helpers)."""
    found: list[Family] = []
    for name in FAMILY_MODULES:
        module = importlib.import_module(name)
        declared = getattr(module, "FAMILIES", None) or ((module.FAMILY,) if hasattr(module, "FAMILY") else ())
        found.extend(declared)
    for what, key in (("name", lambda f: f.name), ("order", lambda f: f.order)):
        seen: dict = {}
        for family in found:
            if key(family) in seen:
                raise FamilyError(f"check families {seen[key(family)].name!r} and {family.name!r} share the {what} "
                                  f"{key(family)!r}")
            seen[key(family)] = family
    return tuple(sorted(found, key=lambda f: f.order))


# The central views, built from the declarations (docs/adding-a-check-family.md).
DECLARED: tuple[Family, ...] = _declared_families()
REGISTRY: tuple[Check, ...] = tuple(check for family in DECLARED for check in family.checks)
CHECK_IDS: tuple[str, ...] = tuple(c.id for c in REGISTRY)
FAMILIES: tuple[str, ...] = tuple(family.name for family in DECLARED)
_BY_ID = {c.id: c for c in REGISTRY}
if len(_BY_ID) != len(REGISTRY):
    raise FamilyError("duplicate check ID in the registry")
# check ID -> {status: (action, fault code)} (gpudiag.checks.verdicts.TABLE; docs/reference/verdicts.md).
VERDICTS: dict[str, dict[Status, tuple[str, str]]] = verdicts.TABLE
VERDICTS.update({check_id: dict(family.verdicts[check_id]) for family in DECLARED for check_id in family.ids})
# check ID -> (what it reads, what to do about a finding): docs/reference/checks.md.
REFERENCE: dict[str, tuple[str, str]] = {
    check_id: family.reference[check_id] for family in DECLARED for check_id in family.ids}
# check ID -> the Expectations fields (profile keys) it judges with; a check not listed has none.
SETTINGS: dict[str, tuple[str, ...]] = {
    check_id: family.settings[check_id] for family in DECLARED for check_id in family.ids
    if check_id in family.settings}


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


# The optional parts of a collection (gpudiag.probe.collector.PROBE_PARTS) and the checks that judge them, as the
# families declare them: a selection that holds none of a part's checks lets the probe skip it.
_PART_CHECKS: dict[str, tuple[str, ...]] = {}
for _family in DECLARED:
    for _part, _prefixes in _family.probe_parts.items():
        _PART_CHECKS[_part] = _PART_CHECKS.get(_part, ()) + tuple(_prefixes)


# The node properties the families let `gpudiag fleet` compare (Family.drift): check ID -> DriftFact.
DRIFT_FACTS = {check_id: fact for family in DECLARED for check_id, fact in family.drift.items()}
if len({fact.name for fact in DRIFT_FACTS.values()}) != len(DRIFT_FACTS):
    raise FamilyError("two drift facts of the families have one name")


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


__all__ = ["CHECK_IDS", "DECLARED", "FAMILIES", "REFERENCE", "REGISTRY", "SETTINGS", "VERDICTS", "Check", "Family",
           "resolve_selection", "run_checks"]
