"""The fast path of `gpudiag check` (gpudiag/cli/check/fastpath.py): the service judges and renders on the client's
behalf, byte for byte what the full CLI writes over the same collection; everything it does not handle goes to the full
CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpudiag.cli import app as cli
from gpudiag.cli.check import fastpath
from gpudiag.service import DEFAULT_SOCKET, socket_path
from gpudiag.service.protocol import MAX_REQUEST_BYTES
from tests.support.exporter_node import fake_root
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.paths import REPO
from tests.support.service import raw, running_service, stand_in


VARIANTS = [
    [],
    ["--verbose", "--color"],
    ["--json"],
    ["--format", "junit"],
    ["--format=json", "--only", "pcie,inventory", "--skip=pcie.link_width"],
    ["--profile", "h200-8x", "-p", "expected_gpu_count=2", "--json"],
    ["--profile", "h200-8x"],  # 8 GPUs expected, 2 there: a failing verdict from the profile
    ["--profile", "no-such-profile"],  # a usage error: the same one line, exit 2
    ["-p", "expected_gpu_count=eight"],
    ["--only", "no_such_family"],
]


def run_both(argv: list[str]) -> tuple[tuple, tuple]:
    def captured(main):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        return code, out.getvalue(), err.getvalue()

    return captured(fastpath.main), captured(cli.main)


@pytest.mark.slow
def test_fast_and_full_paths_write_the_same_bytes_and_exit_codes(tmp_path):
    node = FakeNode.hgx_h200(2)
    node.gpus[1].hang = "nvmlDeviceGetPowerUsage"  # GPU 1 fails (and has a `since`), the node fails: exit 1
    fake_root(tmp_path, node)
    seen = set()
    with installed(node), running_service(tmp_path, timeout=1.0, interval=30.0):
        for extra in VARIANTS:
            argv = ["check", "--root", str(tmp_path), *extra]
            for _ in range(3):  # a new collection between the two (each asks for one at most 1 s old): again
                fast, full = run_both(argv)
                if fast == full:
                    break
            assert fast[0] is not None, f"{extra}: the fast path did not handle it"
            assert fast == full, extra
            seen.add(fast[0])
            if "--json" in extra:
                report = json.loads(fast[1])
                assert report["collected_by"] == "service"
                assert any(r.get("since") for r in report["results"] if r["status"] == "fail")
    assert seen == {1, 2}


def test_a_healthy_node_passes_through_the_fast_path(tmp_path):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path, interval=30.0):
        fast, full = run_both(["check", "--root", str(tmp_path), "--json"])
    assert fast == full and fast[0] == 0 and json.loads(fast[1])["status"] == "pass"


def test_the_fast_path_imports_no_typer_model_checks_or_vendor_library(tmp_path):
    node = FakeNode.hgx_h200(2)
    fake_root(tmp_path, node)
    heavy = (
        "typer",
        "click",
        "gpudiag.cli.app",
        "gpudiag.model",
        "gpudiag.checks",
        "gpudiag.report",
        "pynvml",
        "amdsmi",
        "psutil",
    )
    probe = ("import json, sys\nfrom gpudiag.cli.check.fastpath import main\ncode = main(sys.argv[1:])\n"
             f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]), file=sys.stderr)\nsys.exit(code)\n")
    with installed(node), running_service(tmp_path):
        done = subprocess.run([sys.executable, "-c", probe, "check", "--root", str(tmp_path), "--json"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
        module = subprocess.run([sys.executable, "-m", "gpudiag", "check", "--root", str(tmp_path), "--json"],
                                capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["collected_by"] == "service"
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
    assert module.returncode == 0 and json.loads(module.stdout)["collected_by"] == "service"


@pytest.mark.parametrize("extra", [
    ["--replay", "x.json"], ["--baseline", "b.json"], ["--kernel-log", "k.txt"], ["--level", "2"],
    ["--profile", "./site.toml"], ["--profile", "site.toml"], ["--profile", "/etc/passwd"], ["-h"],
    ["--json", "--format", "text"], ["--format", "yaml"], ["--timeout", "soon"], ["-vf", "json"], ["--only"],
    ["positional"], ["-p" + "x=1"], ["--socket", ""], ["--root="], ["--profile", ""], ["--", "--json"],
])
def test_what_the_fast_path_does_not_handle_goes_to_the_full_cli(extra, tmp_path):
    assert fastpath.parse(["check", "--root", str(tmp_path), *extra]) is None
    assert fastpath.parse(["history"]) is None and fastpath.parse([]) is None


def test_the_socket_defaults_match(tmp_path):
    assert fastpath.DEFAULT_SOCKET == str(DEFAULT_SOCKET) and fastpath.MAX_REQUEST_BYTES == MAX_REQUEST_BYTES
    assert fastpath.parse(["check", "--root", str(tmp_path)])["_socket"] == str(socket_path(tmp_path))
    assert fastpath.parse(["check", "--root", "/"])["_socket"] == str(socket_path(Path("/")))
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpudiag"] == "gpudiag.cli.check.fastpath:run"


def test_the_service_reads_no_file_a_client_names_and_bounds_the_request(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    secret = tmp_path / "site.toml"
    secret.write_text("expected_gpu_count = 1\n")
    with installed(node), running_service(tmp_path):
        path = socket_path(tmp_path)
        for profile in (str(secret), "./site.toml", "site.toml", "../../etc/passwd"):
            answer, _ = raw(path, json.dumps({"op": "check", "profile": profile}).encode() + b"\n")
            assert not answer["ok"] and "shipped profile" in answer["error"], profile
        for bad in ({"format": "yaml"}, {"only": "pcie"}, {"params": [1]}, {"verbose": "yes"},
                    {"only": ["x"] * 65}, {"color": 1}):
            answer, _ = raw(path, json.dumps({"op": "check", **bad}).encode() + b"\n")
            assert not answer["ok"] and "expected" in answer["error"], bad
        answer, _ = raw(path, json.dumps({"op": "check", "params": ["a=" + "b" * 250] * 20}).encode() + b"\n")
        assert not answer["ok"] and f"over {MAX_REQUEST_BYTES} bytes" in answer["error"]
        answer, _ = raw(path, b'{"op": "check", "format": "json", "only": ["pcie"]}\n')
        assert answer["ok"] and answer["exit"] == 0 and json.loads(answer["stdout"])["collected_by"] == "service"


@pytest.mark.parametrize("fallback,warning", [("stale", "collection did not finish"), ("failed", "could not collect")])
def test_a_service_without_a_fresh_collection_makes_the_client_probe_directly(tmp_path, fallback, warning):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    path = tmp_path / "stand-in.sock"
    server = stand_in(path, [{"ok": False, "error": "collection overran", "fallback": fallback}])
    out, err = io.StringIO(), io.StringIO()
    with installed(node), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = fastpath.main(["check", "--root", str(tmp_path), "--socket", str(path), "--json"])
    server.join(5)
    assert code == 0 and json.loads(out.getvalue())["collected_by"] == "direct"
    assert warning in err.getvalue() and "collection overran" in err.getvalue()


def test_an_older_service_or_a_busy_one_is_not_handled(tmp_path):
    path = tmp_path / "old.sock"
    server = stand_in(path, [{"ok": False, "error": "expected {\"op\": one of snapshot, history, status}"}])
    assert fastpath.main(["check", "--socket", str(path)]) is None
    server.join(5)


class OneCollection:
    """FreshCollections' interface over a fixed collection (what `get` returns while it is at most a second old)."""

    def __init__(self, snapshot):
        self.collection = type("Collection", (), {"snapshot": snapshot})()

    def get(self, max_age, wait):
        return self.collection, None


def test_answers_are_made_once_per_collection_unless_they_age(monkeypatch):
    from gpudiag.model.recording import load_snapshot
    from gpudiag.report import verdict
    from gpudiag.service.check_answers import Answers, answer_check, parse_check

    calls = []
    real = verdict.judge_and_render
    monkeypatch.setattr(verdict, "judge_and_render", lambda *a, **k: calls.append(a[6]) or real(*a, **k))
    snapshot = load_snapshot(REPO / "tests/fixtures/h200/snapshot.json")
    collections, answers = OneCollection(snapshot), Answers()
    eight = {"op": "check", "params": ["expected_gpu_count=8"]}  # one GPU where eight should be: a failure
    episode = [{"check": "inventory.gpu_count", "pci_bus_id": None, "status": "fail",
                "first_seen": "2026-12-01T02:14:05+00:00"}]

    def ask(request, open_checks=()):
        answer = answer_check(parse_check(request), collections, 1.0, lambda: list(open_checks), answers)
        return json.loads(answer)

    first = ask({**eight, "format": "json"}, episode)
    assert first == ask({**eight, "format": "json"}, episode) and len(calls) == 1
    assert first["exit"] == 1 and json.loads(first["stdout"])["results"]
    ask({**eight, "format": "junit"}, episode)
    ask({**eight, "format": "junit"}, episode)
    assert calls == ["json", "junit"]
    # a text checklist saying "failing since 02:14, N h" is made anew each time: N moves on
    ask({**eight, "format": "text"}, episode)
    text = ask({**eight, "format": "text"}, episode)
    assert "failing since" in text["stdout"] and calls[2:] == ["text", "text"]
    # without a `since`, the text is kept too; another collection, or other open episodes, are another answer
    ask({**eight, "format": "text"})
    ask({**eight, "format": "text"})
    assert calls[4:] == ["text"]
    ask({**eight, "format": "json"})
    collections.collection = type("Collection", (), {"snapshot": snapshot})()
    ask({**eight, "format": "json"}, episode)
    assert calls[5:] == ["json", "json"]
    # bounded in bytes (and in entries): an answer over the budget is made, not kept
    monkeypatch.setattr(Answers, "MAX_BYTES", 10)
    ask({**eight, "format": "junit"})
    ask({**eight, "format": "junit"})
    assert calls[7:] == ["junit", "junit"]
