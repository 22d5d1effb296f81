"""`gpudiag top` as a real process: under a real terminal (tmux: send-keys, capture-pane) over the fake nodes, and on
a real pipe. The view shows a row per GPU and the failing check on the faulted GPU; q quits with exit 0 and Ctrl-C
with 130, the terminal restored either way (its settings as before, the normal screen, the cursor shown); through
the service a process that opens no vendor library at all shows the GPUs' values."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.support.fakes.fake_nvml import installed
from tests.support.paths import REPO
from tests.support.service import running_service
from tests.support.top_node import node_root, nvidia_node

pytestmark = pytest.mark.slow
TMUX = shutil.which("tmux")


class Terminal:
    """One tmux server of its own (its socket in a short temporary directory), one 160x40 window running
    `command` under sh, which then prints the exit code and the terminal's settings."""

    def __init__(self, command: str, folder: Path):
        self.socket = str(folder / "tmux.sock")
        self.folder = folder
        script = (f"stty -g > {folder}/before; {command}; echo EXIT=$?; stty -g > {folder}/after; sleep 600")
        self.tmux("new-session", "-d", "-x", "160", "-y", "40", script)

    def tmux(self, *args: str) -> str:
        return subprocess.run([TMUX, "-S", self.socket, *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def flag(self, name: str) -> str:
        return self.tmux("display-message", "-p", f"#{{{name}}}").strip()

    def wait(self, condition: Callable[[str], bool], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if condition(text):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"the terminal never showed what was awaited; it shows:\n{text}")
            time.sleep(0.1)

    def restored(self) -> bool:
        """The settings as before the view, the normal screen, the cursor visible."""
        before, after = (self.folder / "before").read_text(), (self.folder / "after").read_text()
        return before == after and self.flag("alternate_on") == "0" and self.flag("cursor_flag") == "1"


@pytest.fixture
def terminal() -> Iterator[Callable[[str], Terminal]]:
    if TMUX is None:
        pytest.skip("tmux is not installed (Debian: apt-get install tmux)")
    made: list[Terminal] = []
    with tempfile.TemporaryDirectory(prefix="gd-tmux-", dir="/tmp") as folder:  # a socket path short enough
        def start(command: str) -> Terminal:
            made.append(Terminal(command, Path(folder)))
            return made[-1]

        yield start
        for term in made:
            subprocess.run([TMUX, "-S", term.socket, "kill-server"], capture_output=True, timeout=10)


def top_command(root: Path, *node: str, args: str = "") -> str:
    return (f"cd {shlex.quote(str(REPO))} && PYTHONPATH=. {shlex.quote(sys.executable)} -m tests.support.top_node "
            f"{shlex.quote(str(root))} {' '.join(node)} -- top {args}")


def rows_of(text: str) -> dict[str, str]:
    """bus ID → its row, as the view shows it."""
    return {line.split()[1]: line for line in text.splitlines() if len(line.split()) > 2
            and line.split()[1].startswith("0000:")}


def test_the_view_shows_every_gpu_and_the_failing_check_and_q_restores_the_terminal(terminal, tmp_path):
    term = terminal(top_command(tmp_path, "nvidia", "4", "--fault", "2"))
    shown = term.wait(lambda text: len(rows_of(text)) == 4)
    assert shown.splitlines()[0].startswith("gpudiag top · ") and "collected by direct" in shown
    assert term.flag("alternate_on") == "1" and term.flag("cursor_flag") == "0"
    rows = rows_of(shown)
    assert rows["0000:4c:00.0"].split()[-1] == "fail:pcie.link_generation"
    assert [rows[bus].split()[-1] for bus in ("0000:19:00.0", "0000:3b:00.0", "0000:5d:00.0")] == ["ok"] * 3
    assert rows["0000:4c:00.0"].split()[:6] == ["2", "0000:4c:00.0", "74", "700", "27", "32"]
    first = shown.splitlines()[0]
    term.wait(lambda text: text.splitlines()[0] != first)  # redrawn at the next sample (its time in the title)
    term.tmux("send-keys", "q")
    after = term.wait(lambda text: "EXIT=" in text, timeout=10)
    assert "EXIT=0" in after and "gpudiag top" not in after  # the normal screen, as it was
    assert term.restored()


def test_ctrl_c_is_exit_130_with_the_terminal_restored(terminal, tmp_path):
    term = terminal(top_command(tmp_path, "nvidia", "2"))
    term.wait(lambda text: len(rows_of(text)) == 2)
    term.tmux("send-keys", "C-c")
    after = term.wait(lambda text: "EXIT=" in text, timeout=10)
    assert "EXIT=130" in after and "Traceback" not in after
    assert term.restored()


def test_through_the_service_an_amd_node_s_view_comes_from_the_service(terminal, tmp_path):
    from tests.support.fakes.fake_amdsmi import installed as amd_installed
    from tests.support.top_node import amd_node_of

    node = amd_node_of(2, fault=1)
    node_root(tmp_path, "amd", node)
    with amd_installed(node), running_service(tmp_path):
        term = terminal(top_command(tmp_path, "amd", "2", "--no-library", args="-c 3"))
        shown = term.wait(lambda text: "EXIT=" in text)  # -c 3: the last frame stays on the normal screen
    assert "collected by service" in shown and "EXIT=0" in shown
    rows = rows_of(shown)
    assert rows["0000:26:00.0"].split()[-1] == "fail:thermal.temperature"
    assert rows["0000:05:00.0"].split()[-1] == "ok"
    assert rows["0000:26:00.0"].split()[2:8] == ["180", "750", "104", "39", "132", "900"]  # amdsmi's, as served
    assert term.restored()


def test_through_the_service_a_pipe_gets_values_this_process_could_not_read(tmp_path):
    node = nvidia_node(4, fault=1)
    node_root(tmp_path, "nvidia", node)
    with installed(node), running_service(tmp_path):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.support.top_node",
                str(tmp_path),
                "nvidia",
                "4",
                "--no-library",
                "--",
                "top",
                "-c",
                "2",
                "-i",
                "1,2",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert [line[0] for line in lines] == ["#", "#", " ", " ", " ", " "]
    rows = [line.split() for line in lines[2:]]
    assert [(r[1], r[3], r[-1]) for r in rows] == [("1", "74", "fail:pcie.link_generation"), ("2", "74", "ok")] * 2


def test_a_reader_that_leaves_is_exit_0_without_noise(tmp_path):
    node_root(tmp_path, "nvidia", nvidia_node(2))
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `gpudiag top | true`: every write meets a closed pipe
    try:
        process = subprocess.Popen([sys.executable, "-m", "tests.support.top_node", str(tmp_path), "nvidia", "2", "--",
                                    "top", "--direct"], stdout=write_end, stderr=subprocess.PIPE, text=True,
                                   cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write_end)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0 and err == ""
