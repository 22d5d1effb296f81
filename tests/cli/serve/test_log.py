"""`gpudiag serve` tells its journal what changes (issue 27, item 2): the real process over the fake NVIDIA node for a
GPU lost and back, in logfmt and in JSON, at --log.level info and warn; the exporter in-process for the backend
going down and up, checks changing status, a hung GPU, a collection overrunning and failing; the journal file and
the TLS certificate for their own lines."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pynvml
import pytest

import gpudiag.probe.collector
from gpudiag.cli.serve.log_format import daemon_logging
from gpudiag.cli.serve.serving import ServeDaemon
from gpudiag.exporter.web.config import WebConfig
from gpudiag.probe.collector import CollectOptions, Collector
from tests.support.exporter import value, wait_for
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.log import records
from tests.support.paths import REPO
from tests.support.snapshots import nvidia_h200_node

GPU1 = "0000:3b:00.0"
# A name as the driver could hand it over: a C string (no NUL) of UTF-8 (no lone surrogate) in NVML's 96 bytes.
HOSTILE_NAME = 'H200\n{"ts":"x","level":"error","msg":"forged"}\nts=x level=error msg=forged\r\u2028\x85 "\\ \x1b[31m'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Serve:
    """`gpudiag serve` as a process over a 2-GPU fake node whose GPU 1 is lost while `flag` exists."""

    def __init__(self, root: Path, *serve_args: str, name: str = None):
        self.flag = root / "lose-gpu-1"
        self.port = free_port()
        own = ["--name", json.dumps(name)] if name is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.exporter_node", str(root / "node"), "2", "--lose-while",
             str(self.flag), *own, "--", "--listen", f"127.0.0.1:{self.port}", "--interval", "0.5", "--timeout", "1",
             *serve_args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)})

    def metrics(self) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
                return response.read().decode()
        except OSError:
            return ""

    def gpu1_up_after_collections(self, up: int, collections: int = 3) -> None:
        """Wait for GPU 1 to read `up`, then for `collections` more collections with it so."""
        wait_for(lambda: value(self.metrics(), "gpudiag_device_up", pci_bus_id=GPU1) == up, timeout=20)
        done = value(self.metrics(), "gpudiag_collections_total", outcome="complete")
        wait_for(lambda: value(self.metrics(), "gpudiag_collections_total", outcome="complete") >= done + collections,
                 timeout=20)
        assert value(self.metrics(), "gpudiag_device_up", pci_bus_id=GPU1) == up

    def lose_and_return(self) -> str:
        """GPU 1 answers, is lost for a few collections, answers again; the stderr of the whole run."""
        try:
            self.gpu1_up_after_collections(1)
            self.flag.touch()
            self.gpu1_up_after_collections(0)
            self.flag.unlink()
            self.gpu1_up_after_collections(1)
            self.proc.send_signal(signal.SIGTERM)
            out, err = self.proc.communicate(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.returncode == 0 and out == "", err
        return err


@pytest.mark.slow
def test_serve_logs_one_line_when_a_gpu_is_lost_and_one_when_it_returns(tmp_path):
    serve = Serve(tmp_path)
    lines = records(serve.lose_and_return())  # every line is logfmt (the strict reader fails on anything else)
    assert [line["msg"] for line in lines] == [
        f"serving http://127.0.0.1:{serve.port}/metrics", "backend up", "GPU lost", "GPU back", "stopped"]
    lost, back = lines[2], lines[3]
    assert {k: lost[k] for k in ("level", "gpu", "bus_id", "name")} == {
        "level": "warn", "gpu": "1", "bus_id": GPU1, "name": "NVIDIA H200"}
    assert "NVML_ERROR_GPU_IS_LOST" in lost["error"] and lost["uuid"].startswith("GPU-")
    assert {k: back[k] for k in ("level", "gpu", "bus_id", "was")} == {"level": "info", "gpu": "1", "bus_id": GPU1,
                                                                      "was": "lost"}
    assert all(line["ts"].endswith("Z") and ":" in line["source"] for line in lines)


@pytest.mark.slow
def test_serve_in_json_at_warn_is_one_object_a_line_and_a_hostile_gpu_name_stays_a_value(tmp_path):
    err = Serve(tmp_path, "--log.format", "json", "--log.level", "warn", name=HOSTILE_NAME).lose_and_return()
    lines = records(err, "json")  # one JSON object a line, or json.loads fails
    # at warn: the loss only (not the start, the backend, the return or the stop, which are info)
    assert [(line["level"], line["msg"]) for line in lines] == [("warn", "GPU lost")]
    assert lines[0]["name"] == HOSTILE_NAME and lines[0]["gpu"] == 1 and lines[0]["bus_id"] == GPU1


@pytest.mark.slow
def test_serve_refuses_a_log_level_it_does_not_know(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gpudiag", "serve", "--log.level", "verbose"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--log.level" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- in-process: the states that need a hand on the node --------------------------------------------------------


def told(err: str) -> list[tuple[str, dict]]:
    return [(line["msg"], line) for line in records(err)]


def completed(exporter: ServeDaemon, outcome: str = "complete") -> float:
    return value(exporter.state.render().decode(), "gpudiag_collections_total", outcome=outcome) or 0


@pytest.mark.slow
def test_a_backend_down_then_up_and_checks_changing_status_are_one_line_each(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpudiag.probe.collector, "REOPEN_BACKOFF_SECONDS", 0.2)
    node = FakeNode.hgx_h200(2)
    node.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    tree = fake_root(tmp_path, node)
    with installed(node), daemon_logging("info", "logfmt"):
        collector = Collector(CollectOptions(root=tmp_path, timeout_seconds=1))
        exporter = ServeDaemon("127.0.0.1:0", WebConfig(), collector.collect, 0.1, 1, watcher_factory=None).start()
        try:
            def after(count: int) -> None:
                start = completed(exporter)
                wait_for(lambda: completed(exporter) >= start + count, timeout=10)

            after(3)
            node.init_error = pynvml.NVML_SUCCESS
            wait_for(lambda: exporter.collections.latest.snapshot.backend("nvml").available, timeout=10)
            after(3)
            tree.add_kmsg([xid_line(2, 2_000_000, node.gpus[1].bus_id, 48)])
            after(3)
            node.gpus[0].hang = "nvmlDeviceGetPowerUsage"
            wait_for(lambda: not exporter.collections.latest.snapshot.devices[0].reachable, timeout=10)
            after(3)
        finally:
            exporter.stop()
            collector.close()
    lines = told(capsys.readouterr().err)
    assert [(msg, line.get("backend") or line.get("check") or line.get("gpu")) for msg, line in lines] == [
        ("backend down", "nvml"),
        ("check status changed", "driver.library"),  # its consequences (the GPUs on the bus unenumerated) are not
        ("backend up", "nvml"),
        ("check status changed", "driver.library"),
        ("check status changed", "kernel_log.xid"),
        ("GPU hung", "0"),
    ]
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in lines[0][1]["error"]
    assert [lines[i][1]["status"] for i in (1, 3, 4)] == ["fail", "pass", "fail"]
    assert lines[4][1]["bus_id"] == GPU1 and "Xid 48" in lines[4][1]["message"]
    assert "hung in nvml.nvmlDeviceGetPowerUsage" in lines[5][1]["error"]


@pytest.mark.slow
def test_a_collection_overrunning_or_failing_is_one_line_and_one_when_they_complete_again(capsys):
    release, calls = threading.Event(), []

    def collect():
        calls.append(1)
        if len(calls) == 2:
            release.wait(30)  # hangs past the cycle's deadline; the cycles after it overrun at once
        if len(calls) == 4:
            raise RuntimeError("the collector broke")
        return nvidia_h200_node()

    with daemon_logging("info", "logfmt"):
        exporter = ServeDaemon("127.0.0.1:0", WebConfig(), collect, 0.1, 0.1, watcher_factory=None).start()
        try:
            wait_for(lambda: completed(exporter, "overrun") >= 5, timeout=15)  # 2.1 s deadline, then one a cycle
            release.set()
            wait_for(lambda: completed(exporter, "error") >= 1 and completed(exporter) >= 4, timeout=15)
        finally:
            exporter.stop()
    lines = [(msg, line) for msg, line in told(capsys.readouterr().err) if msg.startswith("collection")]
    assert [msg for msg, _ in lines] == ["collection overrun", "collection complete again", "collection failed",
                                         "collection complete again"]
    assert lines[0][1]["level"] == "warn" and "no result within 2.1s" in lines[0][1]["error"]
    assert lines[2][1]["level"] == "error" and "the collector broke" in lines[2][1]["error"]
    assert lines[1][1]["was"] == "overrun" and lines[3][1]["was"] == "error"


def test_a_journal_write_failing_is_one_line_and_one_when_it_is_written_again(tmp_path, monkeypatch, caplog):
    import gpudiag.service.journal as journal_module

    journal = journal_module.Journal(tmp_path).load()
    real = journal_module.write_atomically

    def full_disk(path, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_module, "write_atomically", full_disk)
    with caplog.at_level(logging.INFO, logger="gpudiag.service.journal"):
        for second in range(5):
            journal.append([{"time": f"2026-12-02T03:10:0{second}+00:00", "kind": "check", "event": "begin"}])
        assert journal.problem is not None
        monkeypatch.setattr(journal_module, "write_atomically", real)
        journal.append([{"time": "2026-12-02T03:11:00+00:00", "kind": "check", "event": "end"}])
        journal.append([{"time": "2026-12-02T03:11:01+00:00", "kind": "check", "event": "begin"}])
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "journal write failing"), ("INFO", "journal written again")]
    assert caplog.records[0].fields == {"path": str(tmp_path / "journal.jsonl"), "error": "No space left on device"}
    assert journal.problem is None and len((tmp_path / "journal.jsonl").read_text().splitlines()) == 7


def test_a_certificate_reload_is_one_line_with_its_files(tmp_path, caplog):
    import shutil

    from gpudiag.exporter.web.tls_config import TLSServer, parse_tls

    first, second = REPO / "tests" / "fixtures" / "exporter-toolkit", REPO / "tests" / "fixtures" / "tls"
    for name in ("server.crt", "server.key"):
        shutil.copy(first / name, tmp_path / name)
    server = TLSServer(parse_tls({"cert_file": "server.crt", "key_file": "server.key"}, tmp_path))
    with caplog.at_level(logging.INFO, logger="gpudiag.exporter.web.tls_config"):
        server.context()
        server.context()  # unchanged: no line
        (tmp_path / "server.crt").write_text("not a certificate")
        server.context()
        shutil.copy(second / "server.crt", tmp_path / "server.crt")
        shutil.copy(second / "server.key", tmp_path / "server.key")
        server.context()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "TLS certificate files changed but do not load; the previous ones are kept"),
        ("INFO", "TLS certificate reloaded")]
    assert caplog.records[1].fields == {"cert_file": str(tmp_path / "server.crt"),
                                        "key_file": str(tmp_path / "server.key")}


@pytest.mark.slow
def test_a_failure_repeated_every_collection_is_held_to_the_bound_with_its_traceback(capsys):
    def broken_checks(snapshot):
        raise ValueError("a check module's bug, every collection")

    with daemon_logging("info", "logfmt"):
        exporter = ServeDaemon("127.0.0.1:0", WebConfig(), nvidia_h200_node, 0.1, 0.1, judge=broken_checks,
                            watcher_factory=None).start()
        try:
            wait_for(lambda: completed(exporter) >= 12, timeout=15)
        finally:
            exporter.stop()
    failures = [line for msg, line in told(capsys.readouterr().err) if msg == "running the checks failed"]
    assert len(failures) == 4  # a window's worth (gpudiag/cli/serve/log_bound.py), not one a collection
    assert all("ValueError: a check module's bug" in line["exception"] for line in failures)
