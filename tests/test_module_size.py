"""Modules stay small (docs/architecture.md): every module of the package is under 400 lines, but for the few listed
here at the size they have today. A listed module may shrink, not grow; one that has come under the limit leaves
the list (issue 34, item 5b: the rule was written but nothing held it)."""

from __future__ import annotations

from tests.support.paths import REPO

LIMIT = 400  # lines; a module of LIMIT lines or more is over

# Over the limit today, each with its length now (a ceiling: the module may shrink, never grow) and why it has not
# been split yet. Splitting one means removing its row here.
OVER = {
    # the Collector: one collection's order of work under one deadline (host, kernel log, vendor libraries, parts);
    # its pieces share the deadline bookkeeping. A candidate: the per-backend slot and hung-call memory.
    "gpudiag/probe/collector.py": 461,
    # the fleet's Prometheus source: a fixed set of PromQL queries and the parsing of each answer; the queries could
    # move to a module of their own. 480 since issue 36 item 4 (the failing NIC ports' query, 22 lines).
    "gpudiag/fleet/prometheus.py": 480,
    # two families (ecc.* and memory.*) in one module, with their verdict rows and reference text beside the checks:
    # the memory.* checks could be a module of their own.
    "gpudiag/checks/ecc.py": 455,
    # the link (generation, width, both sources) and its error counters (replays, AER, AMD retraining) with their
    # verdict rows: the counters could be a module of their own.
    "gpudiag/checks/pcie.py": 421,
    # the scan of every form (kmsg, a saved file, the journal) into events, grown with issue 32's record framing: the
    # live /dev/kmsg read could be a module of its own.
    "gpudiag/probe/kernel_log/reader.py": 413,
}


def lengths(root=REPO) -> dict[str, int]:
    return {str(path.relative_to(root)): len(path.read_text(encoding="utf-8").splitlines())
            for path in sorted((root / "gpudiag").rglob("*.py"))}


def over_limit(found: dict[str, int]) -> dict[str, int]:
    return {path: count for path, count in found.items() if count >= LIMIT and path not in OVER}


def test_every_module_is_under_the_limit_but_the_listed_ones():
    assert over_limit(lengths()) == {}, f"modules of {LIMIT} lines or more: split them (or list them in OVER)"


def test_a_module_of_400_lines_is_found(tmp_path):
    (tmp_path / "gpudiag" / "checks").mkdir(parents=True)
    (tmp_path / "gpudiag" / "checks" / "big.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "gpudiag" / "small.py").write_text("x = 1\n" * (LIMIT - 1))
    assert over_limit(lengths(tmp_path)) == {"gpudiag/checks/big.py": LIMIT}


def test_a_listed_module_does_not_grow_and_leaves_the_list_once_under_the_limit():
    found = lengths()
    for path, ceiling in OVER.items():
        assert path in found, f"{path}: gone; remove its row from OVER"
        assert found[path] <= ceiling, f"{path}: {found[path]} lines, more than its {ceiling}: split it instead"
        assert found[path] >= LIMIT, f"{path}: {found[path]} lines, under {LIMIT} now: remove its row from OVER"
