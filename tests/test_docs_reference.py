"""The docs stand alone and agree with the code (issue 12): docs/reference/ is what tools/gen_docs.py makes of the
check registry, the verdict table and the metric catalog; every metric family gpudiag was seen serving is
documented; nothing in the project points outside it."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from gpudiag.checks import CHECK_IDS, REFERENCE, REGISTRY, SETTINGS
from gpudiag.checks.verdicts import TABLE
from gpudiag.expect import Expectations, family_keys
from gpudiag.exporter.metric_modules import all_metrics
from tests.support.paths import REPO
from tests.support.tools import load_tool

DOCS = REPO / "docs"


def gen_docs():
    return load_tool("gen_docs")


def test_the_reference_pages_are_what_the_code_says(capsys):
    assert gen_docs().main(["--check"]) == 0, capsys.readouterr().err


def test_a_stale_page_is_found(tmp_path, monkeypatch, capsys):
    tool = gen_docs()
    page = tmp_path / "checks.md"
    page.write_text(tool.checks_page().replace("`pcie.aer`", "`pcie.aer_old`"))
    monkeypatch.setattr(tool, "PAGES", {page: tool.checks_page})
    assert tool.main(["--check"]) == 1 and "stale" in capsys.readouterr().err


def test_every_check_is_documented_with_what_it_reads_and_what_to_do():
    assert set(REFERENCE) == set(CHECK_IDS)
    for check_id, (reads, remediation) in REFERENCE.items():
        assert len(reads) > 8 and len(remediation) > 20, check_id
    page = (DOCS / "reference" / "checks.md").read_text()
    for check in REGISTRY:
        assert f"### `{check.id}`" in page and check.summary in page
    for check_id, verdicts in TABLE.items():
        for action, code in verdicts.values():
            assert f"`{action}`, `{code}`" in page, (check_id, code)


def test_settings_are_real_profile_keys_and_every_key_is_documented():
    fields = {f.name for f in dataclasses.fields(Expectations)} | set(family_keys())
    assert set(SETTINGS) <= set(CHECK_IDS)
    named = {name for names in SETTINGS.values() for name in names}
    assert named <= fields
    # a golden node, not a setting (the baseline.* family); the families' own settings, each key named above
    assert fields - named == {"baseline", "family_settings"}


def test_every_metric_in_the_catalog_is_documented_with_type_and_labels():
    page = (DOCS / "reference" / "metrics.md").read_text()
    for spec in all_metrics().values():
        (row,) = [line for line in page.splitlines() if line.startswith(f"| `{spec.name}` |")]
        assert f"| {spec.kind} |" in row
        for label in spec.labels:
            assert f"`{label}`" in row or label in ("gpu", "uuid", "pci_bus_id"), (spec.name, label)


@pytest.mark.parametrize("body", ["tests/golden/h200x2.metrics.prom", "tests/golden/h200.metrics.prom",
                                  "tests/fixtures/h200x2/recorded/h200x2.metrics.txt",
                                  "tests/fixtures/h200/recorded/textfile-level2.prom"])
def test_every_family_gpudiag_serves_is_documented(body):
    # issue 12: of the 48 families served on an NVIDIA and an AMD node, 40 were named in no document
    served = set(re.findall(r"^# TYPE (\S+) ", (REPO / body).read_text(), re.MULTILINE))
    assert len(served) > 20
    page = (DOCS / "reference" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `([a-z][a-z0-9_]+)` \|", page, re.MULTILINE))
    # a TYPE line names a counter family without its _total (the exposition format's rule)
    undocumented = {n for n in served if n not in documented and f"{n}_total" not in documented}
    assert undocumented == set()


def test_the_unit_comes_from_the_name():
    tool = gen_docs()
    assert tool.unit_of("gpudiag_gpu_power_watts") == "W"
    assert tool.unit_of("gpudiag_gpu_energy_joules_total") == "J"
    assert tool.unit_of("gpudiag_active_copy_bandwidth_bytes_per_second") == "bytes/s"
    assert tool.unit_of("gpudiag_gpu_memory_used_bytes") == "bytes"
    assert tool.unit_of("gpudiag_device_up") == "—"


def test_the_narrative_docs_link_the_reference():
    for page, target in (("checks.md", "reference/checks.md"), ("metrics.md", "reference/metrics.md")):
        assert f"]({target})" in (DOCS / page).read_text()
    readme = (REPO / "README.md").read_text()
    for target in ("docs/reference/checks.md", "docs/reference/metrics.md", "docs/architecture.md",
                   "docs/monitoring.md"):
        assert f"]({target})" in readme, target
        assert (REPO / target).is_file()


def project_files():
    """The project's own text files: what a clone holds (git's tracked and not-ignored files, so ignored scratch
    folders and build leftovers do not count), less the recorded fixtures."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):  # a copy without git (tools/mutate.py): every file in it
        listed = [str(path.relative_to(REPO)) for path in REPO.rglob("*")
                  if "__pycache__" not in path.parts and ".venv" not in path.parts]
    for name in filter(None, listed):
        relative = Path(name)
        if relative.parts[:2] == ("tests", "fixtures") or not (REPO / relative).is_file():
            continue
        try:
            yield relative, (REPO / relative).read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary


def test_nothing_in_the_project_points_outside_it():
    # what a clone does not have: the design notes and references that sit beside the project
    outside = re.compile("|".join([r"\.\./" + "shared", "shared/" + "DESIGN", "shared/" + "reference",
                                   r"\bDESIGN" + r"\.md"]))
    found = [f"{relative}:{n}" for relative, text in project_files()
             for n, line in enumerate(text.splitlines(), 1) if outside.search(line)]
    assert found == []


def test_relative_links_in_the_docs_resolve():
    pages = [REPO / "README.md", REPO / "monitoring" / "README.md", *DOCS.rglob("*.md")]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not target.startswith("mailto:"):
                assert (page.parent / target).exists(), f"{page.relative_to(REPO)} links to missing {target}"


def test_the_readme_check_table_lists_every_check_in_registry_order():
    listed = re.findall(r"^\| `([a-z_]+\.[a-z0-9_]+)` \|", (REPO / "README.md").read_text(), re.MULTILINE)
    assert listed == list(CHECK_IDS)


# -- alerts and the runbook (issue 23) -----------------------------------------------------------------------------


def alert_docs():
    return load_tool("alert_docs")


def test_every_alert_links_to_its_own_section_of_the_runbook():
    tool = alert_docs()
    runbook = (DOCS / "runbook.md").read_text()
    headings = {tool.anchor(h) for h in re.findall(r"^## (.+)$", runbook, re.MULTILINE)}
    rules = tool.alerting_rules()
    assert len(rules) > 30
    for _, _, rule in rules:
        assert rule["annotations"]["runbook_url"] == f"docs/runbook.md#{tool.anchor(rule['alert'])}", rule["alert"]
        assert tool.anchor(rule["alert"]) in headings
    assert len(headings) == len({rule["alert"] for _, _, rule in rules})  # one section per alert, no other


def test_the_alert_reference_lists_every_rule_with_expression_duration_severity_and_anchor():
    tool = alert_docs()
    page = (DOCS / "reference" / "alerts.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `Gpudiag")]
    rules = tool.alerting_rules()
    assert len(rows) == len(rules)
    for row, (_, _, rule) in zip(rows, rules):
        assert row.startswith(f"| `{rule['alert']}` | ")
        assert f"| {rule.get('for', '0s')} |" in row and tool._cell(" ".join(rule["expr"].split())) in row
        assert f"(../runbook.md#{tool.anchor(rule['alert'])})" in row
        severity = rule["labels"]["severity"]
        assert f"| {'by check' if severity == tool.BY_STATUS else severity} |" in row


def test_an_alert_page_that_drifts_from_the_rules_is_found(tmp_path, monkeypatch, capsys):
    tool = gen_docs()
    rules = tmp_path / "gpudiag-alerts.yml"
    rules.write_text(tool.alert_docs.RULE_FILES[0].read_text().replace("for: 2m", "for: 3m", 1))
    monkeypatch.setattr(tool.alert_docs, "RULE_FILES", (rules, tool.alert_docs.RULE_FILES[1]))
    assert tool.main(["--check"]) == 1
    assert "docs/reference/alerts.md" in capsys.readouterr().err


def test_the_runbook_says_what_the_checks_say_to_do():
    """One truth: an alert raised by a check has that check's remediation, word for word, and its action."""
    tool = alert_docs()
    runbook = (DOCS / "runbook.md").read_text()
    sections = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", runbook, re.MULTILINE | re.DOTALL))
    by_name: dict[str, list] = {}
    for _, _, rule in tool.alerting_rules():
        by_name.setdefault(rule["alert"], []).append(rule)
    with_checks = 0
    for name, rules in by_name.items():
        checks = tool.checks_of(name, rules)
        with_checks += bool(checks)
        for check in checks:
            assert f"`{check}`: {REFERENCE[check][1]}" in sections[name], (name, check)
            assert f"gpudiag check --only {','.join(checks)}" in sections[name]
        assert checks or name in tool.OWN_REMEDIATION or tool._rule_remediation(name), name  # a family's rule
    assert with_checks >= 25


def test_the_readme_names_every_exit_code():
    """Ctrl-C's 130 was missing from the README's exit codes (issue 36, item 7): each of gpudiag/exitcodes.py's
    codes is in that paragraph."""
    from gpudiag.exitcodes import ExitCode

    readme = (REPO / "README.md").read_text()
    paragraph = readme[readme.index("Exit codes: "):].split("\n\n", 1)[0]
    assert [code.value for code in ExitCode if f"`{code.value}`" not in paragraph] == []
    assert "interrupted" in paragraph and "written whole" in paragraph
