"""gpudiag.fileio against a hostile node: symlink races in a shared directory, device nodes as outputs, signals
mid-write, and input files that are FIFOs, devices, huge, not UTF-8 or nested without end (issue 10, items 9–12)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag import fileio
from gpudiag.fileio import (
    CONFIG_MAX_BYTES,
    MAX_NESTING,
    PRIVATE,
    DocumentError,
    read_json,
    read_text,
    write_atomically,
)
from tests.support.paths import REPO



def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test, and put it back."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


# -- item 9: the mode is set on the descriptor, never by path ----------------------------------------------------


def test_the_mode_is_never_set_by_path(tmp_path, monkeypatch):
    def by_path(*args, **kwargs):
        raise AssertionError(f"chmod by path {args}: a symlink swapped in would redirect it")

    monkeypatch.setattr(os, "chmod", by_path)
    monkeypatch.setattr(os, "lchmod", by_path, raising=False)
    write_atomically(tmp_path / "out.json", "{}\n", PRIVATE)
    assert mode_of(tmp_path / "out.json") == 0o600


def test_a_symlink_swapped_in_before_the_rename_changes_no_other_file(tmp_path, monkeypatch):
    """The race of the red-team pass, made deterministic: between the write and the rename, another user of the
    directory replaces the temporary file with a symlink to a root-only file."""
    victim = tmp_path / "secret"
    victim.write_text("root only\n")
    victim.chmod(0o600)
    shared = tmp_path / "textfile-dir"
    shared.mkdir()
    real_fsync = os.fsync
    swapped = []

    def attacker_swaps_the_temporary_file(fd):
        real_fsync(fd)
        if not swapped:
            (tmp,) = [p for p in shared.iterdir() if p.name.endswith(".tmp")]
            tmp.unlink()
            tmp.symlink_to(victim)
            swapped.append(tmp)

    monkeypatch.setattr(os, "fsync", attacker_swaps_the_temporary_file)
    with pytest.raises(OSError, match="replaced while it was written"):
        write_atomically(shared / "gpudiag.prom", "gpudiag_up 1\n", 0o644)
    assert swapped, "the hook never ran"
    assert mode_of(victim) == 0o600 and victim.read_text() == "root only\n"
    assert list(shared.iterdir()) == []  # the attacker's link is removed and nothing was installed


# -- item 10: a device node, FIFO or directory is never replaced -------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/null", "directory"])
def test_an_existing_non_regular_target_is_refused(tmp_path, kind):
    target = tmp_path / "out"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    else:
        target.symlink_to("/dev/null")
    before = os.lstat(target)
    with pytest.raises(fileio.NotARegularFile) as error:
        write_atomically(target, "x\n")
    assert "not a regular file" in error.value.strerror and "use - for standard output" in error.value.strerror
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_regular_target_is_replaced(tmp_path):
    target = tmp_path / "out"
    target.write_text("old\n")
    write_atomically(target, "new\n")
    assert target.read_text() == "new\n"


# -- item 12: modes follow the umask; snapshots and baselines are private; signals clean up ----------------------


@pytest.mark.parametrize("mask, public", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_modes_honour_the_umask(tmp_path, umask, mask, public):
    umask(mask)
    write_atomically(tmp_path / "metrics.prom", "x\n")
    write_atomically(tmp_path / "snapshot.json", "{}\n", PRIVATE)
    assert mode_of(tmp_path / "metrics.prom") == public
    assert mode_of(tmp_path / "snapshot.json") == 0o600


def test_snapshots_and_baselines_are_saved_private(tmp_path, umask):
    from gpudiag.expect.baseline import NodeBaseline, save_baseline
    from gpudiag.model.recording import save_snapshot
    from tests.support.snapshots import amd_mi300x_node

    umask(0o022)
    save_snapshot(amd_mi300x_node(), tmp_path / "node.json")
    save_baseline(NodeBaseline(), tmp_path / "golden.json")
    assert mode_of(tmp_path / "node.json") == mode_of(tmp_path / "golden.json") == 0o600


def test_the_signal_handlers_are_put_back_after_a_write(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    write_atomically(tmp_path / "out", "x\n")
    assert {s: signal.getsignal(s) for s in before} == before


_KILLED_MID_WRITE = """
import os, signal, sys, time
from pathlib import Path
from gpudiag import fileio

# The disposition to test, whatever this process inherited: under `nohup` SIGHUP arrives ignored (SIG_IGN).
signal.signal(signal.SIG{name}, signal.SIG_{disposition})
real_fsync = os.fsync

def terminated_while_writing(fd):
    real_fsync(fd)
    os.kill(os.getpid(), signal.SIG{name})
    time.sleep(10)  # the signal arrives during this

os.fsync = terminated_while_writing
fileio.write_atomically(Path(sys.argv[1]) / "gpudiag.prom", "gpudiag_up 1\\n")
print("not reached")
"""


@pytest.mark.parametrize("name", ["TERM", "HUP"])
def test_a_signal_mid_write_removes_the_temporary_file_and_still_kills(tmp_path, name):
    out = tmp_path / "dir"
    out.mkdir()
    proc = _write_signalled(out, name, "DFL")
    assert proc.returncode == -getattr(signal, f"SIG{name}"), proc.stderr  # ended by the signal, as before
    assert "not reached" not in proc.stdout and "Traceback" not in proc.stderr
    assert list(out.iterdir()) == []  # no .tmp left behind, no half-written output


def test_an_ignored_sighup_leaves_the_write_whole(tmp_path):
    """Started under `nohup`, SIGHUP is ignored: the write is not interrupted and the file is whole."""
    out = tmp_path / "dir"
    out.mkdir()
    proc = _write_signalled(out, "HUP", "IGN", sleep=0)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "not reached\n", "")
    assert [p.name for p in out.iterdir()] == ["gpudiag.prom"]
    assert (out / "gpudiag.prom").read_text() == "gpudiag_up 1\n"


def _write_signalled(out, name: str, disposition: str, sleep: float = 10) -> subprocess.CompletedProcess:
    script = _KILLED_MID_WRITE.format(name=name, disposition=disposition).replace(
        "time.sleep(10)", f"time.sleep({sleep})"
    )
    return subprocess.run([sys.executable, "-c", script, str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_ctrl_c_mid_write_removes_the_temporary_file(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def interrupted(fd):
        real_fsync(fd)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "out", "x\n")
    assert list(tmp_path.iterdir()) == []


# -- item 11: one reader for every input file --------------------------------------------------------------------


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def blocked(*_):
        raise AssertionError("open() of the FIFO blocked")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(5)  # without O_NONBLOCK the open waits for a writer forever: fail instead of hanging the suite
    try:
        with pytest.raises(DocumentError, match=r"^not a regular file \(a FIFO\)$"):
            read_text(fifo, CONFIG_MAX_BYTES)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_link_to_a_device_is_refused(tmp_path):
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(DocumentError, match=r"^not a regular file \(a character device\)$"):
        read_text(tmp_path / "zero", CONFIG_MAX_BYTES)


def test_a_link_to_a_regular_file_is_read(tmp_path):
    (tmp_path / "real.json").write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert read_json(tmp_path / "link.json", CONFIG_MAX_BYTES) == {"a": 1}


def test_the_size_cap_holds_at_one_byte_over(tmp_path):
    at_cap, over = tmp_path / "at.json", tmp_path / "over.json"
    at_cap.write_text("0" + " " * (CONFIG_MAX_BYTES - 1))
    with open(over, "wb") as handle:  # sparse: no disk, no time
        handle.truncate(CONFIG_MAX_BYTES + 1)
    assert read_json(at_cap, CONFIG_MAX_BYTES) == 0
    with pytest.raises(DocumentError, match=r"^too large: 1048577 bytes over the 1 MiB limit"):
        read_json(over, CONFIG_MAX_BYTES)


def test_a_file_that_says_it_is_empty_is_still_read_only_up_to_the_cap(tmp_path):
    """/proc files report st_size 0 and still produce text: the cap is on what is read, not what stat says."""
    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.skip("no /proc")
    assert os.stat(status).st_size == 0
    with pytest.raises(DocumentError, match="^too large"):
        read_text(status, 16)
    assert "Pid:" in read_text(status, CONFIG_MAX_BYTES)


def test_text_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "latin1").write_bytes(b"caf\xe9\n")
    with pytest.raises(DocumentError, match=r"^not UTF-8 text \(byte 0xe9 at offset 3\)$"):
        read_text(tmp_path / "latin1", CONFIG_MAX_BYTES)


@pytest.mark.parametrize("depth, refused", [(MAX_NESTING, False), (MAX_NESTING + 1, True), (100_000, True)])
def test_nesting_is_bounded(tmp_path, depth, refused):
    path = tmp_path / "deep.json"
    path.write_text("[" * depth + "]" * depth)
    if refused:
        with pytest.raises(DocumentError, match=rf"^nested deeper than {MAX_NESTING} levels$"):
            read_json(path, CONFIG_MAX_BYTES)
    else:
        assert read_json(path, CONFIG_MAX_BYTES) is not None


def test_yaml_aliases_cost_no_more_than_their_text():
    """A 'billion laughs' document shares its lists; the depth walk visits each once, and a list that contains
    itself nests without end."""
    import yaml

    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    assert fileio.parse_bounded(yaml.safe_load, laughs)["i"][0][0][0] is not None
    with pytest.raises(DocumentError, match="nested deeper"):
        fileio.parse_bounded(yaml.safe_load, "&a [*a]")


def test_a_huge_number_is_not_json_not_an_internal_error(tmp_path):
    (tmp_path / "n.json").write_text("1" * 5000)
    with pytest.raises(DocumentError, match="^not JSON"):
        read_json(tmp_path / "n.json", CONFIG_MAX_BYTES)


def test_json_shapes_are_unchanged(tmp_path):
    data = {"a": [1, 2.5, None, True, "é"], "b": {"c": {}}}
    (tmp_path / "d.json").write_text(json.dumps(data))
    assert read_json(tmp_path / "d.json", CONFIG_MAX_BYTES) == data


def test_the_caps_are_documented_as_they_are():
    readme = (REPO / "README.md").read_text()
    for cap in (fileio.CONFIG_MAX_BYTES, fileio.BASELINE_MAX_BYTES, fileio.RECORDING_MAX_BYTES):
        assert f"{cap >> 20} MiB" in readme
    assert f"{MAX_NESTING} levels" in readme and "0600" in readme
