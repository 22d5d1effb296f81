"""What a newcomer types first (issue 12, CLI habits): --version, -V, -h, a bare `gpudiag`, shell completion, and the
options that used to be accepted and ignored or that crashed on an ASCII terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpudiag import __version__
from gpudiag.cli import app as cli
from tests.support.fakes.fake_nvml import library_missing
from tests.support.paths import REPO

RECORDED = REPO / "tests" / "fixtures" / "h200x2" / "snapshot.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def gpudiag(*argv: str, **env: str) -> subprocess.CompletedProcess:
    """A real process: encodings, completion and start-up are properties of the interpreter, not of cli.main."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-m", "gpudiag", *argv], capture_output=True, text=True, timeout=60,
                          env=environ, cwd=REPO)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flags_print_the_version_and_exit_0(capsys, flag):
    assert run(capsys, flag) == (0, f"gpudiag {__version__}\n", "")


def test_the_version_flag_is_eager_and_wins_over_a_command(capsys):
    assert run(capsys, "-V", "check", "--bogus") == (0, f"gpudiag {__version__}\n", "")


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["check", "-h"], ["serve", "-h"], ["install-service", "-h"]])
def test_short_help_works_on_every_command(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    assert out.startswith("Usage: gpudiag") and "-h, --help" in out


def test_check_keeps_v_for_verbose(capsys):
    code, out, _ = run(capsys, "check", "-h")
    assert "-v, --verbose" in out and "--version" not in out


def test_bare_gpudiag_prints_the_help_to_stdout_and_exits_0(capsys):
    code, out, err = run(capsys)
    assert (code, err) == (0, "")
    assert out.startswith("Usage: gpudiag [OPTIONS] COMMAND") and "check" in out and "install-service" in out


def test_shell_completion_is_offered_and_shows_a_script():
    listed = gpudiag("--help").stdout
    assert "--install-completion" in listed and "--show-completion" in listed
    # typer names the shell it finds among the process's ancestors: ask from a bash, as a user does (run from a
    # process with no shell above it, e.g. under a mutation-testing runner, it says "Shell  not supported")
    shown = subprocess.run(
        ["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-m", "gpudiag", "--show-completion"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    assert shown.returncode == 0 and "_GPUDIAG_COMPLETE" in shown.stdout and "complete " in shown.stdout


def test_completion_completes_commands():
    done = gpudiag(_GPUDIAG_COMPLETE="complete_bash", COMP_WORDS="gpudiag che", COMP_CWORD="1")
    assert done.returncode == 0 and "check" in done.stdout.split()


# -- nothing probed says why -------------------------------------------------------------------------------------


def test_snapshot_of_a_bare_node_exits_3_and_says_why(capsys, tmp_path):
    (tmp_path / "sys").mkdir()
    with library_missing():
        code, out, err = run(capsys, "snapshot", "--root", str(tmp_path))
    assert code == 3 and json.loads(out)["devices"] == []  # the snapshot still shows what was tried
    assert err.startswith("gpudiag: error: nothing could be probed") and len(err.splitlines()) == 1


def test_textfile_of_a_bare_node_exits_3_and_says_why(capsys, tmp_path):
    (tmp_path / "sys").mkdir()
    with library_missing():
        code, _, err = run(capsys, "textfile", "--root", str(tmp_path), "--output", str(tmp_path / "g.prom"))
    assert code == 3 and (tmp_path / "g.prom").is_file()
    assert err.startswith("gpudiag: error: nothing could be probed") and len(err.splitlines()) == 1


# -- options that would be ignored are refused -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "baseline"])
@pytest.mark.parametrize("extra, named", [
    (["--root", "/"], "--root"),  # even the default, when typed: the user meant something by it
    (["--kernel-log", "/etc/hostname"], "--kernel-log"),
    (["--timeout", "5"], "--timeout"),
    (["--timeout", "5", "--root", "/"], "--root, --timeout"),
])
def test_live_node_options_with_replay_are_usage_errors(capsys, command, extra, named):
    code, out, err = run(capsys, command, "--replay", str(RECORDED), *extra)
    assert (code, out) == (2, "")
    assert err.startswith(f"gpudiag: error: {named} read") and "--replay" in err and len(err.splitlines()) == 1


def test_replay_alone_still_works(capsys):
    code, out, err = run(capsys, "check", "--replay", str(RECORDED), "--no-color")
    assert code == 0 and "Verdict: PASS" in out


@pytest.mark.parametrize("fmt", ["junit", "text"])
def test_json_with_another_format_is_a_usage_error(capsys, fmt):
    code, out, err = run(capsys, "check", "--replay", str(RECORDED), "--json", "--format", fmt)
    assert (code, out) == (2, "")
    assert err.startswith("gpudiag: error: --json") and f"--format {fmt}" in err and len(err.splitlines()) == 1


def test_json_with_format_json_agrees(capsys):
    code, out, _ = run(capsys, "check", "--replay", str(RECORDED), "--json", "--format", "json")
    assert code == 0 and json.loads(out)["schema_version"] == 1


def test_replay_of_an_endless_device_is_refused_without_reading_it(capsys):
    # issue 12: `--replay /dev/zero` grew until MemoryError; the bounded reader refuses what is not a regular file
    code, out, err = run(capsys, "check", "--replay", "/dev/zero")
    assert (code, out) == (2, "")
    assert err.startswith("gpudiag: error: /dev/zero: not a regular file") and len(err.splitlines()) == 1


# -- an ASCII-only stdout -------------------------------------------------------------------------------------------


def test_an_ascii_stdout_gets_ascii_symbols_instead_of_a_crash():
    done = gpudiag("check", "--replay", str(RECORDED), "--no-color", "--verbose", PYTHONIOENCODING="ascii")
    assert (done.returncode, done.stderr) == (0, "")
    done.stdout.encode("ascii")  # nothing but ASCII came out
    head = done.stdout.splitlines()
    assert head[0].startswith(f"gpudiag {__version__} - vm - ") and " - probed in " in head[0]
    assert head[1].startswith("GPUs: 2 x NVIDIA H200 - nvml")


def test_an_ascii_stdout_keeps_remediation_arrows_readable(tmp_path):
    snapshot = json.loads(RECORDED.read_text())
    snapshot["devices"][1]["pcie"]["current_generation"] = 4  # a downtrained link: a FAIL with a remediation
    recording = tmp_path / "downtrained.json"
    recording.write_text(json.dumps(snapshot))
    done = gpudiag("check", "--replay", str(recording), "--no-color", PYTHONIOENCODING="ascii")
    assert done.returncode == 1 and done.stderr == ""
    failure = done.stdout.split("Checks by family")[0]
    assert "FAIL  pcie.link_generation" in failure and "\n      -> " in failure and "?" not in failure


def test_a_utf8_stdout_keeps_the_typography():
    done = gpudiag("check", "--replay", str(RECORDED), "--no-color", PYTHONIOENCODING="utf-8")
    assert done.returncode == 0 and " · " in done.stdout.splitlines()[0]


def test_help_lists_the_commands_in_their_pinned_order(capsys):
    # gpudiag/cli/app.py registers them from COMMANDS: the order no longer follows whichever module is imported first.
    assert cli.main(["--help"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == ["check", "top", "snapshot", "baseline", "serve", "textfile", "version", "install-service",
                      "root-facts", "fleet", "history", "profiles", "screen"]
