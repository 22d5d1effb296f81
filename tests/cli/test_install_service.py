"""`gpudiag install-service` (issue 12): the shipped units rendered with the real gpudiag, into a temporary root, pass
`systemd-analyze verify` and keep the security exposure the source units were measured at; the package carries the
units and the monitoring files (an editable install here, a built wheel in test_readme_setup.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag.cli import app as cli, install
from tests.support.paths import REPO
from tests.test_systemd_units import ANALYZE, EXPOSURE_LIMITS, SYSTEMD, UNITS, needs_analyze, settings_of



def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def tmp_is_not_hidden(monkeypatch):
    """pytest's tmp_path is under /tmp, which the units' PrivateTmp=yes hides: the refusal of a gpudiag there has
    its own test (test_a_gpudiag_under_tmp_is_refused); the others install from tmp_path."""
    monkeypatch.setattr(install, "HIDDEN_BY_PRIVATE_TMP", ())


@pytest.fixture
def gpudiag_exe(tmp_path) -> Path:
    """An installed-looking gpudiag outside any home directory: this interpreter running this checkout."""
    exe = tmp_path / "opt" / "bin" / "gpudiag"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} -m gpudiag \"$@\"\n")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def installed_root(tmp_path, gpudiag_exe, capsys) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    code, out, err = run(capsys, "install-service", "--root", str(root), "--gpudiag", str(gpudiag_exe))
    assert (code, err) == (0, ""), err
    assert "systemctl daemon-reload" in out  # said, not run: --root is not this node
    return root


def test_the_package_ships_units_and_monitoring_files():
    for name in (*UNITS, "gpudiag.sysusers"):
        assert (install.SHIPPED / "systemd" / name).read_text() == (SYSTEMD / name).read_text()
    shipped = install.SHIPPED / "monitoring"
    assert (shipped / "grafana" / "gpudiag-dashboard.json").is_file()
    assert (shipped / "prometheus" / "gpudiag-alerts.yml").is_file()


def test_install_writes_units_sysusers_and_names_the_real_gpudiag(installed_root, gpudiag_exe):
    units = installed_root / "etc/systemd/system"
    assert sorted(p.name for p in units.iterdir()) == sorted(UNITS)
    for unit in ("gpudiag-exporter.service", "gpudiag-check.service"):
        (exec_start,) = settings_of(units / unit)["ExecStart"]
        assert shlex.split(exec_start)[0] == str(gpudiag_exe)
        assert install.PLACEHOLDER not in exec_start
        (pre,) = settings_of(units / unit)["ExecStartPre"]  # root's record first, with its prefixes kept
        assert shlex.split(pre)[0] == f"-+{gpudiag_exe}"
        assert oct((units / unit).stat().st_mode & 0o777) == "0o644"
    sysusers = installed_root / "etc/sysusers.d/gpudiag.conf"
    assert re.search(r"^u gpudiag - ", sysusers.read_text(), re.MULTILINE)
    # everything but ExecStart= and ExecStartPre= is the shipped unit, word for word
    for unit in UNITS:
        source = (SYSTEMD / unit).read_text().splitlines()
        rendered = (units / unit).read_text().splitlines()[1:]  # after the "Written by" header
        assert [a for a, b in zip(source, rendered) if a != b] == [
            line for line in source if line.startswith(("ExecStart=", "ExecStartPre="))]


@needs_analyze
def test_installed_units_pass_systemd_analyze_verify(installed_root):
    units = [str(installed_root / "etc/systemd/system" / u) for u in UNITS]
    result = subprocess.run([ANALYZE, "verify", "--man=no", *units], capture_output=True, text=True, timeout=60,
                            cwd=installed_root)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_analyze
@pytest.mark.parametrize("unit,limit", EXPOSURE_LIMITS)
def test_installed_units_keep_their_security_exposure(installed_root, unit, limit):
    # the same limits test_systemd_units.py holds the source units to
    result = subprocess.run([ANALYZE, "security", "--offline=true", "--no-pager",
                             str(installed_root / "etc/systemd/system" / unit)],
                            capture_output=True, text=True, timeout=60, cwd=installed_root)
    exposure = float(re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout).group(1))
    assert exposure <= limit, result.stdout


def test_the_installed_exec_start_runs(installed_root):
    (exec_start,) = settings_of(installed_root / "etc/systemd/system/gpudiag-exporter.service")["ExecStart"]
    program = shlex.split(exec_start)[0]
    done = subprocess.run([program, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--listen" in done.stdout


def test_a_second_install_changes_nothing(installed_root, gpudiag_exe, capsys):
    code, out, _ = run(capsys, "install-service", "--root", str(installed_root), "--gpudiag", str(gpudiag_exe))
    assert code == 0 and out.count("unchanged") == len(UNITS) + 1


def test_dry_run_shows_everything_and_writes_nothing(tmp_path, gpudiag_exe, capsys):
    root = tmp_path / "dry"
    root.mkdir()
    code, out, err = run(capsys, "install-service", "--root", str(root), "--gpudiag", str(gpudiag_exe), "--dry-run")
    assert (code, err) == (0, "") and list(root.iterdir()) == []
    for unit in UNITS:
        assert f"--- would write {root}/etc/systemd/system/{unit} (mode 0644)" in out
    assert f"ExecStart={gpudiag_exe} serve --socket" in out and "u gpudiag - " in out


def test_dry_run_on_the_live_node_lists_the_systemd_commands(gpudiag_exe, capsys):
    code, out, _ = run(capsys, "install-service", "--gpudiag", str(gpudiag_exe), "--dry-run", "--enable")
    assert code == 0
    assert "--- would run systemd-sysusers /etc/sysusers.d/gpudiag.conf" in out
    assert "--- would run systemctl daemon-reload" in out
    assert "--- would run systemctl enable --now gpudiag-exporter.service gpudiag-check.timer" in out


def test_no_reload_runs_no_systemd_command(gpudiag_exe, capsys):
    code, out, _ = run(capsys, "install-service", "--gpudiag", str(gpudiag_exe), "--dry-run", "--no-reload")
    assert code == 0 and "would run" not in out


@pytest.mark.parametrize("path, message", [
    ("/root/.venvs/gpudiag/bin/gpudiag", "ProtectHome=yes"),
    ("/home/ops/.local/bin/gpudiag", "ProtectHome=yes"),
    ("relative/gpudiag", "absolute path"),
    ("/opt/my gpudiag/bin/gpudiag", "characters systemd would interpret"),
    ("/opt/100%/gpudiag", "characters systemd would interpret"),
    ("{missing}/bin/gpudiag", "no such executable"),
])
def test_a_gpudiag_the_service_could_not_run_is_refused(tmp_path, capsys, path, message, monkeypatch):
    path = path.replace("{missing}", str(tmp_path / "missing"))  # not /nonexistent: a machine may have it
    real = os.path.isfile
    if path.startswith(("/root/", "/home/")):  # exists, but where the service cannot see it
        monkeypatch.setattr(os.path, "isfile", lambda p: p == path or real(p))
        monkeypatch.setattr(os, "access", lambda p, mode: True)
    code, out, err = run(capsys, "install-service", "--root", str(tmp_path / "r"), "--gpudiag", path)
    assert (code, out) == (2, "") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_enable_on_the_live_node_needs_the_reload(gpudiag_exe, capsys):
    code, _, err = run(capsys, "install-service", "--no-reload", "--enable", "--gpudiag", str(gpudiag_exe))
    assert code == 2 and "--enable" in err and "--no-reload" in err


def _links(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): os.readlink(path) for path in root.rglob("*") if path.is_symlink()}


@pytest.mark.skipif(not __import__("shutil").which("systemctl"), reason="systemctl is not installed")
def test_enable_in_an_image_makes_the_links_systemctl_root_makes(tmp_path, gpudiag_exe, capsys):
    """`install-service --root IMG --enable` was refused; an image builder then had to know the units' [Install]
    targets. It now makes exactly the links `systemctl --root IMG enable` makes (issue 36, item 7): compared here
    with the real systemctl on a second image, links, their targets (absolute, as the image names the unit), and
    nothing else."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for image in (ours, theirs):
        image.mkdir()
    code, out, err = run(capsys, "install-service", "--root", str(ours), "--gpudiag", str(gpudiag_exe), "--enable")
    assert (code, err) == (0, "")
    assert run(capsys, "install-service", "--root", str(theirs), "--gpudiag", str(gpudiag_exe))[0] == 0
    done = subprocess.run(["systemctl", "--root", str(theirs), "enable", *install.ENABLE], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _links(ours) == _links(theirs) == {
        "etc/systemd/system/multi-user.target.wants/gpudiag-exporter.service":
            "/etc/systemd/system/gpudiag-exporter.service",
        "etc/systemd/system/timers.target.wants/gpudiag-check.timer": "/etc/systemd/system/gpudiag-check.timer"}
    assert "systemd-sysusers --root" in out and "systemctl enable --now" not in out
    assert f"(opt-in, docs/screening.md): systemctl --root {ours} enable gpudiag-screen.timer" in out
    made = [line.split()[-1] for line in out.splitlines() if line.startswith(("written", "linked"))]
    # again: nothing changes (each file and link said unchanged), and systemctl agrees that they are enabled
    code, out, _ = run(capsys, "install-service", "--root", str(ours), "--gpudiag", str(gpudiag_exe), "--enable")
    assert code == 0 and len(made) >= 9 and out.count("unchanged") == len(made)
    states = subprocess.run(["systemctl", "--root", str(ours), "is-enabled", *install.ENABLE], capture_output=True,
                            text=True, timeout=60).stdout.split()
    assert states == ["enabled", "enabled"]


def test_enable_in_an_image_refuses_what_it_would_replace(tmp_path, gpudiag_exe, capsys):
    """A unit the image's builder masked or linked elsewhere stays as it is: one line, exit 2, as systemctl refuses."""
    wants = tmp_path / "etc" / "systemd" / "system" / "timers.target.wants"
    wants.mkdir(parents=True)
    (wants / "gpudiag-check.timer").symlink_to("/dev/null")
    code, _, err = run(capsys, "install-service", "--root", str(tmp_path), "--gpudiag", str(gpudiag_exe), "--enable")
    assert code == 2 and len(err.splitlines()) == 1 and "already exists" in err
    assert os.readlink(wants / "gpudiag-check.timer") == "/dev/null"


def test_an_unwritable_root_is_one_line(tmp_path, gpudiag_exe, capsys):
    (tmp_path / "etc").write_text("not a directory")  # where etc/systemd/system should be made
    code, out, err = run(capsys, "install-service", "--root", str(tmp_path), "--gpudiag", str(gpudiag_exe))
    assert code == 2 and err.startswith("gpudiag: error: ") and "cannot write" in err and len(err.splitlines()) == 1
    code, out, err = run(capsys, "install-service", "--root", str(tmp_path / "etc"), "--gpudiag", str(gpudiag_exe))
    assert (code, err) == (2, f"gpudiag: error: --root {tmp_path / 'etc'}: not a directory\n")


# -- which gpudiag the units name -----------------------------------------------------------------------------------


def test_the_running_console_script_is_named(tmp_path, monkeypatch):
    script = tmp_path / "venv" / "bin" / "gpudiag"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "install-service"])
    assert install.installed_command() == [str(script)]


def test_beside_the_interpreter_when_run_as_a_module(tmp_path, monkeypatch):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "gpudiag").write_text("#!/bin/sh\n")
    (venv_bin / "gpudiag").chmod(0o755)
    monkeypatch.setattr(sys, "argv", ["/somewhere/gpudiag/__main__.py"])
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python3"))
    assert install.installed_command() == [str(venv_bin / "gpudiag")]


def test_without_a_console_script_the_interpreter_runs_the_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/gpudiag/__main__.py"])
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert install.installed_command() == [str(tmp_path / "python3"), "-m", "gpudiag"]


# -- the systemd tools on a live node (here stand-ins on PATH that log their arguments) ------------------------------


@pytest.fixture
def systemd_tools(tmp_path, monkeypatch):
    bin_dir, calls = tmp_path / "fake-bin", tmp_path / "calls"
    bin_dir.mkdir()
    (tmp_path / "live").mkdir()  # the root it installs under (a root must exist: install-service never makes one)
    for tool in ("systemctl", "systemd-sysusers"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit "${{FAIL_{tool.replace("-", "_")}:-0}}"\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return calls


def test_a_live_install_creates_the_user_reloads_and_enables(tmp_path, gpudiag_exe, systemd_tools, capsys):
    root = tmp_path / "live"
    install.install(root, [str(gpudiag_exe)], dry_run=False, reload=True, enable=True, live=True)
    assert systemd_tools.read_text().splitlines() == [
        f"systemd-sysusers {root}/etc/sysusers.d/gpudiag.conf",  # the user exists before a unit names it
        "systemctl daemon-reload",
        "systemctl enable --now gpudiag-exporter.service gpudiag-check.timer",
    ]
    assert (root / "etc/systemd/system/gpudiag-check.timer").is_file()
    out = capsys.readouterr().out
    assert "Next:" not in out
    # screening loads the GPUs: its units are written, never enabled by the installer, and the way to opt in is said
    assert (root / "etc/systemd/system/gpudiag-screen.timer").is_file()
    assert "(opt-in, docs/screening.md): systemctl enable --now gpudiag-screen.timer" in out


def test_a_live_install_without_enable_says_what_starts_it(tmp_path, gpudiag_exe, systemd_tools, capsys):
    install.install(tmp_path / "live", [str(gpudiag_exe)], dry_run=False, reload=True, enable=False, live=True)
    assert systemd_tools.read_text().splitlines()[-1] == "systemctl daemon-reload"
    assert "Next: systemctl enable --now gpudiag-exporter.service gpudiag-check.timer" in capsys.readouterr().out


def test_a_failing_systemd_tool_stops_the_install_with_one_line(tmp_path, gpudiag_exe, systemd_tools, monkeypatch):
    monkeypatch.setenv("FAIL_systemd_sysusers", "1")
    with pytest.raises(install.InstallError, match=r"`systemd-sysusers .*` failed with exit status 1"):
        install.install(tmp_path / "live", [str(gpudiag_exe)], dry_run=False, reload=True, enable=True, live=True)
    assert systemd_tools.read_text().splitlines() == [
        f"systemd-sysusers {tmp_path}/live/etc/sysusers.d/gpudiag.conf"]  # nothing enabled after a failure


def test_a_node_without_systemd_is_told_so(tmp_path, gpudiag_exe, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    (tmp_path / "live").mkdir()
    with pytest.raises(install.InstallError, match="systemd-sysusers not found: is this a systemd node"):
        install.install(tmp_path / "live", [str(gpudiag_exe)], dry_run=False, reload=True, enable=False, live=True)


def test_under_root_the_gpudiag_may_exist_in_the_image_only(tmp_path, capsys):
    image = tmp_path / "image"
    inside = image / "opt/gpudiag/bin/gpudiag"
    inside.parent.mkdir(parents=True)
    inside.write_text("#!/bin/sh\n")
    inside.chmod(0o755)
    code, _, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", "/opt/gpudiag/bin/gpudiag")
    assert (code, err) == (0, "")
    (exec_start,) = settings_of(image / "etc/systemd/system/gpudiag-exporter.service")["ExecStart"]
    assert exec_start.startswith("/opt/gpudiag/bin/gpudiag serve ")
    code, _, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", "/opt/other/bin/gpudiag")
    assert code == 2 and f"no such executable (nor under {image})" in err


# -- --root IMG: every path resolved inside the image (issue 24, item 17) --------------------------------------------


def test_under_root_absolute_and_climbing_links_stay_inside_the_image(tmp_path, gpudiag_exe, capsys):
    """An image's links mean what they will mean once it is booted: /etc/sysusers.d -> /usr/lib/sysusers.d is the
    image's own /usr/lib, and ../../.. stops at the image's /. Followed as the host sees them, they wrote the units
    outside the image (here into `outside`, on a node into the build host's own /etc or /usr/lib)."""
    image, outside = tmp_path / "image", tmp_path / "outside"
    (image / "etc/systemd").mkdir(parents=True)
    (outside / "usr/lib/sysusers.d").mkdir(parents=True)
    (outside / "units").mkdir()
    (image / "etc/sysusers.d").symlink_to(outside / "usr/lib/sysusers.d")  # absolute: the image's own /tmp/…/outside
    (image / "etc/systemd/system").symlink_to("../../../../../../../../../../.." + str(outside / "units"))
    code, _, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", str(gpudiag_exe))
    assert (code, err) == (0, ""), err
    assert not any(p.is_file() for p in outside.rglob("*")), sorted(outside.rglob("*"))
    within = image / str(outside).lstrip("/")
    assert (within / "usr/lib/sysusers.d/gpudiag.conf").is_file()
    assert sorted(p.name for p in (within / "units").iterdir()) == sorted(UNITS)
    # the links are the image's, untouched
    assert os.readlink(image / "etc/sysusers.d") == str(outside / "usr/lib/sysusers.d")


def test_under_root_a_unit_that_is_a_link_out_of_the_image_is_not_written_through(tmp_path, gpudiag_exe, capsys):
    image, outside = tmp_path / "image", tmp_path / "outside.service"
    outside.write_text("the build host's file\n")
    (image / "etc/systemd/system").mkdir(parents=True)
    (image / "etc/systemd/system/gpudiag-check.service").symlink_to(outside)
    code, _, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", str(gpudiag_exe))
    assert (code, err) == (0, ""), err
    assert outside.read_text() == "the build host's file\n"
    assert "ExecStart=" in (image / str(outside).lstrip("/")).read_text()


def test_under_root_a_link_loop_is_one_line(tmp_path, gpudiag_exe, capsys):
    image = tmp_path / "image"
    image.mkdir()
    (image / "etc").symlink_to("/etc2")
    (image / "etc2").symlink_to("/etc")
    code, out, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", str(gpudiag_exe))
    assert code == 2 and "symbolic links" in err and len(err.splitlines()) == 1


def test_under_root_the_program_checked_is_the_images_own(tmp_path, capsys):
    """/opt/gpudiag -> /usr/local/gpudiag in the image: the image's /usr/local, not the host's."""
    image, host = tmp_path / "image", tmp_path / "host"
    real = image / str(host).lstrip("/") / "bin/gpudiag"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    (image / "opt").mkdir()
    (image / "opt/gpudiag").symlink_to(host)  # absolute: inside the image
    code, _, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", "/opt/gpudiag/bin/gpudiag")
    assert (code, err) == (0, ""), err
    real.unlink()
    hosts_own = host / "bin/gpudiag"  # where the link points on the build host: not what the image will run
    hosts_own.parent.mkdir(parents=True)
    hosts_own.write_text("#!/bin/sh\n")
    hosts_own.chmod(0o755)
    code, _, err = run(capsys, "install-service", "--root", str(image), "--gpudiag", "/opt/gpudiag/bin/gpudiag")
    assert code == 2 and "no such executable" in err
