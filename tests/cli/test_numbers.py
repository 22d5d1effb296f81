"""nan and inf are not numbers to judge by (issue 33, item 6): every numeric option of every command, every profile
value and every `-p` value refuses a value that is not finite, with one line and exit 2, instead of judging with it
(a nan window hides an Xid, a nan threshold hides a slow GPU, a nan deadline fails a healthy node, an infinite one
ends in an internal error)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import typing
from pathlib import Path

import pytest

from gpudiag.cli import app as cli
from gpudiag.exitcodes import ExitCode
from gpudiag.expect import profile
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.fleet import on_gpu, run as fleet, write_fleet

NOT_FINITE = ("nan", "inf", "-inf", "NaN", "Infinity", "1e999")


def _node_with_xid_48(*argv: str) -> tuple[int, str, str]:
    """`gpudiag check --direct ARGV` on two fake H200s whose kernel log holds an Xid 48 (a double-bit ECC error)."""
    node = FakeNode.hgx_h200(2)
    with tempfile.TemporaryDirectory() as tmp:
        fake_root(Path(tmp), node, kmsg=(xid_line(1, 5_000_000, node.gpus[0].bus_id, 48),))
        argv = tuple(a.replace("{tmp}", tmp) for a in argv)
        out, err = io.StringIO(), io.StringIO()
        with installed(node), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["check", "--root", tmp, "--direct", "--no-color", *argv])
    return code, out.getvalue(), err.getvalue()


def _refused(code: int, out: str, err: str) -> str:
    assert (code, out) == (ExitCode.USAGE, ""), (code, err, out[-400:])
    assert err.startswith("gpudiag: error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err.strip()


def test_the_xid_48_node_fails_with_the_default_window():
    code, out, _ = _node_with_xid_48("--timeout", "3")
    assert code == ExitCode.FAILED and "Xid 48" in out


@pytest.mark.parametrize("text", NOT_FINITE)
def test_a_nan_or_infinite_kernel_log_window_is_refused_not_a_pass(text):
    err = _refused(*_node_with_xid_48("--timeout", "3", "-p", f"kernel_log_window_seconds={text}"))
    assert "-p kernel_log_window_seconds" in err and "not a finite number" in err


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "+inf"])
def test_a_profile_with_a_nan_or_infinite_value_is_refused(tmp_path, text):
    site = tmp_path / "site.toml"
    site.write_text(f"kernel_log_window_seconds = {text}\n")
    err = _refused(*_node_with_xid_48("--timeout", "3", "--profile", str(site)))
    assert f"profile {site}: kernel_log_window_seconds" in err and "not a finite number" in err


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999"])
def test_check_refuses_a_deadline_that_is_not_finite(text):
    """Today --timeout nan fails every GPU of a healthy node (the probe's deadline compares false) and inf ends in
    an internal error (exit 4): neither is a deadline."""
    err = _refused(*_node_with_xid_48("--timeout", text))
    assert "--timeout" in err and ("not a finite number" in err or "not in the range" in err)


def _float_settings() -> list[str]:
    """Every setting whose value is a number (or a list of numbers)."""
    found = []
    for key, hint in profile.settings().items():
        args = typing.get_args(hint) or (hint,)
        if float in args or any(float in typing.get_args(a) for a in args):
            found.append(key)
    return sorted(found)


def test_there_are_float_settings_to_refuse():
    assert "kernel_log_window_seconds" in _float_settings() and len(_float_settings()) > 10


@pytest.mark.parametrize("key", _float_settings())
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_every_number_setting_refuses_nan_and_inf_from_p_and_from_a_profile(key, text):
    with pytest.raises(profile.ProfileError, match="not a finite number"):
        profile.values_from_params([f"{key}={text}"])
    with pytest.raises(profile.ExpectationError, match="not a finite number"):
        profile.values_from_toml({key: float(text)})


def _float_options() -> list[tuple[str, str]]:
    """(command, option) for every option of every command whose value is a number with a fraction."""
    import typer.main

    group = typer.main.get_command(cli.app)
    found = []
    for name, command in sorted(group.commands.items()):
        for param in command.params:
            kind = type(param.type).__name__
            if kind in ("FloatParamType", "FloatRange"):
                found.append((name, param.opts[0]))
    return found


def test_the_numeric_options_are_found():
    assert {("check", "--timeout"), ("fleet", "--threshold"), ("serve", "--interval")} <= set(_float_options())


@pytest.mark.parametrize("command,option", _float_options())
@pytest.mark.parametrize("text", ["nan", "inf"])
def test_every_numeric_option_refuses_nan_and_inf(tmp_path, capsys, command, option, text):
    code = cli.main([command, option, text, "--root", str(tmp_path)] if command != "fleet"
                    else [command, option, text, str(tmp_path)])
    out, err = capsys.readouterr()
    line = _refused(code, out, err)
    assert option in line and ("not a finite number" in line or "not in the range" in line)  # inf above a max


def test_fleet_threshold_nan_does_not_hide_a_gpu_27_percent_slower(tmp_path, capsys):
    def slow(report: dict) -> None:
        observed = on_gpu(report, "active.pcie_h2d_bandwidth", 1)["observed"]
        observed["gb_per_second"] = round(observed["gb_per_second"] * 0.73, 2)

    write_fleet(tmp_path, 8, edits={"gpu-node-003": slow})
    code, out, _ = fleet(capsys, str(tmp_path), "--json")
    assert code == 1 and [o["node"] for o in json.loads(out)["outliers"]] == ["gpu-node-003"]
    line = _refused(*fleet(capsys, str(tmp_path), "--json", "--threshold", "nan"))
    assert "--threshold" in line and "not a finite number" in line
