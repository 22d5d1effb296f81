"""The local service API end to end: `gpudiag serve`'s socket over the fake NVIDIA node, `gpudiag check` through it
and without it, `gpudiag history`, and the socket's limits against slow and oversized requests."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pynvml
import pytest

from gpudiag.cli import app as cli
from gpudiag.service import socket_path
from tests.support.exporter import wait_for
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.paths import REPO
from tests.support.service import raw, running_service, verdicts



def check_json(capsys, root: Path, *extra: str) -> tuple[int, dict, float]:
    started = time.monotonic()
    code = cli.main(["check", "--root", str(root), "--json", *extra])
    elapsed = time.monotonic() - started
    out, _ = capsys.readouterr()
    return code, json.loads(out), elapsed


@pytest.mark.slow
def test_check_through_the_service_on_a_hung_gpu_is_fast_and_judges_the_same(tmp_path, capsys):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].hang = "nvmlDeviceGetPowerUsage"
    fake_root(tmp_path, node)
    with installed(node):
        with running_service(tmp_path, timeout=1.0):
            code, via_service, service_seconds = check_json(capsys, tmp_path)
            direct_code, direct, direct_seconds = check_json(capsys, tmp_path, "--direct", "--timeout", "1")
    assert via_service["collected_by"] == "service" and direct["collected_by"] == "direct"
    assert (code, verdicts(via_service)) == (direct_code, verdicts(direct))
    assert code == 1 and ("inventory.gpus_visible", "fail", 1) in verdicts(via_service)
    # the service knows GPU 1 is hung and makes no new call on it; the direct probe waits out its deadline
    assert direct_seconds > 0.9
    assert service_seconds < direct_seconds / 2


def test_healthy_node_passes_through_the_service_with_since_absent(tmp_path, capsys):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path):
        code, report, _ = check_json(capsys, tmp_path)
        cli.main(["check", "--root", str(tmp_path), "--no-color"])
        text, _ = capsys.readouterr()
    assert code == 0 and report["status"] == "pass" and report["collected_by"] == "service"
    assert not any("since" in r for r in report["results"])
    assert "collected by service" in text.splitlines()[0]


def test_service_stopped_or_stale_socket_falls_back_to_a_direct_probe(tmp_path, capsys):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    with installed(node):
        with running_service(tmp_path):
            pass
        assert not socket_path(tmp_path).exists()  # removed on stop
        code, report, _ = check_json(capsys, tmp_path)
        assert (code, report["collected_by"]) == (0, "direct")
        # a socket left behind by a killed service: nobody listens, the check does not wait
        path = socket_path(tmp_path)
        leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        leftover.bind(str(path))
        leftover.close()
        code, report, seconds = check_json(capsys, tmp_path)
        assert (code, report["collected_by"]) == (0, "direct") and seconds < 5


def test_check_through_the_service_loads_no_vendor_library(tmp_path):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    probe = ("import json, sys\nfrom gpudiag.cli.app import main\ncode = main(sys.argv[1:])\n"
             "print(json.dumps(sorted(m for m in ('pynvml', 'amdsmi') if m in sys.modules)), file=sys.stderr)\n"
             "sys.exit(code)\n")
    with installed(node), running_service(tmp_path):
        done = subprocess.run([sys.executable, "-c", probe, "check", "--root", str(tmp_path), "--json"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["collected_by"] == "service"
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_socket_is_group_only_and_answers_status(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path):
        path = socket_path(tmp_path)
        assert stat.S_ISSOCK(path.lstat().st_mode) and stat.S_IMODE(path.lstat().st_mode) == 0o660
        status, _ = raw(path, b'{"op": "status"}\n')
    assert status["ok"] and status["journal"]["persistent"] and status["last_collection_age_seconds"] is not None


@pytest.mark.slow
def test_socket_refuses_oversized_slow_and_unknown_requests_without_stalling(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path, read_timeout=1.5, max_clients=3) as exporter:
        path = socket_path(tmp_path)
        answer, _ = raw(path, b"x" * 5000, close_write=False)
        assert not answer["ok"] and "over 4096 bytes" in answer["error"]
        answer, _ = raw(path, b'{"op": "reset_gpu"}\n')
        assert not answer["ok"] and "expected" in answer["error"]  # nothing on the socket changes the node
        # two clients that never finish a request: one silent, cut off at the first-byte deadline (0.5 s), one that
        # began its line, at the read deadline (1.5 s), a trickle no later
        idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
        for sock in idle:
            sock.connect(str(path))
        connected = time.monotonic()
        idle[1].sendall(b'{"op"')
        # meanwhile a well-behaved client is answered at once
        answer, seconds = raw(path, b'{"op": "status"}\n')
        assert answer["ok"] and seconds < 1.0  # well inside the idle clients' deadlines (< 0.4 s on a quiet machine)
        # with the silent one cut off, two more clients that began a line fill the slots: the next is turned away
        # at once, not queued
        wait_for(lambda: exporter.service.server._slots.free == 2, timeout=2)
        extras = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
        for extra in extras:
            extra.connect(str(path))
            extra.sendall(b"{")
        wait_for(lambda: exporter.service.server._slots.free == 0, timeout=2)
        busy, seconds = raw(path, b'{"op": "status"}\n')
        assert not busy["ok"] and "busy" in busy["error"] and seconds < 1.0  # not queued behind the 1.5 s deadline
        replies = []
        for sock in idle:
            sock.settimeout(5)
            replies.append((json.loads(sock.recv(4096))["error"], time.monotonic() - connected))
        assert replies[0][0] == "no request within 0.5s"  # and its slot was free again within 2 s (above)
        assert replies[1][0] == "no complete request within 1.5s" and 1.4 < replies[1][1] < 4.0
        for extra in extras:
            extra.close()
        wait_for(lambda: raw(path, b'{"op": "status"}\n')[0]["ok"], timeout=3)


@pytest.mark.slow
def test_concurrent_requests_share_one_collection(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    with installed(node) as lib, running_service(tmp_path, interval=60.0):
        path = socket_path(tmp_path)
        time.sleep(1.1)  # the poller's collection is now over a second old
        before = lib.calls["nvmlDeviceGetPowerUsage"]
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(raw(path, b'{"op": "snapshot"}\n')[0]))
                   for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(answers) == 8 and all(a["ok"] and a["fresh"] for a in answers)
        assert lib.calls["nvmlDeviceGetPowerUsage"] - before <= 2  # one collection, two if one began meanwhile


def test_history_shows_an_xid_and_a_check_that_failed_and_recovered_and_survives_a_restart(tmp_path, capsys):
    node = FakeNode.hgx_h200(2)
    tree = fake_root(tmp_path, node)
    with installed(node):
        with running_service(tmp_path, interval=0.1) as exporter:
            seen = exporter.collections.latest
            node.gpus[1].pcie_generation = 4
            tree.add_kmsg([xid_line(7, 5_000_000, node.gpus[0].bus_id, 79)])
            wait_for(
                lambda: any(e.get("check") == "pcie.link_generation" for e in exporter.service.keeper.open_checks()),
                timeout=5,
            )
            code, report, _ = check_json(capsys, tmp_path)
            failing = [r for r in report["results"] if r["check"] == "pcie.link_generation" and r["status"] == "fail"]
            assert code == 1 and failing and failing[0]["since"].endswith("+00:00")
            cli.main(["check", "--root", str(tmp_path), "--no-color", "--only", "pcie"])
            text, _ = capsys.readouterr()
            assert "failing since " in text
            node.gpus[1].pcie_generation = 5
            wait_for(
                lambda: not any(e["check"] == "pcie.link_generation" for e in exporter.service.keeper.open_checks()),
                timeout=5,
            )
            assert seen is not exporter.collections.latest
        # the service is stopped: history reads the journal file
        assert cli.main(["history", "--root", str(tmp_path), "--format", "json"]) == 0
        entries = json.loads(capsys.readouterr()[0])["entries"]
        assert any(e["kind"] == "xid" and e["code"] == 79 and e["gpu"] == 0 for e in entries)
        link = [e for e in entries if e.get("check") == "pcie.link_generation"]
        assert [e["event"] for e in link] == ["begin", "end"] and link[1]["duration_seconds"] >= 0
        # restarted: the journal is still there, the Xid still in the ring buffer is not journaled twice
        with running_service(tmp_path, interval=0.1):
            assert cli.main(["history", "--root", str(tmp_path), "--gpu", "0"]) == 0
            text = capsys.readouterr()[0]
    assert "from the service" in text and text.count("Xid 79: NVRM") == 1
    assert text.count("kernel_log.xid → fail") == 1  # the episode open before the restart goes on, not again
    assert "pcie.link_generation" not in text  # --gpu 0: the link failed on GPU 1


def test_history_shows_a_gpu_lost_and_found_and_throttle_episodes(tmp_path, capsys):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path, interval=0.1) as exporter:
        keeper = exporter.service.keeper

        def open_kinds() -> set:
            return {key[0] for key in keeper.open}

        node.gpus[1].lost = True
        node.gpus[0].clock_event_reasons = 0x8  # HW slowdown (probe/nvml/sensors.py): not idle, a real throttle
        wait_for(lambda: {"gpu_lost", "throttle"} <= open_kinds(), timeout=5)
        node.gpus[1].lost = False
        node.gpus[0].clock_event_reasons = 0x1  # idle again
        wait_for(lambda: not {"gpu_lost", "throttle"} & open_kinds(), timeout=5)
        # throttling that came and went between two collections: only the time counter (field 74, power) grew
        node.gpus[0].throttle_ns[74] += 3_000_000_000
        wait_for(lambda: any(e.get("event") == "event" and e["kind"] == "throttle"
                             for e in exporter.service.journal.entries()), timeout=5)
        assert cli.main(["history", "--root", str(tmp_path)]) == 0
        text = capsys.readouterr()[0]
    assert "GPU 1    lost" in text and "lost ended" in text and "found again" in text
    assert "GPU 0    throttled (hw_slowdown)" in text and "throttled (hw_slowdown) ended, lasted" in text
    assert "throttled (sw_power_cap) for 3.0 s between collections" in text


def test_history_and_serve_refuse_bad_input_with_one_line(tmp_path, capsys):
    assert cli.main(["history", "--root", str(tmp_path), "--since", "yesterday"]) == 2
    assert "--since 'yesterday'" in capsys.readouterr()[1]
    blocker = tmp_path / "file"
    blocker.write_text("")
    (tmp_path / "sys").mkdir()
    code = cli.main(["serve", "--listen", "127.0.0.1:0", "--root", str(tmp_path), "--socket", str(blocker / "s.sock")])
    err = capsys.readouterr()[1]
    assert code == 2 and err.strip().startswith("gpudiag: error: cannot listen on") and "Traceback" not in err
    # the HTTP port taken: no socket is left behind by the service that never ran
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    code = cli.main(["serve", "--listen", f"127.0.0.1:{port}", "--root", str(tmp_path)])
    taken.close()
    assert code == 2 and f"127.0.0.1:{port}" in capsys.readouterr()[1] and not socket_path(tmp_path).exists()


def test_level_2_takes_the_passive_part_and_its_live_readings_from_the_service(tmp_path, capsys, monkeypatch):
    """The load tests run in the check's process; what they watch under load (clocks, link, ECC) is read through
    the service, so the check opens no vendor library. run_active stands in for the load tests (tests of the load
    tests themselves: test_active_*), recording what its reader answered."""
    import gpudiag.active
    from gpudiag.model import ActiveResults

    read = []

    def load_tests(snapshot, options):
        assert all(d.clocks.sm_mhz == 345 for d in snapshot.devices)  # idle, as the service collected it
        for gpu in node.gpus:  # under load the clocks rise: the reader must see that, not the passive snapshot
            gpu.clocks[pynvml.NVML_CLOCK_SM] = 1980
        time.sleep(0.3)  # past the reader's max_age
        read.extend((d.index, options.reader(d).clocks.sm_mhz) for d in snapshot.devices)
        return ActiveResults(tests=["stress"])

    monkeypatch.setattr(gpudiag.active, "run_active", load_tests)
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path, interval=60.0):
        code, report, _ = check_json(capsys, tmp_path, "--level", "2")
    assert report["collected_by"] == "service" and code in (0, 1)
    assert read == [(0, 1980), (1, 1980)]
