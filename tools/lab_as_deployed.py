"""On a real GPU node (as root): `gpudiag check --direct --json` as root and as the shipped units run gpudiag (the
`nobody` user in groups video and render, exactly CAP_SYSLOG, NoNewPrivileges), compared result by result. The fake
nodes of tests/e2e/test_as_deployed.py cannot show what the real vendor libraries refuse an unprivileged caller (NVML's
NO_PERMISSION answers, /dev/nvidia* modes, amdsmi's debugfs reads); this measures it (issue 33, item 1).

    PYTHONPATH=. OUT=/some/dir python3 tools/lab_as_deployed.py

Standard library only (no pytest, no checkout on the unprivileged side's path). gpudiag/ and the distributions it
runs on (nvidia-ml-py, psutil, typer, … and amdsmi where installed) are copied into a directory every user can read,
and both runs import them from there. The interpreter: this one (or PYTHON=/path) when `nobody` can run it with
them; else a system Python of the same version; else a copy of this interpreter and its standard library (a pyenv
under /root, mode 0700, is out of `nobody`'s reach, and its libpython with it); else nothing runs and
differences.txt says why, for each interpreter tried.

Writes under $OUT (default ./lab-as-deployed): root.json, unit.json, unit.stderr, differences.txt (one line per
check and device whose status or action differs, or "none") and process.txt (the interpreter used and how it was
found, and the unprivileged run's credentials as /proc/self/status shows them).
"""

from __future__ import annotations

import glob
import grp
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534
# What gpudiag imports at run time (pyproject.toml's dependencies) and amdsmi on AMD nodes; those not installed here
# are left out (the root run then misses them too).
DISTRIBUTIONS = ("nvidia-ml-py", "psutil", "typer", "prometheus-client", "PyYAML", "bcrypt", "tomli", "amdsmi")
# An interpreter serves when, as the unit's user, it imports these: its standard library (3.11+ starts from frozen
# modules, so that it starts proves nothing), the compiled ones, and the copied gpudiag.
PROBE = "import ctypes, json, sqlite3, psutil, pynvml, gpudiag.cli.check.direct"
# Parts of a standard library no check imports: left out of a copy.
NOT_COPIED = ("site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip",
              "__pycache__", "*.pyc")


def _groups() -> str:
    found = []
    for name in ("video", "render"):
        try:
            found.append(str(grp.getgrnam(name).gr_gid))
        except KeyError:
            pass
    return ",".join(found)


def as_unit(command: list[str]) -> list[str]:
    """`command` with the units' credentials: nobody, video/render, exactly CAP_SYSLOG, NoNewPrivileges."""
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", f"--groups={_groups() or NOBODY}",
            "--inh-caps=-all,+syslog", "--ambient-caps=-all,+syslog", "--bounding-set=-all,+syslog", "--no-new-privs",
            "sh", "-c", 'grep -E "^(Uid|Groups|Cap(Eff|Amb|Bnd))" /proc/self/status >&2; exec "$@"', "sh", *command]


def _requirement_names(name: str, seen: set[str]) -> None:
    """`name` and what it requires (no extras), as installed here; names not installed are skipped."""
    key = name.lower().replace("_", "-")
    if key in seen:
        return
    try:
        requires = importlib.metadata.distribution(name).requires or []
    except importlib.metadata.PackageNotFoundError:
        return
    seen.add(key)
    for text in requires:
        if "extra ==" in text:
            continue
        match = re.match(r"[A-Za-z0-9._-]+", text)
        if match:
            _requirement_names(match.group(0), seen)


def copy_distributions(runtime: Path) -> list[str]:
    """The installed distributions gpudiag runs on (DISTRIBUTIONS and what they require), into `runtime` as they lie
    in site-packages; their names. tests/support/as_deployed.py copies them alike for the fake nodes."""
    names: set[str] = set()
    for name in DISTRIBUTIONS:
        _requirement_names(name, names)
    for name in sorted(names):
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or []:
            source = Path(distribution.locate_file(file))
            if source.is_file() and not str(file).startswith(("..", "/")) and "__pycache__" not in str(file):
                target = runtime / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    return sorted(names)


def open_up(directory: Path) -> None:
    """Every user may read (and run) what lies under `directory`."""
    directory.chmod(0o755)
    for parent, dirs, files in os.walk(directory):
        for name in dirs + files:
            entry = Path(parent) / name
            if not entry.is_symlink():
                entry.chmod(0o755 if name in dirs or os.access(entry, os.X_OK) else 0o644)


def _probe(python: str, env: dict[str, str], unit: bool = True) -> tuple[bool, str]:
    """Whether the unit's user (or root) can run `python` with everything gpudiag imports, and if not, why (its last
    words)."""
    command = [python, "-c", PROBE]
    try:
        run = subprocess.run(as_unit(command) if unit else command, capture_output=True, text=True, env=env, cwd="/",
                             timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if run.returncode == 0:
        return True, ""
    words = [line for line in run.stderr.splitlines() if not line.startswith(("Uid", "Groups", "Cap"))]
    return False, (words[-1] if words else f"exit {run.returncode}")[:300]


def _candidates() -> list[str]:
    """PYTHON=…, this interpreter, then the system's of the same version (compiled modules are built for it)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [os.environ.get("PYTHON"), sys.executable, shutil.which(version), f"/usr/bin/{version}",
             f"/usr/local/bin/{version}"]
    unique: list[str] = []
    for path in found:
        if path and os.path.isfile(path) and os.path.realpath(path) not in map(os.path.realpath, unique):
            unique.append(path)
    return unique


def copy_interpreter(home: Path) -> tuple[str, dict[str, str]]:
    """This interpreter, its standard library (without its site-packages and tests) and its libpython under `home`;
    the executable and the environment that makes it find them (PYTHONHOME, LD_LIBRARY_PATH)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(stdlib, home / "lib" / stdlib.name, ignore=shutil.ignore_patterns(*NOT_COPIED))
    platstdlib = Path(sysconfig.get_paths()["platstdlib"])
    dynload = platstdlib / "lib-dynload"
    if dynload.is_dir() and not (home / "lib" / stdlib.name / "lib-dynload").exists():
        shutil.copytree(dynload, home / "lib" / stdlib.name / "lib-dynload")
    for library in glob.glob(os.path.join(sysconfig.get_config_var("LIBDIR") or "/nonexistent", "libpython3*.so*")):
        shutil.copy2(library, home / "lib")
    (home / "bin").mkdir(parents=True, exist_ok=True)
    python = home / "bin" / "python3"
    shutil.copy2(os.path.realpath(sys.executable), python)
    return str(python), {"PYTHONHOME": str(home), "LD_LIBRARY_PATH": str(home / "lib")}


def interpreter(runtime: Path, env: dict[str, str]) -> tuple[Optional[str], dict[str, str], str]:
    """(the interpreter both runs use, its environment, how it was found), or (None, env, why none serves)."""
    works, why = _probe(sys.executable, env, unit=False)
    if not works:  # root itself cannot run gpudiag with what is installed here: nothing to compare
        return None, env, f"{sys.executable} cannot import what gpudiag needs, even as root: {why}"
    tried = []
    for python in _candidates():
        works, why = _probe(python, env)
        if works:
            return python, env, f"{python}: the unit's user runs it" + (f" (tried first: {'; '.join(tried)})"
                                                                          if tried else "")
        tried.append(f"{python}: {why}")
    try:
        python, extra = copy_interpreter(runtime / "python")
        open_up(runtime)
    except OSError as exc:
        return None, env, "; ".join(tried + [f"copying {sys.executable} failed: {exc}"])
    copied = {**env, **extra}
    works, why = _probe(python, copied)
    if works:
        return python, copied, (f"a copy of {os.path.realpath(sys.executable)} and its standard library in "
                                f"{runtime / 'python'}, since the unit's user cannot run the others: "
                                f"{'; '.join(tried)}")
    return None, env, "; ".join(tried + [f"the copy {python}: {why}"])


def _key(result: dict) -> tuple:
    return result["check"], (result["device"] or {}).get("pci_bus_id")


def differences(root_report: str, unit_report: str) -> list[str]:
    """One line per check and device whose (status, action) differs between the two reports."""
    root_results = {_key(r): r for r in json.loads(root_report)["results"]}
    unit_results = {_key(r): r for r in json.loads(unit_report)["results"]}
    lines = []
    for key in sorted(set(root_results) | set(unit_results), key=str):
        ours, theirs = root_results.get(key), unit_results.get(key)
        pick = (lambda r: (r["status"], r["action"]) if r else None)
        if pick(ours) != pick(theirs):
            lines.append(f"{key[0]} {key[1] or 'node'}: root {pick(ours)} / unit {pick(theirs)}: "
                         f"{(theirs or {}).get('message', '')[:300]}")
    return lines


def main() -> int:
    if os.geteuid() != 0:
        print("run it as root: it compares root's verdicts with the unit user's", file=sys.stderr)
        return 2
    out = Path(os.environ.get("OUT", "lab-as-deployed"))
    out.mkdir(parents=True, exist_ok=True)
    runtime = Path(tempfile.mkdtemp(prefix="gpudiag-lab-"))
    try:
        shutil.copytree(REPO / "gpudiag", runtime / "gpudiag", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        copied = copy_distributions(runtime)
        open_up(runtime)
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(runtime), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8", "HOME": "/"}
        python, env, how = interpreter(runtime, env)
        (out / "process.txt").write_text(f"interpreter: {how}\ndistributions copied: {', '.join(copied)}\n")
        if python is None:
            (out / "differences.txt").write_text(f"not compared: no interpreter the unit's user can run: {how}\n")
            print(f"not compared: {how}", file=sys.stderr)
            return 3
        check = [python, "-m", "gpudiag", "check", "--direct", "--json"]
        as_root = subprocess.run(check, capture_output=True, text=True, env=env, cwd="/", timeout=300)
        (out / "root.json").write_text(as_root.stdout)
        as_nobody = subprocess.run(as_unit(check), capture_output=True, text=True, env=env, cwd="/", timeout=300)
        (out / "unit.json").write_text(as_nobody.stdout)
        (out / "unit.stderr").write_text(as_nobody.stderr)
        with open(out / "process.txt", "a") as process:
            process.write("\n".join(line for line in as_nobody.stderr.splitlines()
                                    if line.startswith(("Uid", "Groups", "Cap"))) + "\n")
        try:
            lines = differences(as_root.stdout, as_nobody.stdout)
        except (ValueError, KeyError) as exc:
            (out / "differences.txt").write_text(f"a report did not parse: {exc} (root exit {as_root.returncode}, "
                                                 f"unit exit {as_nobody.returncode}; unit.stderr says why)\n")
            return 1
        (out / "differences.txt").write_text("\n".join(lines or ["none"]) + "\n")
        print(f"{len(lines)} difference(s); {out}/differences.txt")
        return 0
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
