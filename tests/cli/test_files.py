"""Files on the command line treated as hostile, through the real CLI (issue 10, items 10–14): every bad input file
is exit 2 with one line on stderr, never a hang, a traceback or exit 4; outputs never replace a device node and are
private where they hold private facts; node strings never reach the terminal as escape sequences; a bare
--profile name always means the shipped profile."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag import fileio
from gpudiag.expect.profile import load_expectations
from gpudiag.model.recording import load_snapshot, save_snapshot
from tests.cli.test_cli import RECORDED, run
from tests.support.acceptance_nodes import nvidia_h200_8x
from tests.support.paths import REPO

MESSAGE = {
    "fifo": "not a regular file (a FIFO)",
    "dev-zero": "not a regular file (a character device)",
    "deep": f"nested deeper than {fileio.MAX_NESTING} levels",
    "over-cap": "too large: ",
    "latin-1": "not UTF-8 text (byte 0xe9",
}


def hostile(tmp_path: Path, kind: str, cap: int, deep: str) -> Path:
    path = tmp_path / f"{kind}.input"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text(deep)
    elif kind == "over-cap":
        with open(path, "wb") as handle:  # sparse: one byte over the cap costs nothing
            handle.truncate(cap + 1)
    else:
        path.write_bytes(b'name = "caf\xe9"\n')
    return path


def gpudiag(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The real entry point in a child: a FIFO that blocked the open would make this time out, not hang the suite."""
    return subprocess.run([sys.executable, "-m", "gpudiag", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=30, env={**os.environ, "PYTHONPATH": str(REPO)})


def assert_one_line_exit_2(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2 and out == "", (code, err)
    assert err.startswith("gpudiag: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


# -- item 11: --replay, --baseline, --profile, --web-config --------------------------------------------------------

FLAGS = {  # flag → (argv around the file, size cap, a document nested 100,000 deep in the file's language)
    "--replay": (["check", "--replay"], fileio.RECORDING_MAX_BYTES, "[" * 100_000),
    "--baseline": (["check", "--replay", str(RECORDED["h200x2"]), "--baseline"], fileio.BASELINE_MAX_BYTES,
                   '{"kind": ' + "[" * 100_000),
    "--profile": (["check", "--replay", str(RECORDED["h200x2"]), "--profile"], fileio.CONFIG_MAX_BYTES,
                  "x = " + "[" * 100_000),
    "--web-config": (["serve", "--listen", "127.0.0.1:0", "--web-config"], fileio.CONFIG_MAX_BYTES,
                     "basic_auth_users: " + "[" * 100_000),
}


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep", "over-cap", "latin-1"])
@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_hostile_input_file_is_one_line_and_exit_2(capsys, tmp_path, flag, kind):
    argv, cap, deep = FLAGS[flag]
    path = hostile(tmp_path, kind, cap, deep)
    if kind == "fifo" or flag == "--web-config":  # could block (today: forever) or serve: in a child, bounded
        proc = gpudiag(*argv, str(path))
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        code, out, err = run(capsys, *argv, str(path))
    assert_one_line_exit_2(code, out, err, str(path), MESSAGE[kind])


def test_the_replay_cap_is_far_above_a_real_recording():
    """The caps must never refuse a real file: the lab's recordings are tens of KB, an 8-GPU node's ~100 KB."""
    sizes = [path.stat().st_size for path in RECORDED.values()]
    assert max(sizes) * 100 < fileio.RECORDING_MAX_BYTES
    assert load_snapshot(RECORDED["h200x2"]).devices


def test_a_recording_full_of_events_loads_in_linear_time(tmp_path, monkeypatch):
    """At the cap a recording holds ~90,000 kernel-log events; reading each one's type hints anew took 15 s."""
    import typing

    from gpudiag.model import serialize

    node = load_snapshot(RECORDED["h200x2"])
    event = {"vendor": "nvidia", "kind": "xid", "message": "NVRM: Xid (PCI:0000:19:00): 13, Graphics Exception",
             "pci_bus_id": "0000:19:00.0", "code": 13}
    data = serialize.to_dict(node)
    data["kernel_log"]["events"] = [dict(event) for _ in range(2000)]
    (tmp_path / "events.json").write_text(json.dumps(data))
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda cls, *a, **k: calls.append(cls) or real(cls, *a, **k))
    serialize._schema.cache_clear()
    assert len(load_snapshot(tmp_path / "events.json").kernel_log.events) == 2000
    assert len(calls) == len(set(calls)) < 40  # once per dataclass, not once per object


# -- item 10: --output never replaces a device node; `-` is standard output ----------------------------------------


@pytest.mark.parametrize("command", ["baseline", "snapshot", "textfile"])
def test_output_to_a_fifo_or_a_link_to_a_device_is_refused(capsys, tmp_path, command, monkeypatch):
    fifo, link = tmp_path / "fifo.prom", tmp_path / "stdout.prom"  # .prom: textfile warns about any other name
    os.mkfifo(fifo)
    link.symlink_to("/dev/null")  # what /dev/stdout is: a link to a device or pipe
    argv = [command, "--replay", str(RECORDED["h200x2"])] if command == "baseline" else [command]
    # Probing is not what is tested here: snapshot and textfile get a recorded 8-GPU node.
    monkeypatch.setattr("gpudiag.cli.shared.node_collect.collect", lambda *args, **kwargs: nvidia_h200_8x())
    for target, kind in ((fifo, "a FIFO"), (link, "a character device")):
        code, out, err = run(capsys, *argv, "--output", str(target))
        assert_one_line_exit_2(code, out, err, f"--output {target}: cannot write: not a regular file ({kind})",
                               "use - for standard output")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.readlink(link) == "/dev/null"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.prom", "stdout.prom"]


def test_output_dash_is_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "baseline", "--replay", str(RECORDED["h200x2"]), "--output", "-")
    assert code == 0 and json.loads(out)["kind"] == "gpudiag-baseline"
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_textfile_output_dash_is_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gpudiag.cli.shared.node_collect.collect", lambda *args, **kwargs: nvidia_h200_8x())
    code, out, err = run(capsys, "textfile", "--output", "-")
    assert code == 0 and "gpudiag_check_ok{" in out and "textfile collector reads only" not in err
    assert list(tmp_path.iterdir()) == []


# -- item 12: snapshot and baseline files are private -------------------------------------------------------------


def test_snapshot_and_baseline_files_are_0600_under_umask_022(capsys, tmp_path, monkeypatch):
    saved = os.umask(0o022)
    try:
        monkeypatch.setattr("gpudiag.cli.shared.node_collect.collect", lambda *args, **kwargs: nvidia_h200_8x())
        assert run(capsys, "snapshot", "--output", str(tmp_path / "node.json"))[0] == 0
        assert run(capsys, "baseline", "--replay", str(RECORDED["h200x2"]), "--output",
                   str(tmp_path / "golden.json"))[0] == 0
        assert run(capsys, "textfile", "--output", str(tmp_path / "gpudiag.prom"))[0] == 0
    finally:
        os.umask(saved)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"node.json": 0o600, "golden.json": 0o600, "gpudiag.prom": 0o644}


# -- item 13: what the node says cannot drive the terminal -------------------------------------------------------


def test_escape_sequences_from_the_node_never_reach_the_terminal(capsys, tmp_path):
    from gpudiag.model import GpuProcess

    node = load_snapshot(RECORDED["h200x2"])
    node.hostname = "node\x1b]0;owned\x07"
    node.devices[0].name = "NVIDIA H200\x9b2J"
    node.devices[0].processes = [
        GpuProcess(pid=4242, kind="compute", name="\x1b[2J\x1b[1;1Hpython\nPASS  fake.check  node: all good",
                   user="Jos\u00e9\u202e"),
    ]
    path = tmp_path / "node.json"
    save_snapshot(node, path)
    for color in ("--color", "--no-color"):
        code, out, err = run(capsys, "check", "--replay", str(path), "--verbose", color)
        assert code in (0, 1), err
        ours = out.replace("\x1b[0m", "")
        for sgr in ("31", "33", "35", "32", "2"):  # the checklist's own colours, and only those
            ours = ours.replace(f"\x1b[{sgr}m", "")
        unsafe = [c for c in ours if ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) <= 0x9f or c == "\u202e"]
        assert unsafe == [], unsafe
        assert not any(line.startswith("PASS  fake.check") for line in ours.splitlines())
        processes = next(line for line in ours.splitlines() if "workload.processes" in line and "4242" in line)
        assert "python\ufffdPASS  fake.check" in processes and "Jos\u00e9" in processes  # shown, defused


# -- item 14: a bare --profile name is the shipped profile -------------------------------------------------------


def test_a_file_in_the_current_directory_does_not_replace_a_shipped_profile(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h200-8x").write_text("expected_gpu_count = 3\n")
    (tmp_path / "site.toml").write_text("expected_gpu_count = 5\n")
    assert load_expectations("h200-8x").expected_gpu_count == 8  # the shipped one
    assert load_expectations("./h200-8x").expected_gpu_count == 3  # a path: the file
    assert load_expectations("site.toml").expected_gpu_count == 5  # a .toml suffix: the file
    node = tmp_path / "node.json"
    save_snapshot(nvidia_h200_8x(), node)
    code, out, err = run(
        capsys, "check", "--replay", str(node), "--profile", "h200-8x", "--json", "--only", "inventory"
    )
    assert code == 0, err
    counts = [r for r in json.loads(out)["results"] if r["check"] == "inventory.gpu_count"]
    assert counts and counts[0]["expected"] == 8


def test_the_profile_help_says_how_a_file_is_named(capsys):
    code, out, _ = run(capsys, "check", "--help")
    assert code == 0 and "slash" in " ".join(out.split())
