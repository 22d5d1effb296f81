"""A direct check of the node itself collects in three forked children beside the parent's imports
(gpudiag/cli/check/early_collect.py, gpudiag/probe/split.py): what it writes and how it ends are the in-process
check's; a vendor child that fails, dies or hangs ends the check in one line, never a traceback, a wait without end
or a process left behind; a side child that does leaves its parts failed (never read as clean) and the rest judged.

On a test machine the node itself has no GPU: `direct.forks_the_collection` is made true for the fake node's root,
so that the children probe the fake node the parent installed (a fork inherits it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gpudiag.cli.check import direct, early_collect, fastpath
from tests.cli.check.test_direct import VARIANTS, both, captured, steady_cpu  # noqa: F401 - steady_cpu: a fixture
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.paths import REPO


@pytest.fixture
def forks(monkeypatch):
    """Every root forks, and each ForkedCollection made is noted."""
    made = []
    real = early_collect.ForkedCollection

    def noted(*args):
        made.append(real(*args))
        made[-1].forked_pids = list(made[-1].pids)  # kept: close() forgets them once the children are reaped
        made[-1].ahead_forked = made[-1].ahead_pid
        return made[-1]

    monkeypatch.setattr(direct, "forks_the_collection", lambda root: True)
    monkeypatch.setattr(early_collect, "ForkedCollection", noted)
    return made


def test_a_check_of_everything_collects_what_its_checks_judge():
    from gpudiag.checks import probe_parts_for
    from gpudiag.probe.collector import PROBE_PARTS
    from gpudiag.report.selection import select_checks

    assert probe_parts_for(select_checks([], [])) == PROBE_PARTS


def test_the_child_s_collection_is_written_as_the_full_cli_writes_its_own(tmp_path, forks):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True  # GPU 1 waits for a reset to remap a row: the node fails, exit 1
    fake_root(tmp_path, node)
    forked = 0
    with installed(node):
        for extra in VARIANTS:
            before = len(forks)
            lean, full = both(["check", "--root", str(tmp_path), "--direct", *extra])
            assert lean == full, extra
            selects = any(option in extra for option in ("--only", "--skip"))
            assert len(forks) == before + (0 if selects else 1), extra  # only where the selection cannot matter
            forked += not selects
    assert forked >= 3
    assert all(made.pids == [None] * 3 and len(made.forked_pids) == 3 for made in forks)
    _every_child_reaped([pid for made in forks for pid in made.forked_pids])


def _every_child_reaped(pids: list, within: float = 5.0) -> None:
    """Each child waited for by this process (the vendor child that answered, on a thread, as it exits): none of
    them is left a zombie."""
    until = time.monotonic() + within
    for pid in pids:  # a zombie keeps its /proc entry until its parent has waited for it (not waited for here)
        while os.path.exists(f"/proc/{pid}"):
            assert time.monotonic() < until, f"child {pid} was never reaped"
            time.sleep(0.01)


def test_with_nvml_read_ahead_the_report_is_the_same(tmp_path, forks, monkeypatch):
    """Where an NVIDIA driver is loaded a process forked first makes NVML's reads for the vendor child
    (gpudiag/probe/nvml/ahead.py): still the full CLI's bytes and exit code, every read the ahead process makes
    answered from it (the vendor child imports no pynvml for them), and the ahead process reaped."""
    monkeypatch.setattr(early_collect, "_nvidia_driver_loaded", lambda: True)
    node = FakeNode.hgx_h200(2)
    node.gpus[0].remap_pending = True
    fake_root(tmp_path, node)
    with installed(node):
        for extra in ([], ["--json"]):
            lean, full = both(["check", "--root", str(tmp_path), "--direct", *extra])
            assert lean == full and lean[0] == 1, extra
    assert len(forks) == 2
    for made in forks:
        labels = [label for label, _ in made.child_marks]
        assert labels.index("child: ahead reader started") < labels.index("child: imported")
        (reads,) = [label for label in labels if "NVML reads made here" in label]
        made_here, taken = (int(word) for word in reads.split() if word.isdigit())
        assert made_here == 0 and taken > 2 * 20, reads
        assert reads.endswith("pynvml not imported here"), reads
        assert made.ahead_pid is None
    _every_child_reaped([made.ahead_forked for made in forks])


@pytest.mark.parametrize("short_of", ["pipe", "process"])
def test_with_no_pipe_or_process_to_be_had_the_check_probes_here_and_leaves_nothing_open(tmp_path, forks,
                                                                                         monkeypatch, short_of):
    """A limit on descriptors or processes met while the children are made (the third pipe, the second child):
    what was made is closed and ended, and the check probes in its own process, as without the fork."""
    node = FakeNode.hgx_h200(1)
    node.gpus[0].remap_pending = True
    fake_root(tmp_path, node)
    real = {"pipe": os.pipe, "process": os.fork}[short_of]
    made = []

    def limited(*args):
        if len(made) == (2 if short_of == "pipe" else 1):
            raise OSError(24 if short_of == "pipe" else 11, "limit reached")
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(early_collect.os, short_of if short_of == "pipe" else "fork", limited)
    before = set(os.listdir("/proc/self/fd"))
    with installed(node):
        code, out, err = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct", "--json"])
    assert code == 1 and json.loads(out)["status"] == "fail", err
    assert forks == [] and len(made) == (2 if short_of == "pipe" else 1)
    assert set(os.listdir("/proc/self/fd")) <= before  # every pipe made for the children closed
    if short_of == "process":
        _every_child_reaped(made)


@pytest.mark.parametrize("failing", ["the next fork", "the shared imports"])
def test_with_the_nvml_ahead_process_forked_and_no_second_child_to_be_had_nothing_is_left(tmp_path, forks,
                                                                                           monkeypatch, failing):
    """The ahead process is forked first. A limit met at the next child, or a module of those the other children
    share that fails to import after it (a broken install), ends it too and closes its pipe; the check probes in its
    own process, which reports what fails there as it would without the fork."""
    monkeypatch.setattr(early_collect, "_nvidia_driver_loaded", lambda: True)
    node = FakeNode.hgx_h200(1)
    node.gpus[0].remap_pending = True
    fake_root(tmp_path, node)
    made = []
    real_fork = os.fork

    def limited():
        if made and failing == "the next fork":
            raise OSError(11, "limit reached")
        made.append(real_fork())
        return made[-1]

    def broken():
        raise ImportError("cannot import name 'Collector' (a broken install)")

    monkeypatch.setattr(early_collect.os, "fork", limited)
    if failing == "the shared imports":
        monkeypatch.setattr(early_collect, "_import_what_the_children_share", broken)
    before = set(os.listdir("/proc/self/fd"))
    with installed(node):
        code, out, err = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct", "--json"])
    assert code == 1 and json.loads(out)["status"] == "fail", err
    assert forks == [] and len(made) == 1  # the ahead process only
    assert set(os.listdir("/proc/self/fd")) <= before
    _every_child_reaped(made)


def test_usage_problems_and_crashes_in_the_child_end_as_they_do_here(tmp_path, forks, monkeypatch):
    lean, full = both(["check", "--root", str(tmp_path / "nowhere"), "--direct"])
    assert forks and lean == full and lean[0] == 2 and "no sys/ directory" in lean[2]

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    fake_root(tmp_path, FakeNode.hgx_h200(1))
    monkeypatch.setattr("gpudiag.probe.split.collect_vendor_part", broken)
    monkeypatch.setattr("gpudiag.cli.shared.node_collect.collect", broken)
    lean, full = both(["check", "--root", str(tmp_path), "--direct"])
    assert lean == full and lean[0] == 4 and "internal error: RuntimeError: boom" in lean[2]


def test_a_failed_vendor_child_ends_the_check_without_waiting_for_a_hung_side_child(tmp_path, forks, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    fake_root(tmp_path, FakeNode.hgx_h200(1))
    monkeypatch.setattr("gpudiag.probe.split.collect_vendor_part", broken)
    monkeypatch.setattr("gpudiag.probe.split.collect_side_parts", lambda *args, **kwargs: time.sleep(60))
    started = time.monotonic()
    code, _, err = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct", "--timeout", "20"])
    assert code == 4 and "internal error: RuntimeError: boom" in err
    assert time.monotonic() - started < 10  # not the 20 s deadline the side children were given
    (collection,) = forks
    _every_child_reaped(collection.forked_pids)


def test_a_child_that_dies_ends_the_check_in_one_line_exit_4(tmp_path, forks, monkeypatch):
    fake_root(tmp_path, FakeNode.hgx_h200(1))
    monkeypatch.setattr("gpudiag.probe.split.collect_vendor_part",
                        lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL))
    code, out, err = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct"])
    assert code == 4 and out == ""
    (line,) = err.strip().splitlines()
    assert "the probe's process ended without an answer (killed by SIGKILL)" in line


def test_a_child_that_hangs_is_given_up_after_the_deadline_and_ended(tmp_path, forks, monkeypatch):
    fake_root(tmp_path, FakeNode.hgx_h200(1))
    monkeypatch.setattr("gpudiag.probe.split.collect_vendor_part", lambda *args, **kwargs: time.sleep(60))
    monkeypatch.setattr(early_collect, "GRACE_SECONDS", 0.5)
    started = time.monotonic()
    code, _, err = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct", "--timeout", "0.5"])
    assert code == 4 and "did not answer within 1 s" in err
    assert time.monotonic() - started < 10
    (collection,) = forks
    assert collection.pids == [None] * 3  # killed and reaped
    for pid in collection.forked_pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # no such child of this process any more


@pytest.mark.parametrize("which", ["kernel_log", "families", "both"])
@pytest.mark.parametrize("how", ["dies", "hangs", "raises"])
def test_a_side_child_that_fails_leaves_its_parts_failed_and_the_rest_judged(tmp_path, forks, monkeypatch, how,
                                                                              which):
    """The kernel log and the families' parts come from side children: where one gives no answer, each of its
    parts is recorded as failed, as a part that failed in one process is, and their checks say unknown, never
    pass (where a part read well they skip on this fake node); the rest is judged as ever (here GPU 1's pending
    remap fails the node, exit 1)."""
    from gpudiag.probe import split

    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True
    fake_root(tmp_path, node)
    failure = {"dies": lambda: os.kill(os.getpid(), signal.SIGKILL), "hangs": lambda: time.sleep(60),
               "raises": lambda: (_ for _ in ()).throw(OSError("no file descriptors left"))}[how]
    real = split.collect_side_parts

    def failing(options, names):
        collects = "kernel_log" if set(names) == {"kernel_log"} else "families"
        if which in (collects, "both"):
            failure()
        return real(options, names)

    monkeypatch.setattr(split, "collect_side_parts", failing)
    monkeypatch.setattr(early_collect, "GRACE_SECONDS", 0.5)
    with installed(node):
        code, out, err = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct", "--json",
                                                  "--timeout", "1"])
    assert code == 1, err
    by_check = {}
    for result in json.loads(out)["results"]:
        by_check.setdefault(result["check"], set()).add(result["status"])
    assert "fail" in by_check["memory.row_remap_pending"]
    log_failed, families_failed = which in ("kernel_log", "both"), which in ("families", "both")
    assert (by_check["kernel_log.xid"] == {"unknown"}) is log_failed, by_check["kernel_log.xid"]
    assert ("pass" in by_check["kernel_log.xid"]) is not log_failed
    for check in ("network.nics", "services.persistenced", "screen.result"):
        assert (by_check[check] == {"unknown"}) is families_failed, (check, by_check[check])


# The console script as run (fastpath.run, then os._exit), the child forked: one whole JSON document on stdout (a
# child that flushed the parent's buffered output, or wrote its own, would show here), the child's warnings on stderr.
RUN_FORKED = ("import sys\nfrom tests.support.fakes.fake_nvml import FakeNode, installed\n"
              "import gpudiag.cli.check.direct as direct\ndirect.forks_the_collection = lambda root: True\n"
              "node = FakeNode.hgx_h200(8)\nnode.gpus[3].remap_pending = True\n"
              "with installed(node):\n    from gpudiag.cli.check.fastpath import run\n    run()\n")


def test_the_console_script_with_the_child_writes_one_whole_report(tmp_path):
    node = FakeNode.hgx_h200(8)
    node.gpus[3].remap_pending = True
    fake_root(tmp_path, node)
    done = subprocess.run([sys.executable, "-c", RUN_FORKED, "check", "--root", str(tmp_path), "--direct", "--json"],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=120)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["collected_by"] == "direct" and report["status"] == "fail"
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert [r["check"] for r in failed] == ["memory.row_remap_pending"]
    assert node.gpus[3].bus_id.lower()[-7:] in json.dumps(failed[0]["device"]).lower()


# The children, each noting the modules it imported itself (those its parent had not imported before the fork).
# Nothing of the tests is imported first: the interpreter holds only what the check imported.
NOTING_IMPORTS = (
    "import json, os, sys\nfrom gpudiag.cli.check import direct, early_collect\n"
    "direct.forks_the_collection = lambda root: True\n"
    "def noting(collects, work):\n"
    "    def run(*args):\n"
    "        before = set(sys.modules)\n"
    "        try:\n            return work(*args)\n"
    "        finally:\n"
    "            with open(os.path.join(os.environ['NOTED'], collects + '.json'), 'w') as out:\n"
    "                json.dump(sorted(set(sys.modules) - before), out)\n"
    "    return run\n"
    "early_collect.CHILDREN = tuple((c, n, noting(c, w)) for c, n, w in early_collect.CHILDREN)\n"
    "from gpudiag.cli.check.fastpath import run\nrun()\n")
# What every child imports: the parent imports it once, before it forks them (early_collect.py).
SHARED = ("gpudiag.model", "gpudiag.model.node", "gpudiag.probe.collector", "gpudiag.probe.split",
          "gpudiag.cli.shared.node_collect", "gpudiag.probe.host", "dataclasses", "logging", "pathlib", "typing")


def test_the_children_inherit_what_they_all_import_and_import_only_their_own_work(tmp_path):
    root, noted = tmp_path / "root", tmp_path / "noted"
    noted.mkdir()
    fake_root(root, FakeNode.hgx_h200(2))
    done = subprocess.run([sys.executable, "-c", NOTING_IMPORTS, "check", "--root", str(root), "--direct", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "NOTED": str(noted)})
    assert json.loads(done.stdout)["collected_by"] == "direct", done.stderr
    imported = {path.stem: set(json.loads(path.read_text())) for path in noted.glob("*.json")}
    assert set(imported) == {"vendor", "kernel_log", "families"}
    for collects, modules in imported.items():
        assert not modules & set(SHARED), (collects, sorted(modules & set(SHARED)))
    assert "gpudiag.probe.kernel_log.reader" in imported["kernel_log"]  # each did its own work, and noted it
    assert "gpudiag.probe.network.rdma" in imported["families"]
    assert "gpudiag.probe.nvml.backend" in imported["vendor"]
