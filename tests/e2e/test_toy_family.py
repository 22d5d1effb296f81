"""Done means (a) of issue 34: a whole family added to a copy of gpudiag in a temporary folder — a probe part, its
settings, its checks with their verdict rows and reference text, its metrics, an alert rule, a kernel-log record
kind and a fleet drift fact — is found everywhere by name once tools/gen_registry_index.py has regenerated the
indexes, and no other file of the copy differs from the repository's. docs/adding-a-check-family.md's count (six
new files of code and rules, no central file edited) is what this test proves."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.slow

# The family, file by file, as docs/adding-a-check-family.md's steps write it.
TOY = {
    "gpudiag/probe/toy/__init__.py": "",
    "gpudiag/probe/toy/part.py": '''
"""The toy family's probe part: how many toy units the node has (<root>/etc/toy/units)."""
from gpudiag.model.serialize import to_dict


def collect(snapshot, options, until):
    return {"units": int((options.root / "etc" / "toy" / "units").read_text())}


def store(snapshot, value, error):
    snapshot.parts["toy"] = value if value is not None else {"error": to_dict(error)}
''',
    "gpudiag/probe/toy/kernel_log.py": '''
"""The toy driver's kernel-log records: "toydrv <unit>: fault"."""
from gpudiag.model import KernelEvent

PREFIXES = ("toydrv ",)
EVENT_KINDS = ("toy_fault",)


def parse(message, seconds):
    if not message.rstrip().endswith(": fault"):
        return None
    return KernelEvent(vendor=None, kind="toy_fault", message=message, timestamp_seconds=seconds)
''',
    "gpudiag/expect/toy_settings.py": '''
"""The toy family's profile keys."""
from gpudiag.expect.errors import ExpectationError
from gpudiag.model.records import dataclass


@dataclass(frozen=True)
class ToySettings:
    toy_units: int = 2  # the units a toy node has

    def __post_init__(self):
        if self.toy_units < 0:
            raise ExpectationError("toy_units", "must be >= 0")


SETTINGS = ToySettings
''',
    "gpudiag/checks/toy.py": '''
"""The toy family's check: as many units as the profile expects, and no toy driver fault in the kernel log."""
from gpudiag.checks.common import Check, failed, passed, unknown
from gpudiag.checks.family import DriftFact, Family
from gpudiag.expect.toy_settings import ToySettings
from gpudiag.model import Status


def units(snapshot, expect):
    expected = expect.of(ToySettings).toy_units
    reading = snapshot.parts.get("toy")
    if reading is None or "units" not in reading:
        return [unknown("toy.units", None, "toy units not read", observed=reading, expected=expected,
                        remediation="Find why the toy units could not be read.")]
    faults = [e for e in snapshot.kernel_log.events if e.kind == "toy_fault"]
    if reading["units"] != expected or faults:
        return [failed("toy.units", None, f"{reading['units']} toy units, {len(faults)} fault(s)",
                       observed={"units": reading["units"], "faults": len(faults)}, expected=expected,
                       remediation="Replace the faulted toy unit.")]
    return [passed("toy.units", None, f"{expected} toy units", observed={"units": reading["units"]})]


CHECKS = (Check("toy.units", units, "The toy units the profile expects, none faulted."),)
FAMILY = Family(
    "toy", order=990, checks=CHECKS,
    verdicts={"toy.units": {Status.FAIL: ("drain", "GPUDIAG-TOY-UNITS"),
                            Status.UNKNOWN: ("watch", "GPUDIAG-TOY-UNREAD")}},
    reference={"toy.units": ("<root>/etc/toy/units and toydrv kernel-log records", "Replace the faulted toy unit.")},
    settings={"toy.units": ("toy_units",)},
    probe_parts={"toy": ("toy.",), "kernel_log": ("toy.",)},
    drift={"toy.units": DriftFact("toy_units", "toy units", lambda observed: str(observed.get("units")),
                                  "Fit the toy units its peers have.")},
)
''',
    "gpudiag/exporter/metrics_toy.py": '''
"""The toy family's metrics."""
from gpudiag.exporter import catalog

UNITS = catalog.define("gpudiag_toy_units", "gauge", "Toy units the node has.", ())


def add(fs, snapshot):
    reading = snapshot.parts.get("toy") or {}
    if "units" in reading:
        fs.add(UNITS, (), reading["units"])
''',
    "monitoring/prometheus/gpudiag-alerts-toy.yml": '''groups:
  - name: gpudiag-toy
    rules:
      - alert: GpudiagToyUnitsMissing
        expr: gpudiag_toy_units < 2
        labels: {severity: warning}
        annotations: {summary: "Toy units missing on {{ $labels.instance }}"}
''',
}
COPIED = ("gpudiag", "tools", "monitoring", "pyproject.toml")
# What tools/gen_registry_index.py writes: the only files of the copy that may differ from the repository's.
REGENERATED = {"gpudiag/checks/index.py", "gpudiag/probe/index.py", "gpudiag/expect/index.py",
               "gpudiag/exporter/index.py", "gpudiag/probe/kernel_log/index.py"}

# Run inside the copy: every view that finds a family by name sees the toy family.
PROBE = '''
import json, sys
from pathlib import Path
from gpudiag import checks, expect
from gpudiag.probe import collector as probe
from gpudiag.checks import DRIFT_FACTS
from gpudiag.exporter.metric_modules import all_metrics
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.node_metrics import add_snapshot
from gpudiag.model import NodeSnapshot
from gpudiag.probe.kernel_log.events import parse_event
from tools.alert_rules import alert_groups
snapshot = NodeSnapshot(parts={"toy": {"units": 3}})
fs = MetricSet()
add_snapshot(fs, snapshot)
print(json.dumps({
    "checks": sorted(checks.CHECK_IDS), "parts": sorted(probe.FAMILY_PARTS),
    "setting": expect.DEFAULT_EXPECTATIONS.setting("toy_units"), "metric": "gpudiag_toy_units" in all_metrics(),
    "exposed": "gpudiag_toy_units 3" in fs.exposition().decode(),
    "event": parse_event("toydrv unit3: fault").kind, "drift": DRIFT_FACTS["toy.units"].name,
    "alerts": [r["alert"] for g in alert_groups() for r in g["rules"] if "alert" in r],
}))
'''


def _differing(original: Path, copy: Path) -> tuple[set[str], set[str]]:
    """(files of the repository that differ in the copy or are gone, files only the copy has), relative paths."""
    changed, added = set(), set()
    for top in COPIED:
        for path in [copy / top] if (copy / top).is_file() else (copy / top).rglob("*"):
            if "__pycache__" in path.parts or "_shipped" in path.parts or path.is_dir():  # _shipped: links
                continue
            relative = path.relative_to(copy)
            mine = original / relative
            if not mine.exists():
                added.add(str(relative))
            elif not filecmp.cmp(mine, path, shallow=False):
                changed.add(str(relative))
    return changed, added


def test_a_whole_family_is_added_without_editing_a_central_file(tmp_path):
    copy = tmp_path / "repo"
    for top in COPIED:
        source = REPO / top
        if source.is_file():
            copy.mkdir(exist_ok=True)
            shutil.copy2(source, copy / top)
        else:
            shutil.copytree(source, copy / top, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, text in TOY.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(text.lstrip("\n"))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    regenerated = subprocess.run([sys.executable, "tools/gen_registry_index.py"], cwd=copy, env=env,
                                 capture_output=True, text=True, timeout=120)
    assert regenerated.returncode == 0, regenerated.stderr

    seen = subprocess.run([sys.executable, "-c", PROBE], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=120)
    assert seen.returncode == 0, seen.stderr
    views = json.loads(seen.stdout)
    assert "toy.units" in views["checks"] and "toy" in views["parts"] and views["setting"] == 2
    assert views["metric"] and views["exposed"] and views["event"] == "toy_fault" and views["drift"] == "toy_units"
    assert "GpudiagToyUnitsMissing" in views["alerts"]

    # End to end: the part reads the root, the kernel-log record fails the check, a profile key sets the count.
    root = tmp_path / "root"
    (root / "etc" / "toy").mkdir(parents=True)
    (root / "sys").mkdir()  # a node with no GPU: --root asks for a sys/ tree
    (root / "etc" / "toy" / "units").write_text("3\n")
    log = tmp_path / "dmesg.txt"
    log.write_text("[    5.000000] Linux version 6.8.0-60-generic\n[  100.000000] toydrv unit1: fault\n")
    checked = subprocess.run([sys.executable, "-m", "gpudiag", "check", "--root", str(root), "--json", "--only",
                              "toy", "--kernel-log", str(log), "-p", "toy_units=3"], cwd=copy, env=env,
                             capture_output=True, text=True, timeout=120)
    assert checked.stdout, checked.stderr
    (result,) = [r for r in json.loads(checked.stdout)["results"] if r["check"] == "toy.units"]
    assert (result["status"], result["fault_code"], result["observed"]) == (
        "fail", "GPUDIAG-TOY-UNITS", {"units": 3, "faults": 1}), checked.stderr

    changed, added = _differing(REPO, copy)
    assert added == set(TOY), "the family is its own new files"
    assert changed <= REGENERATED, f"central files edited: {sorted(changed - REGENERATED)}"
    # the count docs/adding-a-check-family.md gives: six files of code and rules (the part's empty __init__.py apart)
    assert len([name for name, text in TOY.items() if text]) == 6
