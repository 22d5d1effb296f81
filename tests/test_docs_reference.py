"""The docs stand alone and agree with the code (issue 12): docs/reference/ is what tools/gen_docs.py makes of the
check registry, the verdict table and the metric catalog; every metric family gpudiag was seen serving is
documented; nothing in the project points outside it."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from gpudiag.checks import CHECK_IDS, REGISTRY
from gpudiag.checks.reference import REFERENCE, SETTINGS
from gpudiag.checks.verdicts import TABLE
from gpudiag.exporter.catalog import all_metrics
from gpudiag.expect import Expectations

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    fields = {f.name for f in dataclasses.fields(Expectations)}
    assert set(SETTINGS) <= set(CHECK_IDS)
    named = {name for names in SETTINGS.values() for name in names}
    assert named <= fields
    assert fields - named == {"baseline"}  # a golden node, not a setting: the baseline.* family


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
