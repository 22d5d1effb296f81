"""Consistent refusals (issue 27, item 5): bad input is one line on stderr and exit 2 (ExitCode.USAGE), and a
refused command leaves nothing behind; help texts say only what applies to their command."""

from __future__ import annotations

import json
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
