"""The systemd units: they pass `systemd-analyze verify`, keep their hardening, and call real gpudiag options.

verify insists that ExecStart's program exists, and the units name the installed path (/usr/local/bin/gpudiag),
which a test machine does not have: a copy is verified with that path replaced by this interpreter running
`-m gpudiag`; nothing else in the units is changed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.as_user import GPUDIAG, NODE_EXPORTER, needs_root, shared_tmp, as_user
from tests.support.paths import FIXTURES, REPO

SYSTEMD = REPO / "systemd"
UNITS = ("gpudiag-exporter.service", "gpudiag-check.service", "gpudiag-check.timer", "gpudiag.socket")
INSTALLED = "/usr/local/bin/gpudiag"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (package systemd)")
# `systemd-analyze security` exposure as measured. The check service scored 1.1 with PrivateNetwork=yes; without it
# (issue 33, item 1: its private sysfs hid the RoCE netdevs) the analyser adds 0.5 for "access to the host's
# network", which RestrictAddressFamilies=AF_UNIX and IPAddressDeny=any still deny (it does not count them there).
EXPOSURE_LIMITS = [("gpudiag-exporter.service", 2.0), ("gpudiag-check.service", 1.6)]


def settings(unit: str) -> dict[str, list[str]]:
    return settings_of(SYSTEMD / unit)


def settings_of(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


@pytest.fixture
def runnable(tmp_path) -> Path:
    for unit in UNITS:
        text = (SYSTEMD / unit).read_text().replace(INSTALLED, f"{sys.executable} -m gpudiag")
        (tmp_path / unit).write_text(text)
    return tmp_path


@needs_analyze
def test_units_pass_systemd_analyze_verify(runnable):
    result = subprocess.run([ANALYZE, "verify", "--man=no", *(str(runnable / u) for u in UNITS)],
                            capture_output=True, text=True, timeout=60, cwd=runnable)
    # verify exits 0 on unknown keys too, with a warning: any output at all is a finding
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_analyze
def test_the_documented_address_filter_verifies_when_uncommented(runnable):
    unit = runnable / "gpudiag-exporter.service"
    text = unit.read_text()
    assert "#IPAddressDeny=any\n" in text and "#IPAddressAllow=" in text
    unit.write_text(text.replace("#IPAddressDeny=", "IPAddressDeny=").replace("#IPAddressAllow=", "IPAddressAllow="))
    assert settings_of(unit)["IPAddressDeny"] == ["any"]
    result = subprocess.run([ANALYZE, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60,
                            cwd=runnable)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_exporter_cannot_take_more_than_one_core():
    # issue 10, item 6: 16 wrong-password clients took 189 % CPU; bcrypt is serialised now, and the unit caps the rest
    (quota,) = settings("gpudiag-exporter.service")["CPUQuota"]
    assert quota.endswith("%") and 0 < int(quota[:-1]) <= 100


@needs_analyze
@pytest.mark.parametrize("unit,limit", EXPOSURE_LIMITS)
def test_exposure_stays_where_it_was_measured(runnable, unit, limit):
    result = subprocess.run([ANALYZE, "security", "--offline=true", "--no-pager", str(runnable / unit)],
                            capture_output=True, text=True, timeout=60, cwd=runnable)
    exposure = float(re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout).group(1))
    assert exposure <= limit, result.stdout


@pytest.mark.parametrize("unit", ["gpudiag-exporter.service", "gpudiag-check.service"])
def test_least_privilege_settings(unit):
    s = settings(unit)
    assert s["User"] == ["gpudiag"] and s["NoNewPrivileges"] == ["yes"] and s["ProtectSystem"] == ["strict"]
    assert s["CapabilityBoundingSet"] == ["CAP_SYSLOG"] == s["AmbientCapabilities"]  # for /dev/kmsg only
    assert s["DevicePolicy"] == ["closed"]
    assert all(rule.split()[-1] in ("r", "rw") for rule in s["DeviceAllow"])  # never "m" (mknod)


def test_exporter_serves_network_and_check_service_has_none():
    assert settings("gpudiag-exporter.service")["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    check = settings("gpudiag-check.service")
    assert check["RestrictAddressFamilies"] == ["AF_UNIX"] and check["IPAddressDeny"] == ["any"]
    # Not PrivateNetwork=: its private sysfs hides the host's netdevs, which the RoCE checks read (issue 33, item 1;
    # tests/e2e/test_as_deployed.py's h200-roce-interface-down passed under it)
    assert "PrivateNetwork" not in check


@pytest.mark.parametrize("unit", ["gpudiag-exporter.service", "gpudiag-check.service"])
def test_root_records_what_the_unit_cannot_read_before_it_starts(unit):
    """ExecStartPre=-+: root, outside the sandbox ("+"), and a failure does not keep the service down ("-")."""
    (pre,) = settings(unit)["ExecStartPre"]
    argv = shlex.split(pre)
    assert argv[0] == f"-+{INSTALLED}" and argv[1] == "root-facts"
    assert argv[argv.index("--state-dir") + 1] == f"/var/lib/{settings(unit)['StateDirectory'][0]}"


@pytest.mark.parametrize("unit", ["gpudiag-exporter.service", "gpudiag-check.service"])
def test_exec_start_uses_options_the_cli_has(unit):
    (exec_start,) = settings(unit)["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == INSTALLED
    command = argv[1]
    flags = [arg for arg in argv[2:] if arg.startswith("--")]
    assert flags
    help_text = subprocess.run([sys.executable, "-m", "gpudiag", command, "--help"], capture_output=True, text=True,
                               timeout=60, cwd=SYSTEMD.parent).stdout
    for flag in flags:
        assert flag in help_text, f"{unit}: gpudiag {command} has no {flag}"


def test_check_service_writes_where_its_state_directory_is():
    check = settings("gpudiag-check.service")
    output = shlex.split(check["ExecStart"][0])[shlex.split(check["ExecStart"][0]).index("--output") + 1]
    assert output == f"/var/lib/{check['StateDirectory'][0]}/gpudiag.prom"
    assert check["StateDirectoryMode"] == ["0755"]  # node_exporter, another user, must read it


@needs_root
def test_node_exporter_reads_the_prom_file_whichever_unit_set_the_shared_directory_up():
    """Both units keep /var/lib/gpudiag (StateDirectory=gpudiag): the timer's textfile, the exporter's journal.
    systemd gives the directory the mode of the unit that sets it up, so the two must agree; they did not (0750 and
    0755), and after the exporter started node_exporter (another user) could not read gpudiag.prom (issue 24, item
    20). Here each unit's start is played as systemd plays it (the directory owned by the service user with the
    unit's StateDirectoryMode, the program under its User= and UMask=), then node_exporter's user reads."""
    from gpudiag.exporter.textfile import write_textfile
    from gpudiag.service.journal import Journal
    from tests.support.snapshots import nvidia_h200_node

    exporter, check = settings("gpudiag-exporter.service"), settings("gpudiag-check.service")
    assert exporter["StateDirectory"] == check["StateDirectory"] == ["gpudiag"]
    assert exporter["StateDirectoryMode"] == check["StateDirectoryMode"]
    top = shared_tmp()
    try:
        state = top / "var/lib/gpudiag"
        state.mkdir(parents=True)
        os.chown(state, GPUDIAG, GPUDIAG)

        def start(unit: dict, work) -> None:
            state.chmod(int(unit["StateDirectoryMode"][0], 8))
            as_user(GPUDIAG, work, umask=int(unit["UMask"][0], 8))

        snapshot = nvidia_h200_node()
        start(check, lambda: write_textfile(state / "gpudiag.prom", snapshot, []))
        start(exporter, lambda: Journal(state).load().append([{"time": "2026-12-01T02:00:00+00:00", "kind": "xid",
                                                                "event": "event", "code": 79}]))
        read = as_user(NODE_EXPORTER, lambda: (state / "gpudiag.prom").read_text())
        assert "gpudiag_build_info" in read
        # what the directory's mode lets node_exporter see, the journal's own mode keeps from it: root-only
        # kernel-log lines are quoted there
        with pytest.raises(PermissionError):
            as_user(NODE_EXPORTER, lambda: (state / "journal.jsonl").read_text())
    finally:
        shutil.rmtree(top)


def test_timer_runs_the_check_service():
    timer = settings("gpudiag-check.timer")
    assert timer["OnUnitActiveSec"] == ["5min"] and timer["WantedBy"] == ["timers.target"]
    assert (SYSTEMD / "gpudiag-check.service").exists()  # the timer's implicit Unit=


@pytest.mark.parametrize("unit", ["gpudiag-exporter.service", "gpudiag-check.service"])
def test_nvidia_device_groups_of_the_lab_driver_are_allowed(unit):
    # What /proc/devices lists on the lab's H200s (580 open kernel module): NVML opens /dev/nvidiactl and
    # /dev/nvidia<N> (major 195, "nvidia" / "nvidiactl") and /dev/nvidia-caps; CUDA's uvm and the fabric devices
    # are not needed to read the GPUs.
    groups = [line.split()[1] for line in (FIXTURES / "h200x2/root/proc/devices").read_text().splitlines()]
    allowed = {rule.split()[0].removeprefix("char-") for rule in settings(unit)["DeviceAllow"]}
    needed = {"nvidia", "nvidiactl", "nvidia-caps"}
    assert needed <= set(groups) and needed <= allowed
