"""The network family as it ships: the probe part (gpudiag/probe/network/part.py) run by the Collector, `gpudiag
check --json` and the exporter's textfile over the fake NIC trees of tests/support/rdma_tree*.py (built from public
recordings, cited there): each fault fails or warns on its NIC or GPU, healthy nodes pass with nothing unknown, a
node without RDMA devices skips the family with the reason and fails only when the profile expects NICs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag.checks import run_checks
from gpudiag.expect import DEFAULT_EXPECTATIONS
from gpudiag.model import NodeSnapshot, Status
from gpudiag.probe.collector import CollectOptions, Collector
from gpudiag.probe.network import part as network_part
from gpudiag.probe.network import rdma
from tests.support import rdma_tree
from tests.support.network_nodes import clear_counters
from tests.support.paths import REPO
from tests.support.rdma_tree_amd import mi300x_thor2, mi355x_pollara

FAMILY = ("network", "topology.gpu_nic_affinity")
# A kernel log with nothing in it: the flap check reads it (an absent /dev/kmsg under a fake root is unknown).
QUIET_LOG = "[    5.000000] Linux version 6.8.0-60-generic\n"


def collector(root: Path) -> Collector:
    return Collector(CollectOptions(root=root, timeout_seconds=10, parts=frozenset({"network"})))


def check_json(root: Path, tmp_path: Path, *args: str, log: str = QUIET_LOG) -> tuple[int, dict]:
    (tmp_path / "dmesg.txt").write_text(log)
    done = subprocess.run([sys.executable, "-m", "gpudiag", "check", "--root", str(root), "--json",
                           "--kernel-log", str(tmp_path / "dmesg.txt"), "--only", ",".join(FAMILY), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def bad(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["status"] not in ("pass", "skip")]


def healthy_h100(root: Path) -> rdma_tree.Node:
    return clear_counters(rdma_tree.hgx_h100_ib(root))


# -- the probe part --------------------------------------------------------------------------------------------


def test_the_collector_reads_the_nics_through_the_part_and_carries_counters_between_collections(tmp_path):
    healthy_h100(tmp_path)
    with collector(tmp_path) as c:
        first = c.collect()
        second = c.collect()
    assert len(first.network.devices) == 9 and first.network.previous is None
    assert second.network.previous is not None and second.network.previous.of("mlx5_0", 1) is not None
    (run,) = [r for r in first.collectors if r.name == "network"]
    assert run.success
    with collector(tmp_path) as fresh:  # a one-shot check: no reading before it
        assert fresh.collect().network.previous is None


def test_a_selection_without_the_family_does_not_read_the_nics(tmp_path):
    healthy_h100(tmp_path)
    with Collector(CollectOptions(root=tmp_path, timeout_seconds=10, parts=frozenset())) as c:
        assert c.collect().network is None


def test_a_part_that_fails_leaves_the_checks_unknown_never_no_nics(tmp_path, monkeypatch):
    healthy_h100(tmp_path)

    def broken(*args, **kwargs):
        raise OSError("sysfs went away")

    monkeypatch.setattr(rdma, "read_network", broken)
    with collector(tmp_path) as c:
        snap = c.collect()
    assert not snap.network.readable and "sysfs went away" in snap.network.errors[0].message
    results = run_checks(snap, DEFAULT_EXPECTATIONS, only=["network.nics", "network.rate"])
    assert results and all(r.status == Status.UNKNOWN for r in results)
    assert all("sysfs went away" in r.message and r.fault_code == "GPUDIAG-NETWORK-UNREADABLE" for r in results)


def test_the_part_stores_an_error_it_is_given_as_unreadable():
    snap = NodeSnapshot(hostname="n", collected_at="2026-12-01T00:00:00+00:00", gpudiag_version="0")
    network_part.store(snap, None, None)
    assert snap.network is not None and not snap.network.readable and snap.network.errors


# -- gpudiag check --json over the fakes -----------------------------------------------------------------------


@pytest.mark.parametrize("build", [healthy_h100, lambda root: clear_counters(rdma_tree.h200_roce(root)),
                                   lambda root: clear_counters(mi300x_thor2(root)),
                                   lambda root: clear_counters(mi355x_pollara(root))],
                         ids=["cx7-ib", "cx7-roce", "thor2", "pollara"])
def test_healthy_nodes_of_each_nic_kind_pass_with_nothing_unknown(tmp_path, build):
    build(tmp_path / "root")
    code, report = check_json(tmp_path / "root", tmp_path)
    assert bad(report) == [] and code == 0
    assert {r["check"] for r in report["results"] if r["status"] == "pass"} >= {"network.nics", "network.rate"}


def _port_down(node):
    rdma_tree.port_down(node, "mlx5_4")


def _half_rate(node):
    rdma_tree.half_rate(node, "mlx5_4")


def _link_errors(node):
    rdma_tree.link_errors(node, "mlx5_4", link_downed=4, symbol_error=65535)


def _firmware(node):
    rdma_tree.firmware(node, "mlx5_4", "28.39.1002")


FAULTS = {  # fault -> (what makes it, check, status, fault code, the NIC named)
    "port-down": (_port_down, "network.nics", "fail", "GPUDIAG-NETWORK-NIC-DOWN", "mlx5_4"),
    "half-rate": (_half_rate, "network.rate", "fail", "GPUDIAG-NETWORK-RATE-DEGRADED", "mlx5_4"),
    "symbol-errors": (_link_errors, "network.errors", "fail", "GPUDIAG-NETWORK-LINK-ERRORS", "mlx5_4"),
    "firmware-outlier": (_firmware, "network.firmware", "warn", "GPUDIAG-NETWORK-FIRMWARE-MISMATCH", "mlx5_4"),
}
# A one-shot check judges a counter as a rate since boot, and under --root the boot time is still this machine's
# (the live /proc), not the fake node's: 65,535 symbol errors are above the default 10/s only on a machine up for less
# than
# 1.8 h. A fail bound of 0.001/s makes the verdict the same on any test machine (up to two years of uptime).
EXTRA_ARGS = {"symbol-errors": ("-p", "nic_symbol_error_fail_per_second=0.001")}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_nic_fault_fails_or_warns_on_its_nic(tmp_path, fault):
    make, check, status, code, nic = FAULTS[fault]
    make(healthy_h100(tmp_path / "root"))
    exit_code, report = check_json(tmp_path / "root", tmp_path, *EXTRA_ARGS.get(fault, ()))
    findings = bad(report)
    assert {(r["check"], r["status"], r["fault_code"]) for r in findings} == {(check, status, code)}
    assert all(r["observed"]["nic"] == nic and r["remediation"] for r in findings)
    assert exit_code != 0 or status == "warn"


def test_a_flapping_port_fails_from_the_kernel_log(tmp_path):
    healthy_h100(tmp_path / "root")
    # a saved log's times are seconds since this machine's boot (under --root the live /proc's): the flaps a minute
    # ago, inside the 12 h window whatever the test machine's uptime (at 100 s after boot they were outside it on
    # a machine up for 15 h)
    recent = max(float(Path("/proc/uptime").read_text().split()[0]) - 60.0, 10.0)
    line = "[{:10.6f}] mlx5_core 0000:3b:00.0 mlx5_4: Port: 1 Link {}\n"
    log = QUIET_LOG + "".join(line.format(recent + i, state) for i, state in enumerate(("DOWN", "ACTIVE") * 3))
    _, report = check_json(tmp_path / "root", tmp_path, log=log)
    (finding,) = bad(report)
    assert (finding["check"], finding["status"], finding["observed"]["nic"]) == ("network.flaps", "fail", "mlx5_4")


def test_a_gpu_without_its_nic_below_its_switch_fails_on_that_gpu(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path / "root", nic_elsewhere=2))
    _, report = check_json(tmp_path / "root", tmp_path, "-p", "gpu_nic_affinity=switch")
    findings = [r for r in bad(report) if r["check"] == "topology.gpu_nic_affinity"]
    # no vendor library enumerates the fake GPUs, so the result names the GPU by its bus ID in `observed`
    assert [(r["status"], r["observed"]["gpu"]) for r in findings] == [("fail", rdma_tree.HGX_GPUS[2])]


def test_a_missing_nvidia_peermem_fails_gpudirect_when_the_profile_asks_for_it(tmp_path):
    clear_counters(rdma_tree.hgx_h100_ib(tmp_path / "root", peermem=False))
    _, report = check_json(tmp_path / "root", tmp_path, "-p", "gpudirect_path=peermem")
    (finding,) = bad(report)
    assert (finding["check"], finding["status"]) == ("network.gpudirect", "fail")
    assert "nvidia_peermem" in finding["remediation"]


def test_a_node_without_rdma_devices_skips_the_family_and_fails_only_when_nics_are_expected(tmp_path):
    root = tmp_path / "root"  # as the lab H200 VM: one GPU, no /sys/class/infiniband
    rdma_tree.RdmaTree(root).add_gpu("0000:00:06.0", bridges=(), upstream="0000:00:01.0")
    code, report = check_json(root, tmp_path)
    assert code == 0 and {r["status"] for r in report["results"]} == {"skip"}
    assert all("no RDMA device" in r["message"] for r in report["results"] if r["check"].startswith("network."))
    code, report = check_json(root, tmp_path, "-p", "expected_nics=8")
    (finding,) = bad(report)
    assert (finding["check"], finding["status"], finding["fault_code"]) == (
        "network.nics", "fail", "GPUDIAG-NETWORK-NIC-DOWN")
    assert code != 0


def test_the_hgx_profile_fails_a_node_without_rdma_devices_and_says_what_to_do(tmp_path):
    """h200-8x expects eight ConnectX-7 (issue 33, item 2): with no /sys/class/infiniband, network.nics fails and says
    how to tell NICs missing from the PCI bus from an RDMA driver (and ib_core) not loaded."""
    root = tmp_path / "root"
    rdma_tree.RdmaTree(root).add_gpu("0000:00:06.0", bridges=(), upstream="0000:00:01.0")
    code, report = check_json(root, tmp_path, "--profile", "h200-8x")
    (finding,) = bad(report)
    assert (code, finding["check"], finding["status"]) == (1, "network.nics", "fail")
    assert "ib_core is not loaded" in finding["message"] and "the profile expects 8" in finding["message"]
    assert "`lspci -nn -d 15b3:1021`" in finding["remediation"] and "`modprobe mlx5_ib`" in finding["remediation"]


# -- the exporter's series -------------------------------------------------------------------------------------


def test_the_textfile_carries_the_nic_series_and_the_faults_check_status(tmp_path):
    rdma_tree.half_rate(healthy_h100(tmp_path / "root"), "mlx5_4")
    (tmp_path / "dmesg.txt").write_text(QUIET_LOG)
    out = tmp_path / "gpudiag.prom"
    done = subprocess.run([sys.executable, "-m", "gpudiag", "textfile", "--root", str(tmp_path / "root"),
                           "--kernel-log", str(tmp_path / "dmesg.txt"), "--output", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode in (0, 1, 2), done.stderr
    text = out.read_text()
    assert 'gpudiag_nic_port_rate_bytes_per_second{nic="mlx5_4",pci_bus_id="0000:3b:00.0",port="1"} 25000000000' in text
    assert 'gpudiag_check_status{check="network.rate",gpu="",uuid="",pci_bus_id="",status="fail"} 1' in text
    assert 'gpudiag_collector_success{collector="network"} 1' in text


@pytest.mark.parametrize("profile, build", [("h200-8x", healthy_h100),
                                            ("mi300x-8x", lambda root: clear_counters(mi300x_thor2(root))),
                                            ("mi355x-8x", lambda root: clear_counters(mi355x_pollara(root)))])
def test_the_shipped_profiles_nics_pass_their_healthy_node_and_a_slow_port_fails(tmp_path, profile, build):
    node = build(tmp_path / "root")
    code, report = check_json(tmp_path / "root", tmp_path, "--profile", profile)  # the profile expects eight
    assert bad(report) == [] and code == 0
    fabric = [r for r in report["results"] if r["check"] == "network.rate" and r["status"] == "pass"]
    assert len(fabric) == 8  # the profile's nic_pci_ids: the eight fabric NICs, not the front-end ones
    rdma_tree.half_rate(node, fabric[0]["observed"]["nic"])
    _, report = check_json(tmp_path / "root", tmp_path, "--profile", profile)
    assert [(r["check"], r["status"]) for r in bad(report)] == [("network.rate", "fail")]


def test_the_checklist_calls_a_nic_a_nic(tmp_path):
    """Issue 36 item 4: a port down was `FAIL  network.nics  GPU at 0000:3b:00.0`, naming mlx5_4 as a GPU."""
    _port_down(healthy_h100(tmp_path / "root"))
    (tmp_path / "dmesg.txt").write_text(QUIET_LOG)
    done = subprocess.run([sys.executable, "-m", "gpudiag", "check", "--root", str(tmp_path / "root"),
                           "--kernel-log", str(tmp_path / "dmesg.txt"), "--only", ",".join(FAMILY)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    heads = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert heads == ["FAIL  network.nics  NIC mlx5_4 (0000:3b:00.0) port 1"], done.stdout
    assert "GPU at 0000:3b:00.0" not in done.stdout
