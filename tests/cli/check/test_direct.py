"""`gpudiag check` probing the node itself without typer (gpudiag/cli/check/direct.py, reached through
gpudiag/cli/check/fastpath.py with --direct or when no service listens) writes the bytes and exit codes of the full
CLI's `check --direct`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from gpudiag.cli import app as cli
from gpudiag.cli.check import fastpath
from tests.cli.check.test_fastpath import VARIANTS as SERVICE_VARIANTS
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.paths import REPO


# the fast path's option sets (tests/cli/check/test_fastpath.py), and a deadline of the probe's own
VARIANTS = [*SERVICE_VARIANTS, ["--timeout", "7.5", "--json"]]


@pytest.fixture(autouse=True)
def steady_cpu(monkeypatch):
    """The host's CPU use over a collection (the workload check judges it) differs between two collections on a
    busy machine: both paths read the same figure here, so that the comparison is of the paths alone."""
    monkeypatch.setattr("gpudiag.probe.host.CpuSampler.finish", lambda self: (7.5, [7.5, 7.5]))


def captured(main, argv: list[str]) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def timeless(text: str) -> str:
    """The report less what two collections of the same node cannot share: when, and how long the probe took."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d([+-]\d\d:\d\d)?", "<time>", text)  # JUnit's has no zone
    text = re.sub(r"probed in [0-9.]+ s", "probed in <s> s", text)
    text = re.sub(r'"(duration_seconds|elapsed_seconds|seconds_since_boot)": [0-9.e-]+', r'"\1": 0', text)
    return re.sub(r'(time|duration)="[0-9.]+"', r'\1="0"', text)


def both(argv: list[str]) -> tuple[tuple, tuple]:
    lean, full = captured(fastpath.main, argv), captured(cli.main, argv)
    return (lean[0], timeless(lean[1]), lean[2]), (full[0], timeless(full[1]), full[2])


def test_the_lean_direct_check_writes_what_the_full_cli_writes(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True  # GPU 1 waits for a reset to remap a row: the node fails, exit 1
    fake_root(tmp_path, node)
    codes = set()
    with installed(node):
        for extra in VARIANTS:
            lean, full = both(["check", "--root", str(tmp_path), "--direct", *extra])
            assert lean[0] is not None, f"{extra}: not handled"
            assert lean == full, extra
            codes.add(lean[0])
            if "--json" in extra:
                assert json.loads(lean[1])["collected_by"] == "direct"
    assert codes == {0, 1, 2}  # --only pcie,inventory leaves out the remap: that one passes


def test_with_nobody_listening_the_check_is_probed_here_without_a_word(tmp_path):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    with installed(node):
        lean, full = both(["check", "--root", str(tmp_path), "--json"])
    assert lean == full and lean[0] == 0 and lean[2] == ""
    assert json.loads(lean[1])["collected_by"] == "direct" and json.loads(lean[1])["status"] == "pass"


def test_a_root_without_sys_and_a_crash_get_the_cli_s_lines_and_exit_codes(tmp_path, monkeypatch):
    lean, full = both(["check", "--root", str(tmp_path / "nowhere"), "--direct"])
    assert lean == full and lean[0] == 2 and "no sys/ directory" in lean[2]

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    fake_root(tmp_path, FakeNode.hgx_h200(1))
    monkeypatch.setattr("gpudiag.cli.shared.node_collect.collect", broken)
    lean, full = both(["check", "--root", str(tmp_path), "--direct"])
    assert lean == full and lean[0] == 4 and "internal error: RuntimeError: boom" in lean[2]


@pytest.mark.parametrize("extra", [["--level", "2"], ["--baseline", "b.json"], ["--kernel-log", "k.txt"],
                                   ["--profile", "./site.toml"]])
def test_what_needs_the_full_cli_still_goes_there(extra, tmp_path):
    assert fastpath.parse(["check", "--direct", *extra]) is None


def test_the_lean_direct_check_loads_no_typer(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    script = ("import json, sys\nfrom tests.support.fakes.fake_nvml import FakeNode, installed\n"
              "with installed(FakeNode.hgx_h200(1)):\n"
              "    from gpudiag.cli.check.fastpath import main\n    code = main(sys.argv[1:])\n"
              "print(json.dumps([m for m in ('typer', 'click', 'gpudiag.cli.app', 'rich') if m in sys.modules]),"
              " file=sys.stderr)\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", script, "check", "--root", str(tmp_path), "--direct", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["collected_by"] == "direct"
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_nvml_starts_early_only_where_an_nvidia_driver_is_loaded(monkeypatch):
    from gpudiag.probe.nvml import early as nvml_early

    calls = []

    class FailingLibrary:
        @staticmethod
        def nvmlInit_v2():
            calls.append("init")
            return 9  # NVML_ERROR_DRIVER_NOT_LOADED: left for the probe's own nvmlInit to report

        @staticmethod
        def nvmlDeviceGetCount_v2(out):
            calls.append("count")
            return 0

    monkeypatch.setattr(nvml_early, "_library", FailingLibrary)
    started = []
    monkeypatch.setattr(nvml_early.threading, "Thread", lambda target, name, daemon: started.append(target) or
                        type("T", (), {"start": staticmethod(target)})())
    monkeypatch.setattr(nvml_early.os.path, "exists", lambda path: False)
    nvml_early.start_nvml_init()
    assert started == [] and calls == []
    monkeypatch.setattr(nvml_early.os.path, "exists", lambda path: path == "/dev/nvidiactl")
    nvml_early.start_nvml_init()
    assert len(started) == 1 and calls == ["init"]  # a failed init opens nothing


def test_the_early_start_opens_every_gpu_and_the_probe_reads_them_all_itself(tmp_path, monkeypatch):
    """The early thread's one read per GPU (its handle: a process's first costs the driver most) comes before the
    probe's own; the probe still asks for every GPU's handle and reads everything it reports."""
    from gpudiag.probe.nvml import early as nvml_early

    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    monkeypatch.setattr(nvml_early.os.path, "exists", lambda path: path == "/dev/nvidiactl")
    with installed(node) as lib:
        monkeypatch.setattr(nvml_early, "_library", lambda: lib)  # the driver's library, as ctypes loads it
        opened = []
        real_thread = nvml_early.threading.Thread

        def thread(target, name, daemon, **kwargs):  # the early start's runs at once; others (the collection) run
            if name != "nvml-early-init":
                return real_thread(target=target, name=name, daemon=daemon, **kwargs)
            opened.append(target)
            return type("T", (), {"start": staticmethod(target)})()

        monkeypatch.setattr(nvml_early.threading, "Thread", thread)
        nvml_early.start_nvml_init()
        early = dict(lib.device_calls)
        assert early == {("nvmlDeviceGetHandleByIndex_v2", 0): 1, ("nvmlDeviceGetHandleByIndex_v2", 1): 1}
        assert len(nvml_early.WINDOW) == 4 and nvml_early.WINDOW == sorted(nvml_early.WINDOW)
        code, out, _ = captured(fastpath.main, ["check", "--root", str(tmp_path), "--direct", "--json"])
    assert code == 0 and json.loads(out)["status"] == "pass"
    assert all(lib.device_calls[call] == 2 for call in early)  # the probe opened each GPU again itself


# The console script's own ending (fastpath.run → fastpath.leave): the answer flushed whole, then os._exit.
RUN_OVER_FAKE_NODE = ("import atexit, sys\nfrom tests.support.fakes.fake_nvml import FakeNode, installed\n"
                      "atexit.register(lambda: sys.stderr.write('interpreter teardown ran\\n'))\n"
                      "with installed(FakeNode.hgx_h200(8)):\n"
                      "    from gpudiag.cli.check.fastpath import run\n    run()\n")


def _run_console_script(tmp_path, stdout) -> subprocess.Popen:
    fake_root(tmp_path, FakeNode.hgx_h200(8))
    return subprocess.Popen([sys.executable, "-c", RUN_OVER_FAKE_NODE, "check", "--root", str(tmp_path), "--direct",
                             "--json"], stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_console_script_writes_its_answer_whole_and_skips_the_teardown(tmp_path):
    process = _run_console_script(tmp_path, subprocess.PIPE)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert len(out) > 1 << 16  # a report of 8 GPUs: larger than a pipe's buffer, so written while the reader reads
    report = json.loads(out)  # and all of it
    assert report["collected_by"] == "direct" and report["results"]
    assert "interpreter teardown ran" not in err


def test_a_reader_that_left_before_the_answer_is_exit_0_without_noise(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `gpudiag check --json | true`: every write meets a closed pipe
    try:
        process = _run_console_script(tmp_path, write_end)
    finally:
        os.close(write_end)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0
    assert "Traceback" not in err and "Exception ignored" not in err and "teardown" not in err


def test_a_report_that_cannot_be_written_is_exit_4_in_one_line(tmp_path):
    """stdout on a full disk (the Slurm hook's TMPDIR): exit 4, never the verdict's 0 or 1, which the hook took for "a
    check failed" and drained a healthy node (issue 24, item 16). /dev/full answers every write with ENOSPC. The direct
    path ended so already; the service's fast path exited 1 (tests/contrib/test_fleet_hooks.py, a full TMPDIR)."""
    with open("/dev/full", "w") as full:
        process = _run_console_script(tmp_path, full)
        _, err = process.communicate(timeout=120)
    assert process.returncode == 4, err
    (line,) = err.strip().splitlines()  # what the direct check's own ending says of it (direct.check)
    assert line.startswith("gpudiag: ") and "No space left on device" in line
