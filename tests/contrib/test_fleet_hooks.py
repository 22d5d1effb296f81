"""The fleet hooks in contrib/: the health-check wrapper's exit-code mapping and Slurm draining (with stand-ins for
gpudiag and scontrol, and end to end with the real gpudiag on a recording), the NHC check, the node-problem-detector
plugin config and the exporter DaemonSet, linted with whatever validators are installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudiag.model.recording import save_snapshot
from tests.support.acceptance_nodes import nvidia_h200_8x
from tests.support.paths import REPO

CONTRIB = REPO / "contrib"
HEALTHCHECK = CONTRIB / "gpudiag-healthcheck.sh"
NHC = CONTRIB / "slurm" / "gpudiag.nhc"
NPD_CONFIG = CONTRIB / "kubernetes" / "node-problem-detector" / "gpudiag-monitor.json"
DAEMONSET = CONTRIB / "kubernetes" / "gpudiag-exporter.yaml"

FAILING_REPORT = {"schema_version": 1, "status": "fail", "results": [
    {"check": "pcie.link_width", "status": "fail", "device": {"index": 1, "pci_bus_id": "0000:3b:00.0"},
     "action": "drain", "fault_code": "GPUDIAG-PCIE-WIDTH-DEGRADED"},
    {"check": "kernel_log.xid", "status": "fail", "device": {"index": 0, "pci_bus_id": "0000:19:00.0"},
     "action": "reboot", "fault_code": "GPUDIAG-XID-79"},
    {"check": "thermal.temperature", "status": "warn", "device": {"index": 0, "pci_bus_id": "0000:19:00.0"},
     "action": "watch", "fault_code": "GPUDIAG-THERMAL-MARGIN"},
]}
PASSING_REPORT = {"schema_version": 1, "status": "warn", "results": [
    {"check": "thermal.temperature", "status": "warn", "device": {"index": 0, "pci_bus_id": "0000:19:00.0"},
     "action": "watch", "fault_code": "GPUDIAG-THERMAL-MARGIN"}]}
# Exit 0 with checks that could not decide: the kernel log unreadable hides every Xid.
UNDECIDED_REPORT = {"schema_version": 1, "status": "unknown", "results": [
    {"check": "pcie.link_width", "status": "pass", "device": {"index": 0, "pci_bus_id": "0000:19:00.0"}},
    {"check": "kernel_log.xid", "status": "unknown", "device": None, "action": "none", "fault_code": None,
     "message": "cannot read /dev/kmsg: Operation not permitted\x1b[2J"}]}


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def bench(tmp_path):
    """Stand-ins: `gpudiag` prints $FAKE_REPORT (by default the failing report, the passing one for exit 0) and
    exits $FAKE_RC (or hangs); `scontrol` logs its calls."""
    for name, report in (("report.json", FAILING_REPORT), ("pass.json", PASSING_REPORT),
                         ("unknown.json", UNDECIDED_REPORT)):
        (tmp_path / name).write_text(json.dumps(report))
    gpudiag = _script(tmp_path / "gpudiag", 'echo "$@" > "$FAKE_DIR/gpudiag.args"\n'
                                            '[ "$FAKE_RC" = hang ] && exec sleep 10\n'
                                            '[ "$FAKE_RC" = stubborn ] && trap "" TERM && sleep 10\n'
                                            'default=report.json; [ "$FAKE_RC" = 0 ] && default=pass.json\n'
                                            'cat "$FAKE_DIR/${FAKE_REPORT:-$default}"\n'
                                            'echo "gpudiag: error: $FAKE_ERR" >&2\n'
                                            'exit "$FAKE_RC"\n')
    scontrol = _script(tmp_path / "scontrol", 'echo "$@" >> "$FAKE_DIR/scontrol.calls"\n'
                                              'if [ "$1" = show ] && [ -n "${FAKE_REASON:-}" ]; then\n'
                                              '  printf "NodeName=gpu07 State=IDLE+DRAIN\\n   Reason=%s\\n" '
                                              '"$FAKE_REASON"; fi\n')
    env = {"PATH": os.environ["PATH"], "FAKE_DIR": str(tmp_path), "GPUDIAG": str(gpudiag), "SCONTROL": str(scontrol),
           "GPUDIAG_CONFIG": str(tmp_path / "none"), "SLURMD_NODENAME": "gpu07", "FAKE_ERR": "bad profile",
           "GPUDIAG_STATE": str(tmp_path / "state" / "healthcheck.state")}
    return tmp_path, env


def healthcheck(env, *args, **overrides):
    done = subprocess.run(["bash", str(HEALTHCHECK), *args], env={**env, **overrides}, capture_output=True,
                          text=True, timeout=30)
    return done.returncode, done.stdout.strip()


@pytest.mark.parametrize("gpudiag_rc, expected, line", [
    ("0", 0, "gpudiag: all checks pass (profile h200-8x)"),
    ("1", 1, "gpudiag reboot: GPUDIAG-PCIE-WIDTH-DEGRADED 0000:3b:00.0, GPUDIAG-XID-79 0000:19:00.0"),
    ("2", 2, "gpudiag: configuration error, node left alone: gpudiag: error: bad profile"),
    ("3", 1, "gpudiag: no GPU could be probed (gpudiag: error: bad profile)"),
    ("4", 2, "gpudiag: could not judge the node (exit 4): gpudiag: error: bad profile"),
    ("hang", 1, "gpudiag: the check hung for more than 1s (a GPU or driver call)"),
])
def test_report_mode_maps_gpudiag_exit_codes_to_the_plugin_protocol(bench, gpudiag_rc, expected, line):
    tmp_path, env = bench
    code, out = healthcheck(env, "--report", FAKE_RC=gpudiag_rc, GPUDIAG_TIMEOUT="1", GPUDIAG_PROFILE="h200-8x")
    assert (code, out) == (expected, line)
    if gpudiag_rc != "hang":
        assert (tmp_path / "gpudiag.args").read_text().split() == [
            "check", "--format", "json", "--timeout", "1", "--profile", "h200-8x", "--skip", "workload"]


def test_nothing_probed_can_be_unknown_on_mixed_fleets(bench):
    _, env = bench
    assert healthcheck(env, "--report", FAKE_RC="3", GPUDIAG_NOTHING_PROBED="unknown")[0] == 2


UNDECIDED_LINE = "gpudiag undecided: kernel_log.xid (cannot read /dev/kmsg: Operation not permitted [2J)"


@pytest.mark.parametrize("setting, expected", [(None, 2), ("report", 2), ("drain", 1)])
def test_an_undecided_check_is_never_ok(bench, setting, expected):
    """Exit 0 with status unknown (an unreadable /dev/kmsg hides every Xid) was reported OK."""
    _, env = bench
    extra = {"GPUDIAG_UNKNOWN": setting} if setting else {}
    # the message's terminal escape does not reach the scheduler's reason
    assert healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="unknown.json", **extra) == (expected, UNDECIDED_LINE)


def test_exit_0_counts_only_with_a_passing_report(bench):
    _, env = bench
    assert healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="pass.json") == (0, "gpudiag: all checks pass")
    code, line = healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="missing.json")  # no report on stdout
    assert code == 2 and line.startswith("gpudiag: could not judge the node (exit 0, report unreadable:")


def test_an_undecided_run_never_clears_a_failure(bench):
    tmp_path, env = bench
    failure = "gpudiag reboot: GPUDIAG-PCIE-WIDTH-DEGRADED 0000:3b:00.0, GPUDIAG-XID-79 0000:19:00.0"
    kept = (1, f"{failure} (still: this run could not decide)")
    assert healthcheck(env, "--report", FAKE_RC="1") == (1, failure)
    assert healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="unknown.json") == kept
    assert healthcheck(env, "--report", FAKE_RC="4") == kept  # a gpudiag bug does not clear it either
    assert healthcheck(env, "--report", GPUDIAG_TIMEOUT="soon") == kept
    assert healthcheck(env, "--report", FAKE_RC="0")[0] == 0  # a decided pass does
    assert healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="unknown.json") == (2, UNDECIDED_LINE)
    # a state file that is not ours, planted as a symlink, is not believed
    state = tmp_path / "state" / "healthcheck.state"
    (tmp_path / "planted").write_text("1\ngpudiag rma: planted\n")
    state.unlink()
    state.symlink_to(tmp_path / "planted")
    assert healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="unknown.json") == (2, UNDECIDED_LINE)
    # without a state file an undecided run is only undecided
    healthcheck(env, "--report", FAKE_RC="1")
    assert healthcheck(env, "--report", FAKE_RC="0", FAKE_REPORT="unknown.json", GPUDIAG_STATE="")[0] == 2


def test_slurm_mode_neither_drains_nor_resumes_on_an_undecided_run(bench):
    tmp_path, env = bench
    calls = tmp_path / "scontrol.calls"
    healthcheck(env, FAKE_RC="0", FAKE_REPORT="unknown.json", GPUDIAG_RESUME="1",
                FAKE_REASON="gpudiag drain: GPUDIAG-PCIE-DOWNTRAINED")
    assert not calls.exists()  # not drained, and the node gpudiag drained earlier is not resumed
    healthcheck(env, FAKE_RC="1")
    calls.unlink()
    healthcheck(env, FAKE_RC="0", FAKE_REPORT="unknown.json")  # after a failure (and, say, an admin's resume)
    assert not calls.exists()
    healthcheck(env, FAKE_RC="0", FAKE_REPORT="unknown.json", GPUDIAG_UNKNOWN="drain")
    assert calls.read_text().splitlines() == ["show node gpu07",
                                              f"update nodename=gpu07 state=drain reason={UNDECIDED_LINE}"]


def worst_case_seconds() -> int:
    """How long the script lets gpudiag run by default: GPUDIAG_TIMEOUT, then SIGKILL after --kill-after."""
    script = HEALTHCHECK.read_text()
    default = int(re.search(r"GPUDIAG_TIMEOUT=\$\{GPUDIAG_TIMEOUT:-(\d+)\}", script).group(1))
    (kill_after,) = {int(k) for k in re.findall(r"timeout --kill-after=(\d+) \"\$GPUDIAG_TIMEOUT\"", script)}
    return default + kill_after


@pytest.mark.slow
def test_the_run_stays_inside_nhcs_and_slurms_limits(bench):
    """NHC's watchdog kills its whole run after 30 s (nhc: TIMEOUT=${TIMEOUT:-30}); slurmd kills a
    HealthCheckProgram after 60 s (slurm.conf(5)). gpudiag gets a probe deadline of its own inside the script's."""
    tmp_path, env = bench
    assert worst_case_seconds() <= 25  # room for NHC's other checks within its 30 s
    healthcheck(env, "--report", FAKE_RC="0")
    args = (tmp_path / "gpudiag.args").read_text().split()
    default = worst_case_seconds() - 2
    assert args[args.index("--timeout") + 1] == str(default - 5)
    # a timeout past the schedulers' limits is refused, not obeyed
    assert healthcheck(env, "--report", FAKE_RC="0", GPUDIAG_TIMEOUT="120") == (
        2, "gpudiag: configuration error, node left alone: GPUDIAG_TIMEOUT=120 is not 1 to 55 seconds")
    # a gpudiag that ignores SIGTERM is killed 2 s later: reported not OK, within the bound
    started = time.monotonic()
    assert healthcheck(env, "--report", FAKE_RC="stubborn", GPUDIAG_TIMEOUT="1") == (
        1, "gpudiag: the check hung for more than 1s (a GPU or driver call)")
    assert time.monotonic() - started < 1 + 2 + 2


def test_slurm_mode_drains_with_the_reason_and_only_on_failure(bench):
    tmp_path, env = bench
    calls = tmp_path / "scontrol.calls"
    assert healthcheck(env, FAKE_RC="1", GPUDIAG_BASELINE="/etc/gpudiag/golden.json")[0] == 0  # slurmd ignores it
    assert calls.read_text().splitlines() == [
        "show node gpu07",
        "update nodename=gpu07 state=drain reason=gpudiag reboot: GPUDIAG-PCIE-WIDTH-DEGRADED 0000:3b:00.0, "
        "GPUDIAG-XID-79 0000:19:00.0"]
    assert "--baseline /etc/gpudiag/golden.json" in (tmp_path / "gpudiag.args").read_text()
    for rc in ("0", "2", "4"):
        calls.unlink(missing_ok=True)
        healthcheck(env, FAKE_RC=rc)
        assert "update" not in (calls.read_text() if calls.exists() else "")


def test_slurm_mode_leaves_an_admins_drain_alone_and_resumes_its_own(bench):
    tmp_path, env = bench
    calls = tmp_path / "scontrol.calls"
    healthcheck(env, FAKE_RC="1", FAKE_REASON="RMA ticket 4711 [root@2026-11-30T10:00:00]")
    assert calls.read_text().splitlines() == ["show node gpu07"]
    calls.unlink()
    healthcheck(env, FAKE_RC="0", GPUDIAG_RESUME="1", FAKE_REASON="gpudiag drain: GPUDIAG-PCIE-DOWNTRAINED")
    assert calls.read_text().splitlines() == ["show node gpu07", "update nodename=gpu07 state=resume"]
    calls.unlink()
    healthcheck(env, FAKE_RC="0", GPUDIAG_RESUME="1", FAKE_REASON="RMA ticket 4711")
    assert calls.read_text().splitlines() == ["show node gpu07"]


def test_the_settings_file_is_read(bench):
    tmp_path, env = bench
    (tmp_path / "settings").write_text('GPUDIAG_PROFILE=mi300x-8x\nGPUDIAG_ARGS="--skip workload,active"\n')
    healthcheck(env, "--report", FAKE_RC="0", GPUDIAG_CONFIG=str(tmp_path / "settings"))
    assert (tmp_path / "gpudiag.args").read_text().split()[-3:] == ["mi300x-8x", "--skip", "workload,active"]


def test_end_to_end_with_the_real_gpudiag(bench):
    tmp_path, env = bench
    save_snapshot(nvidia_h200_8x(), tmp_path / "node.json")
    real = _script(tmp_path / "real-gpudiag", f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m gpudiag "$@"\n')
    env = {**env, "GPUDIAG": str(real), "GPUDIAG_ARGS": f"--replay {tmp_path / 'node.json'}"}
    assert healthcheck(env, "--report", GPUDIAG_PROFILE="h200-8x") == (0, "gpudiag: all checks pass (profile h200-8x)")
    code, line = healthcheck(env, "--report", GPUDIAG_PROFILE="h200-8x",
                             GPUDIAG_ARGS=f"--replay {tmp_path / 'node.json'} -p expected_links_per_gpu=20")
    assert code == 1
    assert line == ("gpudiag reset: GPUDIAG-FABRIC-LINK-DOWN 0000:19:00.0, GPUDIAG-FABRIC-LINK-DOWN 0000:3b:00.0, "
                    "GPUDIAG-FABRIC-LINK-DOWN 0000:4c:00.0 (+5 more)")


def test_the_reason_names_the_cause_and_its_bus_id_not_what_follows_from_it(bench):
    """Issue 27: a lost GPU's reason must say which GPU to pull. The short GPU count and the Xid 79 that follow
    from the loss (the report's caused_by) are not named beside it; a GPU without a bus ID is named by index."""
    from gpudiag.model import ErrorKind, ProbeError
    from gpudiag.probe.kernel_log.events import parse_event

    tmp_path, env = bench
    snapshot = nvidia_h200_8x()
    lost = snapshot.devices[4]
    lost.reachable = False
    lost.errors.append(ProbeError("nvml.device", ErrorKind.GPU_LOST, "the GPU is lost"))
    snapshot.kernel_log.events.append(parse_event(f"NVRM: Xid (PCI:{lost.pci_bus_id[:-2]}): 79, pid=4242, "
                                                  f"name=python3, Ch 00000008"))
    save_snapshot(snapshot, tmp_path / "node.json")
    real = _script(tmp_path / "real-gpudiag", f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m gpudiag "$@"\n')
    env = {**env, "GPUDIAG": str(real), "GPUDIAG_ARGS": f"--replay {tmp_path / 'node.json'}"}
    assert healthcheck(env, "--report", GPUDIAG_PROFILE="h200-8x") == (
        1, f"gpudiag reboot: GPUDIAG-INVENTORY-GPU-MISSING {lost.pci_bus_id}")
    report = {"schema_version": 1, "status": "fail", "results": [
        {"check": "inventory.gpu_count", "status": "fail", "device": None, "action": "drain",
         "fault_code": "GPUDIAG-INVENTORY-GPU-COUNT", "caused_by": ["inventory.gpus_visible GPU 4"]},
        {"check": "inventory.gpus_visible", "status": "fail", "device": {"index": 4, "pci_bus_id": None},
         "action": "reboot", "fault_code": "GPUDIAG-INVENTORY-GPU-MISSING", "caused_by": []}]}
    (tmp_path / "lost.json").write_text(json.dumps(report))
    assert healthcheck(bench[1], "--report", FAKE_RC="1", FAKE_REPORT="lost.json") == (
        1, "gpudiag reboot: GPUDIAG-INVENTORY-GPU-MISSING GPU 4")


def test_the_nhc_check_dies_only_on_failure(bench):
    tmp_path, env = bench
    driver = (f'die() {{ echo "DIE $1 $2"; }}\nlog() {{ echo "LOG $1"; }}\n. "{NHC}"\n'
              f'check_gpudiag; echo "RC $?"\n')
    failure = "gpudiag reboot: GPUDIAG-PCIE-WIDTH-DEGRADED 0000:3b:00.0, GPUDIAG-XID-79 0000:19:00.0"
    undecided = "gpudiag undecided: kernel_log.xid (cannot read /dev/kmsg: Operation not permitted [2J)"
    for rc, report, expected in (
            ("0", "pass.json", ["RC 0"]),
            ("2", None, ["LOG check_gpudiag: not OK, undecided (node left as it is): gpudiag: configuration error, "
                         "node left alone: gpudiag: error: bad profile", "RC 0"]),
            ("0", "unknown.json", [f"LOG check_gpudiag: not OK, undecided (node left as it is): {undecided}", "RC 0"]),
            ("1", None, [f"DIE 1 {failure}", "RC 1"]),
            # NHC resumes a node it drained once every check returns 0: an undecided run must not be that 0
            ("0", "unknown.json", [f"DIE 1 {failure} (still: this run could not decide)", "RC 1"]),
            ("2", None, [f"DIE 1 {failure} (still: this run could not decide)", "RC 1"]),
            ("0", "pass.json", ["RC 0"])):
        done = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, timeout=30,
                              env={**env, "FAKE_RC": rc, "GPUDIAG_HEALTHCHECK": str(HEALTHCHECK),
                                   **({"FAKE_REPORT": report} if report else {})})
        assert done.stdout.splitlines() == expected


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed (apt-get install shellcheck)")
def test_the_scripts_pass_shellcheck():
    subprocess.run(["shellcheck", "-s", "bash", str(HEALTHCHECK), str(NHC)], check=True)


def _go_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    assert match, f"not a duration node-problem-detector parses: {text!r}"
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def test_the_npd_plugin_config_passes_npds_own_validation():
    """The rules of CustomPluginConfig.Validate (pkg/custompluginmonitor/types/config.go)."""
    config = json.loads(NPD_CONFIG.read_text())
    assert config["plugin"] == "custom"
    global_timeout = _go_duration(config["pluginConfig"]["timeout"])
    _go_duration(config["pluginConfig"]["invoke_interval"])
    conditions = {c["type"] for c in config["conditions"]}
    for rule in config["rules"]:
        assert _go_duration(rule["timeout"]) <= global_timeout
        assert rule["type"] == "permanent" and rule["condition"] in conditions
        assert Path(rule["path"]).name == HEALTHCHECK.name and rule["args"] == ["--report"]
        # the script's own deadline must end before NPD kills the plugin, or a hang reads as Unknown, not NonOK.
        assert worst_case_seconds() < _go_duration(rule["timeout"])


def test_the_daemonset_serves_what_its_probes_ask_for():
    yaml = pytest.importorskip("yaml")
    namespace, daemonset = list(yaml.safe_load_all(DAEMONSET.read_text()))
    assert (namespace["kind"], daemonset["kind"]) == ("Namespace", "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["args"][:3] == ["serve", "--listen", ":9858"]
    assert container["ports"][0]["containerPort"] == 9858
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}  # never restart on a hung GPU
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert daemonset["spec"]["selector"]["matchLabels"] == daemonset["spec"]["template"]["metadata"]["labels"]


def test_the_daemonset_validates_against_the_kubernetes_schemas():
    # kubernetes-validate is a declared test extra: run it from this interpreter's environment, not whatever PATH finds
    # (`.venv/bin/python -m pytest` has no .venv/bin on PATH, so the test used to skip silently); missing, it fails.
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", str(DAEMONSET)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "did not validate" not in done.stdout + done.stderr, done.stdout + done.stderr


# -- issue 24, item 16: no drain without a readable failing report; the report kept private ---------------------------


def test_exit_1_without_a_failing_report_is_unknown_and_never_drains(bench):
    """gpudiag exited 1 and wrote nothing (it could not write its report): the hook drained a healthy node as "a
    check failed"."""
    tmp_path, env = bench
    code, line = healthcheck(env, "--report", FAKE_RC="1", FAKE_REPORT="missing.json")
    assert code == 2 and line.startswith("gpudiag: could not judge the node (exit 1 without a failing report:")
    code, line = healthcheck(env, "--report", FAKE_RC="1", FAKE_REPORT="pass.json")  # exit 1, status warn
    assert code == 2 and "exit 1 without a failing report" in line
    healthcheck(env, FAKE_RC="1", FAKE_REPORT="missing.json")  # Slurm mode
    assert not (tmp_path / "scontrol.calls").exists()


def test_the_report_is_kept_in_a_directory_only_root_can_read(bench):
    tmp_path, env = bench
    where = tmp_path / "where"
    spy = _script(tmp_path / "spy-gpudiag", f'out=$(readlink /proc/$$/fd/1); dir=$(dirname "$out")\n'
                                            f'stat -c "%a %U" "$dir" > "{where}"\n'
                                            f'cat "{tmp_path / "pass.json"}"\n')
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)  # /tmp as it is
    assert healthcheck(env, "--report", GPUDIAG=str(spy), TMPDIR=str(shared))[0] == 0
    mode, owner = where.read_text().split()
    assert mode == "700" and owner == "root" and list(shared.iterdir()) == []  # and cleaned up


def test_no_private_directory_is_unknown_not_a_drain(bench):
    tmp_path, env = bench
    assert healthcheck(env, "--report", FAKE_RC="0", TMPDIR="/dev/null/none") == (
        2, "gpudiag: could not judge the node: cannot create a private directory in /dev/null/none for the report")
    healthcheck(env, FAKE_RC="1", TMPDIR="/dev/null/none")
    assert not (tmp_path / "scontrol.calls").exists()


def _can_mount_tmpfs() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and a private mount namespace (unshare -m)")
def test_a_full_tmpdir_under_the_real_gpudiag_through_the_service_is_unknown(bench, tmp_path):
    """The issue's case end to end: the hook runs the real gpudiag, which takes the service's fast path over a fake
    healthy node, and TMPDIR is a full tmpfs (private to this run: unshare -m). gpudiag exited 1 (an uncaught
    ENOSPC) and the hook drained the node; now gpudiag exits 4 and the hook leaves the node alone."""
    from tests.support.exporter_node import fake_root
    from tests.support.fakes.fake_nvml import FakeNode, installed
    from tests.support.service import running_service

    bench_dir, env = bench
    node_root = tmp_path / "node"
    node = FakeNode.hgx_h200(1)
    fake_root(node_root, node)
    real = _script(bench_dir / "real-gpudiag", f'PYTHONPATH="{REPO}" exec "{sys.executable}" -m gpudiag "$@"\n')
    full = bench_dir / "full"
    full.mkdir()
    command = (f'mount -t tmpfs -o size=64k tmpfs "{full}" && dd if=/dev/zero of="{full}/fill" bs=4k 2>/dev/null;'
               f' exec bash "{HEALTHCHECK}" "$@"')
    with installed(node), running_service(node_root):
        for mode in ("--report", "drain"):
            done = subprocess.run(["unshare", "-m", "sh", "-c", command, "sh", *([mode] if mode == "--report" else [])],
                                  env={**env, "GPUDIAG": str(real), "TMPDIR": str(full),
                                       "GPUDIAG_ARGS": f"--root {node_root} --skip workload"},
                                  capture_output=True, text=True, timeout=60)
            if mode == "--report":
                assert done.returncode == 2, (done.stdout, done.stderr)
                assert done.stdout.strip() == ("gpudiag: could not judge the node (exit 4): gpudiag: error: cannot "
                                               "write the report to standard output: No space left on device")
    assert not (bench_dir / "scontrol.calls").exists()  # Slurm mode: neither drained nor resumed
    # and with room, the same run is a pass through the service
    with installed(node), running_service(node_root):
        code, line = healthcheck(env, "--report", GPUDIAG=str(real), GPUDIAG_ARGS=f"--root {node_root} --skip workload")
    assert (code, line) == (0, "gpudiag: all checks pass")
