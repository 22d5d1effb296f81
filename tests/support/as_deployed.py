"""gpudiag run as the shipped systemd units run it, and as root, over one fake node
(tests/support/as_deployed_nodes.py): the privileges, the file-system view and the commands of the units themselves,
read from systemd/*.service.

As the units (`unit_run`), per command line of the unit:
- `ExecStartPre=+…` runs as root with every privilege and none of the sandbox, as systemd.service(5) says of "+";
- `ExecStart=` runs under `setpriv` with the unit's User=/Group= (the numbers of tests/support/as_user.py), its
  SupplementaryGroups= (video and render: their numbers on this machine), exactly its capabilities
  (CapabilityBoundingSet=, AmbientCapabilities=: inheritable, ambient and bounding set, nothing else), NoNewPrivileges=
  and SecureBits=, its UMask=, inside a mount namespace (`unshare --mount`) that shows the tree as the kernel shows
  it to that process:
  - a PCI function's `config` gives a reader without CAP_SYS_ADMIN its first 64 bytes only (drivers/pci/pci-sysfs.c,
    pci_read_config: `if (!capable(CAP_SYS_ADMIN)) size = 64`... of the header): each config file is overmounted
    with its first 64 bytes;
  - PrivateNetwork=yes gives the unit a network namespace of its own and a fresh sysfs mounted in it (systemd
    src/core/namespace.c: `if (p->private_network)` adds `/sys` as MOUNT_PRIVATE_SYSFS), where /sys/class/net and
    every device's net/ directory list that namespace's interfaces (only lo), not the host's: those directories are
    overmounted empty;
  - StateDirectory=/RuntimeDirectory= are the unit user's (ROOT/var/lib/gpudiag, ROOT/run/gpudiag, mode 0755);
    ProtectSystem=strict leaves the rest read-only, which the tree's owner (root) already makes it for this user.
- The tree itself carries the kernel's modes where they keep an unprivileged reader out: sys/kernel/debug is 0700
  root (fs/debugfs/inode.c, DEBUGFS_DEFAULT_MODE). /dev/kmsg is the kernel's 0644 (drivers/char/mem.c devlist
  "kmsg", 0644); with kernel.dmesg_restrict=1 the kernel lets a reader in only with CAP_SYSLOG (kernel/printk/printk.c
  check_syslog_permissions), which the units grant: `unit_run` checks that the process holds it.

As root (`root_run`): the same command lines (without ExecStartPre=), as uid 0 with every capability, no namespace.

Both run over copies of one tree, each with its own state directory; each runs `gpudiag textfile` (the textfile
unit's ExecStart) and then `gpudiag serve` (the exporter unit's), and `verdicts` gives every result of each: the
textfile's gpudiag_check_status series, and the JSON report the service's socket answers `check` with.

The gpudiag processes run from a copy of this tree's gpudiag/ and tests/ and of the installed distributions gpudiag
needs (and amdsmi), in a directory every user can read (`Runtime`): the test machine's interpreter and checkout may
lie under a directory other users cannot enter (a pyenv under /root, 0700; tests/support/as_user.py).
"""

from __future__ import annotations

import concurrent.futures
import grp
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.support.as_user import GPUDIAG
from tests.support.exporter import parse
from tests.support.paths import REPO
from tests.support.tools import load_tool

UNITS = REPO / "systemd"
TEXTFILE_UNIT, EXPORTER_UNIT = "gpudiag-check.service", "gpudiag-exporter.service"
TIMEOUT = "3"  # the collection deadline: a hung GPU's answer waits for it
CAPABILITY_BITS = {"CAP_SYSLOG": 34}  # include/uapi/linux/capability.h
# Groups the units name, where this machine has no such group: numbers no account has (as tests/support/as_user.py's).
_STAND_IN_GIDS = {"video": 64105, "render": 64106}


# -- the units ----------------------------------------------------------------------------------------------------


@dataclass
class Unit:
    """What a shipped unit says about how its commands run."""

    name: str
    settings: dict[str, list[str]] = field(default_factory=dict)  # key -> every value given, in order

    @classmethod
    def read(cls, name: str) -> "Unit":
        unit = cls(name)
        for line in (UNITS / name).read_text().splitlines():
            if "=" in line and not line.startswith(("#", "[")):
                key, _, value = line.partition("=")
                unit.settings.setdefault(key.strip(), []).append(value.strip())
        return unit

    def one(self, key: str, default: str = "") -> str:
        return self.settings.get(key, [default])[-1]

    def words(self, key: str) -> list[str]:
        return [w for value in self.settings.get(key, []) for w in value.split()]

    @property
    def start_pre(self) -> list[list[str]]:
        return [shlex.split(v) for v in self.settings.get("ExecStartPre", [])]

    @property
    def start(self) -> list[str]:
        (command,) = self.settings["ExecStart"]
        return shlex.split(command)

    def capabilities(self) -> list[str]:
        return self.words("CapabilityBoundingSet")

    def groups(self) -> list[int]:
        ids = []
        for name in self.words("SupplementaryGroups"):
            try:
                ids.append(grp.getgrnam(name).gr_gid)
            except KeyError:
                ids.append(_STAND_IN_GIDS[name])
        return ids


# -- the runtime other users can read ------------------------------------------------------------------------------


class Runtime:
    """gpudiag/, tests/ and the distributions gpudiag needs at run time (and amdsmi), copied where every user can
    read them, and an interpreter every user can run."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="gpudiag-deployed-"))
        self.path.chmod(0o755)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for package in ("gpudiag", "tests"):
            shutil.copytree(REPO / package, self.path / package, ignore=ignore, symlinks=True)
        lab = load_tool("lab_as_deployed")  # the lab's measurement copies the same distributions the same way
        lab.copy_distributions(self.path)
        for directory, dirs, files in os.walk(self.path):
            for name in dirs + files:
                entry = Path(directory) / name
                if not entry.is_symlink():
                    entry.chmod(0o755 if entry.is_dir() else 0o644)
        self.python = self._interpreter()

    def _interpreter(self) -> Optional[str]:
        """sys.executable where another user can run it with its whole standard library (3.11 starts from frozen
        modules: that it starts proves nothing), else the system's Python of the same version."""
        for candidate in (sys.executable, "/usr/bin/python3"):
            probe = subprocess.run(["setpriv", f"--reuid={GPUDIAG}", f"--regid={GPUDIAG}", "--clear-groups",
                                    "--inh-caps=-all", "--bounding-set=-all", "sh", "-c", 'exec "$@"', "sh",
                                    candidate, "-c", "import json, sqlite3, gpudiag.cli.app, "
                                                     "tests.support.as_deployed_nodes"],
                                   capture_output=True, text=True, timeout=60, env=self.env(Path("/")), cwd="/")
            if probe.returncode == 0:
                return candidate
        return None

    def env(self, home: Path) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(self.path), "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8", "HOME": str(home), "GPUDIAG_LISTEN": "127.0.0.1:0"}

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# -- the kernel's view ---------------------------------------------------------------------------------------------


def kernel_modes(root: Path) -> None:
    """What the kernel keeps from an unprivileged reader, with the kernel's modes (see the module docstring)."""
    debugfs = root / "sys/kernel/debug"
    debugfs.mkdir(parents=True, exist_ok=True)
    debugfs.chmod(0o700)


def unit_directories(root: Path, owner: int) -> None:
    """StateDirectory= and RuntimeDirectory=: the unit user's (root's for root's own runs), 0755 (the units'
    *DirectoryMode=)."""
    for relative in ("var/lib/gpudiag", "run/gpudiag"):
        directory = root / relative
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, owner, owner)
        directory.chmod(0o755)


# -- running ------------------------------------------------------------------------------------------------------


def _caps(names: list[str]) -> str:
    """CAP_SYSLOG ... as setpriv's capability list: every other one dropped."""
    return ",".join(["-all", *(f"+{name.removeprefix('CAP_').lower()}" for name in names)])


def _setpriv(unit: Unit) -> list[str]:
    bounding = _caps(unit.capabilities())
    argv = ["setpriv", f"--reuid={GPUDIAG}", f"--regid={GPUDIAG}",
            f"--groups={','.join(str(g) for g in unit.groups())}", f"--inh-caps={bounding}",
            f"--ambient-caps={_caps(unit.words('AmbientCapabilities'))}", f"--bounding-set={bounding}"]
    if unit.one("NoNewPrivileges") == "yes":
        argv.append("--no-new-privs")
    if "noroot-locked" in unit.words("SecureBits"):
        argv.append("--securebits=+noroot,+noroot_locked")
    return argv


@dataclass
class Deployment:
    """One node's tree, judged by one side: "root" or "unit"."""

    runtime: Runtime
    node: str
    root: Path
    side: str
    args: tuple[str, ...]
    pre: bool = True  # run the units' ExecStartPre= (False: a check that the sandbox alone hides what root records)

    @property
    def state(self) -> Path:
        return self.root / "var/lib/gpudiag"

    @property
    def socket(self) -> Path:
        return self.root / "run/gpudiag/gpudiag.sock"

    def _gpudiag(self) -> list[str]:
        return [self.runtime.python, "-m", "tests.support.as_deployed_nodes", self.node, str(self.root), "--"]

    def _command(self, unit: Unit, words: list[str]) -> list[str]:
        """A unit's command line on this tree: the installed gpudiag is this node's, its paths under the root."""
        out: list[str] = []
        for word in words:
            if word == "/usr/local/bin/gpudiag":
                out += self._gpudiag()
            elif word == "$GPUDIAG_ARGS":
                out += ["--root", str(self.root), "--timeout", TIMEOUT, *self.args]
            elif word.startswith(("/var/lib/gpudiag", "/run/gpudiag")):
                out.append(str(self.root) + word)
            else:
                out.append(word)
        return out

    def _wrap(self, unit: Unit, command: list[str]) -> list[str]:
        if self.side == "root":
            return command
        private = ["--private-network"] if unit.one("PrivateNetwork") == "yes" else []
        umask = int(unit.one("UMask", "0022"), 8)
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            self.runtime.python,
            "-m",
            "tests.support.unit_view",
            str(self.root),
            *private,
            "--",
            *_setpriv(unit),
            "sh",
            "-c",
            f'umask {umask:04o}; exec "$@"',
            "sh",
            *command,
        ]

    def _env(self) -> dict[str, str]:
        return self.runtime.env(self.state if self.side == "unit" else Path("/root"))

    def _pre(self, unit: Unit) -> None:
        """ExecStartPre=+: as root, outside the sandbox (only the unit side runs them: root reads for itself), on this
        tree (--root). Its "-" (failure ignored) is not honoured here: a failure fails the test."""
        if self.side == "root" or not self.pre:
            return
        for words in unit.start_pre:
            prefix = re.match(r"[-@:+!]*", words[0]).group()
            assert "+" in prefix, f"{unit.name}: ExecStartPre={' '.join(words)} runs sandboxed, as the service's user"
            command = self._command(unit, [words[0][len(prefix):], *words[1:]]) + ["--root", str(self.root)]
            done = subprocess.run(command, env=self._env(), capture_output=True, text=True, timeout=120, cwd="/")
            assert done.returncode == 0, f"{unit.name} ExecStartPre: {done.stderr[-2000:]}"

    def textfile(self) -> dict[tuple, str]:
        unit = Unit.read(TEXTFILE_UNIT)
        self._pre(unit)
        done = subprocess.run(self._wrap(unit, self._command(unit, unit.start)), env=self._env(),
                              capture_output=True, text=True, timeout=180, cwd="/")
        assert done.returncode in (0, 3), (
            f"{self.node} textfile as {self.side}: {done.returncode} {done.stderr[-3000:]}"
        )
        text = (self.state / "gpudiag.prom").read_text()
        return {(labels["check"], labels["pci_bus_id"] or None): labels["status"]
                for name, labels, value in parse(text) if name == "gpudiag_check_status" and value == 1}

    def serve(self) -> tuple[list[dict], Optional[str]]:
        """The service's `check` answer (JSON) over its first collection, and what /proc says of the process."""
        unit = Unit.read(EXPORTER_UNIT)
        self._pre(unit)
        command = self._wrap(unit, [*self._command(unit, unit.start), "--interval", "3600"])
        process = subprocess.Popen(command, env=self._env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   cwd="/", start_new_session=True)
        status = None
        try:
            answer = self._ask(process)
            if answer is not None:
                status = Path(f"/proc/{process.pid}/status").read_text()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            try:
                _, errors = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                _, errors = process.communicate()
        assert answer is not None, f"{self.node} serve as {self.side}: no answer; {errors.decode()[-3000:]}"
        return json.loads(answer["stdout"])["results"], status

    def _ask(self, process: subprocess.Popen) -> Optional[dict]:
        request = {"op": "check", "format": "json", "wait": 30, "params": []}
        words = list(self.args)
        while words:
            flag, value = words.pop(0), words.pop(0)
            if flag == "--profile":
                request["profile"] = value
            elif flag == "--timeout":
                continue  # the service's own deadline, given on its command line (_command), not asked for
            else:
                request["params"].append(value)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(40)
                    sock.connect(str(self.socket))
                    sock.sendall(json.dumps(request).encode() + b"\n")
                    data = b""
                    while chunk := sock.recv(65536):
                        data += chunk
                answer = json.loads(data)
                if answer.get("ok"):
                    return answer
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        return None


def capabilities(status: str) -> dict[str, int]:
    """Uid and the capability sets of a /proc/<pid>/status."""
    found = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Cap"):
            found[key] = int(value.strip(), 16)
        elif key in ("Uid", "Gid"):
            found[key] = int(value.split()[1])  # the effective ID
        elif key == "NoNewPrivs":
            found[key] = int(value.strip())
    return found


def unit_capability_mask(unit_name: str) -> int:
    return sum(1 << CAPABILITY_BITS[c] for c in Unit.read(unit_name).capabilities())


def as_results(results: list[dict]) -> dict[tuple, tuple[str, str]]:
    """(check, bus ID) -> (status, action), the worst where a check has several results on one device (as the
    metrics keep the worst)."""
    order = ["pass", "skip", "warn", "unknown", "fail"]
    out: dict[tuple, tuple[str, str]] = {}
    for result in results:
        key = (result["check"], (result["device"] or {}).get("pci_bus_id"))
        if key not in out or order.index(result["status"]) > order.index(out[key][0]):
            out[key] = (result["status"], result["action"])
    return out


def judge_both_ways(runtime: Runtime, spec, workdir: Path, pre: bool = True) -> dict[str, dict]:
    """The node's tree written once, copied for each side; each side's textfile and service verdicts. `pre`: run
    the units' ExecStartPre= on the unit side."""
    built = workdir / "built"
    built.mkdir()
    spec.make(built)
    kernel_modes(built)

    def judge(side: str) -> dict:
        root = workdir / side
        shutil.copytree(built, root, symlinks=True)
        root.chmod(0o755)
        unit_directories(root, GPUDIAG if side == "unit" else 0)
        deployment = Deployment(runtime, spec.name, root, side, spec.args, pre)
        textfile = deployment.textfile()
        results, status = deployment.serve()
        return {"textfile": textfile, "serve": as_results(results), "raw": results,
                "process": capabilities(status or "")}

    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two trees, two state directories: independent
        futures = {side: pool.submit(judge, side) for side in ("root", "unit")}
        return {side: future.result() for side, future in futures.items()}
