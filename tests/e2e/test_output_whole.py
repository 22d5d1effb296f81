"""Output whole or an error (issue 36, item 5): every command that writes a report or data to standard output exits 4
with one line when the write fails, on a real full filesystem. `check --json > file` on a full tmpfs exited 0 with
65,536 of its 179,220 bytes under PYTHONUNBUFFERED=1 (a raw stdout took part of the write and Python dropped the
count); `snapshot > full-disk` was an "internal error"; `history` and `profiles` ended in Python's "Exception
ignored" at exit. The real gpudiag runs in a subprocess over a fake 8-GPU node or an 8-GPU recording."""

from __future__ import annotations

import os
import sys

import pytest

from gpudiag.model.recording import save_snapshot
from gpudiag.service.journal import Journal
from tests.support.acceptance_nodes import nvidia_h200_8x
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode
from tests.support.fleet import write_fleet
from tests.support.full_disk import can_mount_tmpfs, run_into_dev_full, run_into_full_tmpfs
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

# The console script (gpudiag/cli/check/fastpath.py `run`, which hands what it does not handle to the full CLI)
# over a fake 8x H200 whose tree is at $GPUDIAG_TEST_ROOT.
CONSOLE_OVER_FAKE_NODE = ("import sys\nfrom tests.support.fakes.fake_nvml import FakeNode, installed\n"
                          "with installed(FakeNode.hgx_h200(8)):\n"
                          "    from gpudiag.cli.check.fastpath import run\n    sys.argv[0] = 'gpudiag'\n    run()\n")
NO_SPACE = "No space left on device"
needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(), reason="needs root and a private mount namespace (unshare -m)")


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> dict:
    """Paths the commands read: a fake node's tree, an 8-GPU recording, a fleet of reports, a state directory."""
    base = tmp_path_factory.mktemp("whole")
    fake_root(base / "root", FakeNode.hgx_h200(8))
    save_snapshot(nvidia_h200_8x(), base / "recording.json")
    write_fleet(base / "fleet", 4, gpus=8)
    (base / "state").mkdir()
    Journal(base / "state").load().append([{"time": "2026-12-01T02:14:00+00:00", "kind": "xid", "event": "event",
                                            "code": 79, "gpu": 4, "pci_bus_id": "0000:9b:00.0"}])
    (base / "kmsg.txt").write_text("[    0.000000] Linux version 6.8.0-45-generic\n")
    return {"root": str(base / "root"), "recording": str(base / "recording.json"), "fleet": str(base / "fleet"),
            "state": str(base / "state"), "base": str(base), "kmsg": str(base / "kmsg.txt")}


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-c", CONSOLE_OVER_FAKE_NODE, *args]


def _env(unbuffered: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "GPUDIAG_DEBUG")}
    env["PYTHONPATH"] = str(REPO)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


# (what the error names, the command's arguments; {root} … filled from the fixture)
LARGE = [  # each writes tens to hundreds of KiB: 4 KiB free takes part of it, then the disk is full
    ("the report", ["check", "--root", "{root}", "--direct", "--json"]),  # the fast path, probing itself
    ("the report", ["check", "--root", "{root}", "--kernel-log", "{kmsg}", "--json"]),  # the full CLI (typer)
    ("the report", ["check", "--replay", "{recording}", "--format", "junit"]),
    ("the report", ["check", "--replay", "{recording}", "--verbose"]),
    ("the snapshot", ["snapshot", "--root", "{root}"]),
    ("the snapshot", ["snapshot", "--root", "{root}", "--output", "-"]),
    ("the baseline", ["baseline", "--replay", "{recording}"]),
    ("the output", ["textfile", "--root", "{root}", "--output", "-"]),
]
SMALL = [  # a few lines: only a disk with no room left refuses them
    ("the fleet verdict", ["fleet", "--json", "{fleet}"]),  # four healthy nodes
    ("the profiles", ["profiles"]),
    ("the profiles", ["profiles", "--format", "json"]),
    ("the history", ["history", "--root", "{base}", "--state-dir", "{state}"]),
    ("the version", ["version"]),
    ("the version", ["--version"]),
]


def _filled(args: list[str], node: dict) -> list[str]:
    return [arg.format(**node) for arg in args]


def _cases() -> list:
    """Every command with PYTHONUNBUFFERED=1 (where a raw stdout took part of a write silently); `check` and
    `snapshot` also with Python's usual buffered stdout (where the error was an "internal error")."""
    cases = []
    for what, args in LARGE + SMALL:
        name = " ".join(a for a in args if not a.startswith("{"))
        for unbuffered in (True, False) if args[0] in ("check", "snapshot") else (True,):
            cases.append(pytest.param(what, args, unbuffered, id=f"{name} {'-u' if unbuffered else 'buffered'}"))
    return cases


@needs_tmpfs
@pytest.mark.parametrize("what,args,unbuffered", _cases())
def test_a_full_filesystem_is_exit_4_in_one_line(what, args, unbuffered, node, tmp_path):
    free = 4096 if (what, args) in LARGE else 0
    code, written, err = run_into_full_tmpfs(_argv(*_filled(args, node)), tmp_path / "full", _env(unbuffered),
                                             free=free, cwd=REPO)
    assert code == 4, (code, written, err)
    assert err.strip().splitlines() == [f"gpudiag: error: cannot write {what} to standard output: {NO_SPACE}"], err
    assert written <= free


@pytest.mark.parametrize("what,args", [LARGE[0], LARGE[4], SMALL[0]], ids=["check", "snapshot", "profiles"])
def test_dev_full_is_exit_4_in_one_line(what, args, node):
    """/dev/full refuses every write: no root needed, so this runs everywhere."""
    code, err = run_into_dev_full(_argv(*_filled(args, node)), _env(unbuffered=True), cwd=REPO)
    assert code == 4, err
    assert err.strip().splitlines() == [f"gpudiag: error: cannot write {what} to standard output: {NO_SPACE}"]


@needs_tmpfs
def test_with_room_the_same_command_writes_everything(node, tmp_path):
    """The control: the same tmpfs with room for the output takes all of it, and the exit is 0."""
    import subprocess

    argv = _argv("profiles", "--format", "json")
    whole = subprocess.run(argv, capture_output=True, env=_env(True), cwd=REPO, timeout=120).stdout
    code, written, err = run_into_full_tmpfs(argv, tmp_path / "roomy", _env(True), free=60 << 10, cwd=REPO)
    assert (code, err) == (0, "") and written == len(whole) > 1000


def test_a_closed_stdout_is_exit_4_not_silence(node):
    """Descriptor 1 closed (`gpudiag profiles >&-`): print() drops everything without a word."""
    import subprocess

    done = subprocess.run(_argv("profiles"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=_env(True), cwd=REPO, timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 4
    assert (
        done.stderr.strip() == "gpudiag: error: cannot write the profiles to standard output: standard output is closed"
    )
