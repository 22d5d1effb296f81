"""Consistent refusals (issue 27, item 5): bad input is one line on stderr and exit 2 (ExitCode.USAGE), and a
refused command leaves nothing behind; help texts say only what applies to their command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudiag.cli import app as cli, install
from gpudiag.exitcodes import ExitCode
from gpudiag.exporter.web.http_server import PATHS
from tests.support.paths import FIXTURES

RECORDING = FIXTURES / "h200x2" / "snapshot.json"


def refused(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert (code, out) == (ExitCode.USAGE, ""), err
    assert err.startswith("gpudiag: error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err.strip()


def test_a_kernel_log_that_is_a_directory_says_so(tmp_path, capsys):
    (tmp_path / "sys").mkdir()
    err = refused(capsys, "check", "--root", str(tmp_path), "--kernel-log", str(tmp_path), "--direct")
    assert f"--kernel-log {tmp_path}: is a directory" in err


@pytest.mark.parametrize("document", [{"status": "pass", "results": []}, {}])
def test_replaying_a_json_that_is_not_a_snapshot_says_so(tmp_path, capsys, document):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    err = refused(capsys, "check", "--replay", str(path))
    assert err == f"gpudiag: error: {path}: not a gpudiag snapshot (no schema_version)"
    assert "None" not in err


@pytest.mark.parametrize("command", [["check", "--replay", str(RECORDING)], ["textfile", "--output", "{tmp}/x.prom"]])
def test_stress_seconds_without_a_load_test_is_refused(tmp_path, capsys, command):
    command = [arg.replace("{tmp}", str(tmp_path)) for arg in command]
    err = refused(capsys, *command, "--stress-seconds", "60")
    assert "--stress-seconds" in err and "--level 2" in err
    assert not (tmp_path / "x.prom").exists()
    # with --level 2 it is taken (and the replay then refused for its own reason, the load test)
    if command[0] == "check":
        assert "cannot be load-tested" in refused(capsys, *command, "--stress-seconds", "60", "--level", "2")


def test_serve_refuses_a_socket_whose_directory_is_missing(tmp_path, capsys):
    (tmp_path / "sys").mkdir()
    missing = tmp_path / "missing" / "dir"
    err = refused(capsys, "serve", "--listen", "127.0.0.1:0", "--root", str(tmp_path),
                  "--socket", str(missing / "x.sock"))
    assert f"--socket {missing / 'x.sock'}: no such directory {missing}" in err
    assert not (tmp_path / "missing").exists()


@pytest.fixture
def gpudiag_exe(tmp_path) -> Path:
    exe = tmp_path / "opt" / "bin" / "gpudiag"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_install_service_refuses_a_root_that_does_not_exist(tmp_path, capsys, gpudiag_exe, monkeypatch):
    monkeypatch.setattr(install, "HIDDEN_BY_PRIVATE_TMP", ())  # tmp_path is under /tmp: its own test below
    missing = tmp_path / "missing"
    for extra in ([], ["--dry-run"]):
        err = refused(capsys, "install-service", "--root", str(missing), "--gpudiag", str(gpudiag_exe), *extra)
        assert err == f"gpudiag: error: --root {missing}: no such directory"
        assert not missing.exists()


@pytest.mark.parametrize("where", ["/tmp/gpudiag/bin/gpudiag", "/var/tmp/venv/bin/gpudiag"])
def test_install_service_refuses_a_gpudiag_hidden_by_private_tmp(tmp_path, capsys, where, monkeypatch):
    # the program exists (checked as under --root: the image's own copy); only where it lies is wrong
    image = tmp_path / "image"
    (image / where.lstrip("/")).parent.mkdir(parents=True)
    (image / where.lstrip("/")).write_text("#!/bin/sh\n")
    (image / where.lstrip("/")).chmod(0o755)
    err = refused(capsys, "install-service", "--root", str(image), "--gpudiag", where)
    assert "PrivateTmp=yes" in err and where in err
    assert not (image / "etc").exists()


def test_install_service_refuses_a_path_that_leaves_the_root(tmp_path, monkeypatch):
    root = tmp_path / "image"
    root.mkdir()
    monkeypatch.setattr(install, "inside", lambda top, path: tmp_path / "elsewhere" / Path(path).name)
    with pytest.raises(install.InstallError, match=r"outside --root"):
        install.planned_files(root, ["/opt/gpudiag/bin/gpudiag"], "0")


# -- help says only what applies -----------------------------------------------------------------------------------


def options_of(command: str) -> dict[str, str]:
    """Each option of a command (every spelling) → its help text, as typer hands them to click."""
    import typer.main

    click_command = typer.main.get_command(cli.app).commands[command]
    return {spelling: param.help or "" for param in click_command.params
            for spelling in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("command", ["check", "snapshot", "baseline", "serve", "textfile"])
def test_timeout_mentions_level_only_where_there_is_one(command):
    options = options_of(command)
    assert ("--level" in options["--timeout"]) == ("--level" in options)


def test_history_root_names_what_history_reads():
    root_help = options_of("history")["--root"]
    assert "socket" in root_help and "journal" in root_help and "ROOT/sys" not in root_help


def test_serve_listen_names_every_endpoint():
    listen_help = options_of("serve")["--listen"]
    for path in (*PATHS, "/"):
        assert f"{path} " in listen_help or f"{path}," in listen_help, path


# -- what a file or a number on the command line is (issue 33, item 7) --------------------------------------------


@pytest.mark.parametrize("make,what", [(os.mkfifo, "a FIFO"), (None, "no such file")], ids=["fifo", "missing"])
def test_a_kernel_log_that_is_a_fifo_says_so_and_a_missing_one_no_such_file(tmp_path, capsys, make, what):
    """A FIFO (or `--kernel-log <(dmesg)`, a pipe) is no saved log: reading it would wait for a writer. It is said to
    be one, not "no such file"."""
    (tmp_path / "sys").mkdir()
    log = tmp_path / "kernel.log"
    if make is not None:
        make(log)
    err = refused(capsys, "check", "--root", str(tmp_path), "--kernel-log", str(log), "--direct")
    assert f"--kernel-log {log}: " in err and what in err
    if make is not None:
        assert "no such file" not in err and "save the log" in err


def test_a_kernel_log_that_is_a_device_says_so(tmp_path, capsys):
    (tmp_path / "sys").mkdir()
    err = refused(capsys, "check", "--root", str(tmp_path), "--kernel-log", "/dev/null", "--direct")
    assert "--kernel-log /dev/null: not a regular file (a character device)" in err


def test_a_gpu_index_of_5000_digits_is_one_clear_line(capsys):
    """Python refuses to turn more than 4300 digits into an int (sys.get_int_max_str_digits): its message, naming
    sys.set_int_max_str_digits, is no answer to `-i`."""
    from tests.support.checklist_scenarios import single_fault

    code, out = single_fault("nvidia-healthy", "-i", "9" * 5000)
    err = capsys.readouterr().err
    assert (code, out) == (ExitCode.USAGE, "")
    assert err.startswith("gpudiag: error: --gpu '99999") and len(err.strip().splitlines()) == 1
    assert "no such GPU on this node" in err and "5000 characters" in err and len(err) < 400
    assert "int_max_str_digits" not in err and "Exceeds the limit" not in err


def test_an_option_value_of_5000_characters_is_shortened_in_the_one_line(tmp_path, capsys):
    err = refused(capsys, "check", "--root", str(tmp_path), "--level", "9" * 5000)
    assert "--level" in err and "…(5002 characters)" in err and len(err) < 300  # the digits and their quotes


# -- a selection that selects nothing (issue 36, item 7) -------------------------------------------------------------


@pytest.mark.parametrize("selection, said", [
    (["--only", "pcie", "--skip", "pcie"], "gpudiag: error: --only pcie --skip pcie: no check is left to run"),
    (["--only", "pcie.link_width", "--skip", "pcie"],
     "gpudiag: error: --only pcie.link_width --skip pcie: no check is left to run"),
    (["--only", ""], "gpudiag: error: --only names no check or family; give check IDs or families (--only pcie,ecc) "
                     "or leave --only out"),
    (["--only", ","], None),
    (["--only", "pcie", "--only", " "], None),  # one empty --only among others is one too few, not an error
])
def test_a_selection_of_no_check_is_a_usage_error(capsys, selection, said):
    """`--only pcie --skip pcie` printed "Verdict: UNKNOWN — no checks ran" and exited 0; `--only ''` (an unset
    variable in a script) ran every check."""
    if selection[-1] == " ":
        assert cli.main(["check", "--replay", str(RECORDING), *selection]) != ExitCode.USAGE
        capsys.readouterr()
        return
    err = refused(capsys, "check", "--replay", str(RECORDING), *selection)
    assert err == (said or refused(capsys, "check", "--replay", str(RECORDING), "--only", ""))


def test_the_fast_path_refuses_the_same_selections(tmp_path, capsys):
    """Through gpudiag/cli/check/fastpath.py: `--only ''` goes to the full CLI, which refuses it; an empty selection
    is refused by the direct check as by the service's answer (report/selection.py, for both)."""
    from gpudiag.cli.check import fastpath

    assert fastpath.parse(["check", "--only", ""]) is None and fastpath.parse(["check", "--only", ",,"]) is None
    assert fastpath.parse(["check", "--only", "pcie"]) is not None
    (tmp_path / "sys").mkdir()
    code = fastpath.main(["check", "--root", str(tmp_path), "--direct", "--only", "ecc", "--skip", "ecc"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (ExitCode.USAGE, "", "gpudiag: error: --only ecc --skip ecc: no check is left to run\n")
