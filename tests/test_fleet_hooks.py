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
from pathlib import Path

import pytest

from gpudiag.recording import save_snapshot
from tests.acceptance_nodes import nvidia_h200_8x

REPO = Path(__file__).resolve().parent.parent
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


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def bench(tmp_path):
    """Stand-ins: `gpudiag` prints $FAKE_REPORT and exits $FAKE_RC (or hangs); `scontrol` logs its calls."""
    (tmp_path / "report.json").write_text(json.dumps(FAILING_REPORT))
    gpudiag = _script(tmp_path / "gpudiag", 'echo "$@" > "$FAKE_DIR/gpudiag.args"\n'
                                            '[ "$FAKE_RC" = hang ] && exec sleep 10\n'
                                            'cat "$FAKE_DIR/report.json"; echo "gpudiag: error: $FAKE_ERR" >&2\n'
                                            'exit "$FAKE_RC"\n')
    scontrol = _script(tmp_path / "scontrol", 'echo "$@" >> "$FAKE_DIR/scontrol.calls"\n'
                                              'if [ "$1" = show ] && [ -n "${FAKE_REASON:-}" ]; then\n'
                                              '  printf "NodeName=gpu07 State=IDLE+DRAIN\\n   Reason=%s\\n" '
                                              '"$FAKE_REASON"; fi\n')
    env = {"PATH": os.environ["PATH"], "FAKE_DIR": str(tmp_path), "GPUDIAG": str(gpudiag), "SCONTROL": str(scontrol),
           "GPUDIAG_CONFIG": str(tmp_path / "none"), "SLURMD_NODENAME": "gpu07", "FAKE_ERR": "bad profile"}
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
            "check", "--format", "json", "--profile", "h200-8x", "--skip", "workload"]


def test_nothing_probed_can_be_unknown_on_mixed_fleets(bench):
    _, env = bench
    assert healthcheck(env, "--report", FAKE_RC="3", GPUDIAG_NOTHING_PROBED="unknown")[0] == 2


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


def test_the_nhc_check_dies_only_on_failure(bench):
    tmp_path, env = bench
    driver = (f'die() {{ echo "DIE $1 $2"; }}\nlog() {{ echo "LOG $1"; }}\n. "{NHC}"\n'
              f'check_gpudiag; echo "RC $?"\n')
    for rc, expected in (("0", ["RC 0"]),
                         ("1", ["DIE 1 gpudiag reboot: GPUDIAG-PCIE-WIDTH-DEGRADED 0000:3b:00.0, GPUDIAG-XID-79 "
                                "0000:19:00.0", "RC 1"]),
                         ("2", ["LOG check_gpudiag: gpudiag: configuration error, node left alone: gpudiag: error: bad "
                                "profile", "RC 0"])):
        done = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, timeout=30,
                              env={**env, "FAKE_RC": rc, "GPUDIAG_HEALTHCHECK": str(HEALTHCHECK)})
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
        # gpudiag's own deadline must end before NPD kills the plugin, or a hang reads as Unknown, not NonOK.
        assert 120 < _go_duration(rule["timeout"])


def test_the_daemonset_serves_what_its_probes_ask_for():
    yaml = pytest.importorskip("yaml")
    namespace, daemonset = list(yaml.safe_load_all(DAEMONSET.read_text()))
    assert (namespace["kind"], daemonset["kind"]) == ("Namespace", "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["args"][:3] == ["serve", "--listen", ":9858"]
    assert container["ports"][0]["containerPort"] == 9858
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert daemonset["spec"]["selector"]["matchLabels"] == daemonset["spec"]["template"]["metadata"]["labels"]


@pytest.mark.skipif(not shutil.which("kubernetes-validate"), reason="kubernetes-validate is not installed (pip)")
def test_the_daemonset_validates_against_the_kubernetes_schemas():
    done = subprocess.run(["kubernetes-validate", "--strict", str(DAEMONSET)], capture_output=True, text=True)
    assert done.returncode == 0 and "did not validate" not in done.stdout + done.stderr, done.stdout + done.stderr
