"""The service socket against a hostile local user and a second instance (issue 24, items 8, 9, 11, 12, 14, 15),
with real `gpudiag serve` processes over the fake NVIDIA node (tests/support/exporter_node.py) where the item is about
the process, and peers of other uids forked from the test (tests/support/as_user.py: the socket is 0660, group root
here)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpudiag.service import socket_path
from tests.support.as_user import (GPUDIAG_GROUP, MEMBER, STRANGER, needs_root, shared_tmp, start_as_user,
                                   with_group_file)
from tests.support.exporter import wait_for
from tests.support.exporter_node import fake_root, xid_line
from tests.support.fakes.fake_nvml import FakeNode, installed
from tests.support.full_disk import can_mount_tmpfs
from tests.support.paths import REPO
from tests.support.service import raw, running_service

pytestmark = pytest.mark.slow  # end to end: real servers and processes (tests/README.md)



class Serve:
    """`gpudiag serve` as its own process over a fake node under `root`; stderr goes to a file (a flood of log lines
    must not block it on a full pipe)."""

    def __init__(self, root: Path, *args: str, gpus: int = 1, wait: bool = True, gpudiag_group: bool = False):
        self.log = root / f"serve-{time.monotonic_ns()}.log"
        self._err = open(self.log, "w")
        argv = [sys.executable, "-m", "tests.support.exporter_node", str(root), str(gpus), "--",
                "--listen", "127.0.0.1:0", "--interval", "60", "--timeout", "5", *args]
        self.proc = subprocess.Popen(with_group_file(argv, root) if gpudiag_group else argv,
                                     cwd=REPO, stdout=subprocess.DEVNULL, stderr=self._err,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        self.port = None
        if wait:
            wait_for(lambda: self.proc.poll() is not None or "serving http" in self.log.read_text(), timeout=30)
            found = re.search(r"serving http://[\d.]+:(\d+)/metrics", self.log.read_text())
            assert found, self.log.read_text()
            self.port = int(found.group(1))

    def exit_code(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    @property
    def stderr(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()


@pytest.fixture
def node_root():
    """A fake node's root other users can reach (pytest's tmp_path is under a 0700 directory)."""
    top = shared_tmp()
    yield top
    shutil.rmtree(top, ignore_errors=True)


def status(path: Path) -> dict:
    return raw(path, b'{"op": "status"}\n')[0]


# The socket's group is `gpudiag` where the machine has that group, root's otherwise: a peer that is a member of it
# takes the socket's own group, whichever it is (with gid 0 these tests failed on a machine with a gpudiag group,
# issue 36 item 8). Each runs on this machine as it is, and where /etc/group has a gpudiag group (a private one,
# tests/support/as_user.py with_group_file).
GROUPS = [pytest.param(False, id="machine-groups"),
          pytest.param(True, id="gpudiag-group", marks=pytest.mark.skipif(
              not can_mount_tmpfs(), reason="needs root and a private mount namespace (unshare -m)"))]


def group_of(path: Path) -> int:
    """The group a member of the socket's group runs with."""
    return os.stat(path).st_gid


# -- item 8: no socket or journal in a directory another user can write ---------------------------------------------


@pytest.mark.parametrize("what", ["socket", "state"])
@pytest.mark.parametrize("how", ["others-writable", "other owner"])
@needs_root
def test_a_directory_another_user_can_write_is_refused_with_one_line(node_root, what, how):
    shared = node_root / "shared"
    shared.mkdir()
    if how == "others-writable":
        shared.chmod(0o777)
    else:
        os.chown(shared, STRANGER, STRANGER)
    args = (("--socket", str(shared / "s.sock"), "--state-dir", str(node_root / "state")) if what == "socket"
            else ("--socket", str(node_root / "s.sock"), "--state-dir", str(shared)))
    serve = Serve(node_root, *args, wait=False)
    try:
        code = serve.exit_code()
    finally:
        serve.stop()
    lines = serve.stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gpudiag: error: cannot listen on "), lines
    assert ("can be written by every user" if how == "others-writable" else "belongs to another user") in lines[0]
    assert list(shared.iterdir()) == []  # nothing created there: no socket, no lock, no journal


def test_the_socket_gets_its_mode_at_creation_never_by_path(tmp_path, monkeypatch):
    """chmod/chown by path follow a link swapped in between the bind and the call (a root-only file became
    root:gpudiag 0660 in 2 of 40 tries): the mode comes from the umask at bind, a group from lchown."""
    import gpudiag.service.socket_server as server

    def by_path(*args, **kwargs):
        if kwargs.get("follow_symlinks", True):
            raise AssertionError(f"called by path, following links: {args}")

    monkeypatch.setattr(server.os, "chmod", by_path)
    monkeypatch.setattr(server.os, "chown", by_path)
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path):
        assert oct(os.lstat(socket_path(tmp_path)).st_mode & 0o777) == "0o660"


# -- item 9: one instance per socket and per state directory --------------------------------------------------------


def test_a_second_serve_leaves_the_running_ones_socket_alone(node_root):
    sock, journal = node_root / "run" / "s.sock", node_root / "state"
    sock.parent.mkdir(exist_ok=True)  # serve makes the socket, never its directory (issue 27, item 5)
    first = Serve(node_root, "--socket", str(sock), "--state-dir", str(journal))
    try:
        pid = status(sock)["pid"]
        assert pid == first.proc.pid
        # the same socket: refused, and it deletes nothing
        taken = Serve(node_root, "--socket", str(sock), "--state-dir", str(node_root / "other"), wait=False)
        assert taken.exit_code() == 2
        taken.stop()
        assert f"another gpudiag serve (pid {pid}) is serving this socket" in taken.stderr
        assert status(sock)["pid"] == pid
        # the first one's HTTP port: fails after its own socket was made, and removes only that one
        port_taken = subprocess.run([sys.executable, "-m", "tests.support.exporter_node", str(node_root), "1", "--",
                                     "--listen", f"127.0.0.1:{first.port}", "--socket", str(node_root / "x.sock"),
                                     "--state-dir", str(node_root / "x")],
                                    cwd=REPO, capture_output=True, text=True, timeout=60,
                                    env={**os.environ, "PYTHONPATH": str(REPO)})
        assert port_taken.returncode == 2 and "cannot listen on" in port_taken.stderr
        assert not (node_root / "x.sock").exists()
        # the same journal, another socket: refused before it could rewrite the first one's journal
        second = Serve(node_root, "--socket", str(node_root / "run" / "t.sock"), "--state-dir", str(journal),
                       wait=False)
        assert second.exit_code() == 2
        second.stop()
        assert f"another gpudiag serve (pid {pid}) keeps its journal here" in second.stderr
        assert not (node_root / "run" / "t.sock").exists()
        assert status(sock)["pid"] == pid
    finally:
        first.stop()
    assert not sock.exists()  # its own, removed on stop


def test_a_default_socket_second_serve_on_a_taken_port_deletes_nothing(node_root):
    """The issue's case: `gpudiag serve` by hand beside the unit, on the default socket (not required), fails on the
    taken port; it used to delete the running service's socket on its way out."""
    first = Serve(node_root)
    try:
        path = socket_path(node_root)
        pid = status(path)["pid"]
        again = subprocess.run([sys.executable, "-m", "tests.support.exporter_node", str(node_root), "1", "--",
                                "--listen", f"127.0.0.1:{first.port}"], cwd=REPO, capture_output=True, text=True,
                               timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert again.returncode == 2
        assert status(path)["pid"] == pid
    finally:
        first.stop()


def test_a_killed_services_socket_is_replaced_by_the_next(node_root):
    first = Serve(node_root)
    path = socket_path(node_root)
    first.stop(signal.SIGKILL)
    assert path.exists()  # left behind; its lock died with it
    second = Serve(node_root)
    try:
        assert status(path)["pid"] == second.proc.pid
    finally:
        second.stop()


def test_stop_unlinks_only_the_socket_it_created(tmp_path):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    path = socket_path(tmp_path)
    with installed(node), running_service(tmp_path):
        path.unlink()
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.bind(str(path))  # someone else's socket at the name now
    assert path.exists()
    other.close()


# -- item 11: per-peer limits ---------------------------------------------------------------------------------------


def _hold(path: Path, count: int, seconds: float) -> list[str]:
    """`count` connections that each send a first byte and then nothing for `seconds`; what each was told at once
    (busy) or None while held."""
    socks, told = [], []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        sock.sendall(b"{")
        socks.append(sock)
    time.sleep(0.3)
    for sock in socks:
        sock.setblocking(False)
        try:
            told.append(json.loads(sock.recv(4096)).get("error"))
        except (BlockingIOError, ValueError):
            told.append(None)
    time.sleep(seconds)
    for sock in socks:
        sock.close()
    return told


@needs_root
@pytest.mark.parametrize("gpudiag_group", GROUPS)
def test_one_group_member_cannot_hold_every_slot(node_root, gpudiag_group):
    serve = Serve(node_root, gpudiag_group=gpudiag_group)
    path = socket_path(node_root)
    try:
        assert group_of(path) == (GPUDIAG_GROUP if gpudiag_group else group_of(path))
        holder = start_as_user(MEMBER, lambda: _hold(path, 8, 1.0), gid=group_of(path))
        time.sleep(0.5)  # while the member holds what it can
        as_root = status(path)
        stranger = start_as_user(STRANGER, lambda: status(path), gid=group_of(path)).result()
        told = holder.result()
    finally:
        serve.stop()
    assert as_root["ok"] and stranger["ok"]
    assert told.count(None) == 2 and told.count("busy: too many clients at once") == 6


@needs_root
@pytest.mark.parametrize("gpudiag_group", GROUPS)
def test_a_silent_peer_is_cut_off_at_the_first_byte_deadline(node_root, gpudiag_group):
    serve = Serve(node_root, gpudiag_group=gpudiag_group)
    path = socket_path(node_root)

    def silent() -> tuple[str, float]:
        started = time.monotonic()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(path))
            return json.loads(sock.recv(4096))["error"], time.monotonic() - started

    try:
        error, seconds = start_as_user(MEMBER, silent, gid=group_of(path)).result()
    finally:
        serve.stop()
    assert error == "no request within 0.5s" and seconds < 1.5


@needs_root
@pytest.mark.parametrize("gpudiag_group", GROUPS)
def test_an_unprivileged_max_age_0_cannot_force_back_to_back_collections(node_root, gpudiag_group):
    serve = Serve(node_root, gpudiag_group=gpudiag_group)
    path = socket_path(node_root)

    def hammer(seconds: float) -> set:
        collections, until = set(), time.monotonic() + seconds
        while time.monotonic() < until:
            answer = raw(path, b'{"op": "snapshot", "max_age": 0}\n')[0]
            if answer["ok"]:  # else busy: its previous connection's slot not given back yet (2 per user)
                collections.add((answer["snapshot"]["collected_at"], answer["snapshot"]["duration_seconds"]))
        return collections

    try:
        member = start_as_user(MEMBER, lambda: hammer(3.0), gid=group_of(path)).result()
        as_root = hammer(0.5)
    finally:
        serve.stop()
    assert len(member) <= 5  # one a second at most, and the one it found (6/s and more before)
    assert len(as_root) >= 3  # root's max_age 0 is obeyed: the hooks and the operator get what they ask for


# -- item 12: nested JSON is a protocol error, and tracebacks are rate limited ---------------------------------------


def test_nested_brackets_are_a_protocol_error_with_nothing_in_the_log(node_root):
    serve = Serve(node_root)
    path = socket_path(node_root)
    try:
        for _ in range(100):
            answer, _ = raw(path, b"[" * 2000 + b"\n")
        nested, _ = raw(path, b'{"op": "status", "x": [[[[[[1]]]]]]}\n')
        still = status(path)
    finally:
        serve.stop()
    assert answer == {"ok": False, "error": "request nested deeper than 4 levels"}
    assert nested == {"ok": False, "error": "request nested deeper than 4 levels"}
    assert still["ok"] and still["socket"]["refused"] >= 101
    assert "Traceback" not in serve.stderr and len(serve.stderr.splitlines()) <= 3, serve.stderr[:2000]


def test_unexpected_exceptions_are_logged_with_a_traceback_once_a_minute(tmp_path, caplog):
    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    with installed(node), running_service(tmp_path) as exporter:
        def broken(request, peer=None):
            raise RuntimeError("a bug")

        exporter.service.server._handle = broken
        with caplog.at_level(logging.ERROR, logger="gpudiag.service.socket_server"):
            answers = [raw(socket_path(tmp_path), b'{"op": "status"}\n')[0] for _ in range(50)]
    assert all(a == {"ok": False, "error": "internal error: RuntimeError"} for a in answers)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1


# -- item 14: published before the journal shows it -------------------------------------------------------------------


def test_listeners_see_a_collection_clients_can_already_get():
    from gpudiag.daemon.fresh import FreshCollections  # after the exporter (support/service.py): they import each other

    seen = []
    collections = FreshCollections(lambda: object())

    def listener(collection):
        got, problem = collections.get(max_age=60.0, wait=1.0)
        seen.append(got is collection and problem is None)

    collections.subscribe(listener)
    for _ in range(3):
        collections.collect()
    wait_for(lambda: len(seen) == 3, timeout=5)
    assert seen == [True, True, True]
    # asked for while the listeners ran: started as soon as they are done, not waited out
    collections.get(max_age=0.0, wait=2.0)
    assert collections.get(max_age=0.0, wait=2.0)[1] is None


def test_what_history_shows_a_snapshot_already_has(tmp_path, monkeypatch):
    """A slow journal write (a busy disk) used to hold the collection back from clients while history already
    showed what it saw: a client asking right after got the collection before."""
    import gpudiag.service.journal as journal_module

    real_append = journal_module.Journal.append

    def slow_append(self, entries, changed=False):
        real_append(self, entries, changed)
        if any(e.get("kind") == "xid" for e in entries):
            time.sleep(1.0)

    monkeypatch.setattr(journal_module.Journal, "append", slow_append)
    node = FakeNode.hgx_h200(1)
    tree = fake_root(tmp_path, node)
    path = socket_path(tmp_path)
    with installed(node), running_service(tmp_path, interval=0.1):
        tree.add_kmsg([xid_line(7, 5_000_000, node.gpus[0].bus_id, 79)])
        wait_for(lambda: any(e.get("code") == 79 for e in raw(path, b'{"op": "history"}\n')[0]["entries"]),
                 timeout=10, interval=0.01)
        snapshot = raw(path, b'{"op": "snapshot"}\n')[0]["snapshot"]
    assert any(e["code"] == 79 for e in snapshot["kernel_log"]["events"])


# -- item 15: a client thread that cannot start costs one connection -------------------------------------------------


def test_the_accept_loop_survives_cant_start_new_thread(tmp_path, monkeypatch):
    import gpudiag.service.socket_server as server

    node = FakeNode.hgx_h200(1)
    fake_root(tmp_path, node)
    failures = {"left": 3}
    real_thread = threading.Thread

    class Starved(real_thread):
        def start(self):
            if self.name == "gpudiag-socket-client" and failures["left"] > 0:
                failures["left"] -= 1
                raise RuntimeError("can't start new thread")
            super().start()

    with installed(node), running_service(tmp_path) as exporter:
        monkeypatch.setattr(server.threading, "Thread", Starved)
        path = socket_path(tmp_path)
        refused = 0
        for _ in range(3):
            try:
                raw(path, b'{"op": "status"}\n')
            except (OSError, ValueError):
                refused += 1
        answer = status(path)
        monkeypatch.undo()
        assert refused == 3 and answer["ok"]
        wait_for(lambda: exporter.service.server._slots.free == 8, timeout=2)  # none leaked
