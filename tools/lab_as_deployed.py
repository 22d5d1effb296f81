"""On a real GPU node (as root): `gpudiag check --direct --json` as root and as the shipped units run gpudiag (the
`nobody` user in groups video and render, exactly CAP_SYSLOG, NoNewPrivileges), compared result by result. The fake
nodes of tests/e2e/test_as_deployed.py cannot show what the real vendor libraries refuse an unprivileged caller (NVML's
NO_PERMISSION answers, /dev/nvidia* modes, amdsmi's debugfs reads); this measures it (issue 33, item 1).

    PYTHONPATH=. python3 tools/lab_as_deployed.py

PYTHON=/path/to/python3 names an interpreter `nobody` can run (default: this one). Writes under $OUT (default
./lab-as-deployed): root.json, unit.json, unit.stderr, differences.txt (one line per
check and device whose status or action differs, or "none") and process.txt (the unprivileged run's credentials).
"""

from __future__ import annotations

import grp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534


def _groups() -> str:
    found = []
    for name in ("video", "render"):
        try:
            found.append(str(grp.getgrnam(name).gr_gid))
        except KeyError:
            pass
    return ",".join(found)


def _key(result: dict) -> tuple:
    return result["check"], (result["device"] or {}).get("pci_bus_id")


def main() -> int:
    if os.geteuid() != 0:
        print("run it as root", file=sys.stderr)
        return 2
    out = Path(os.environ.get("OUT", "lab-as-deployed"))
    out.mkdir(parents=True, exist_ok=True)
    copy = Path(tempfile.mkdtemp(prefix="gpudiag-lab-"))
    copy.chmod(0o755)
    shutil.copytree(REPO / "gpudiag", copy / "gpudiag", ignore=shutil.ignore_patterns("__pycache__"))
    for directory, dirs, files in os.walk(copy):
        for name in dirs + files:
            os.chmod(Path(directory) / name, 0o755 if name in dirs else 0o644)
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    # An interpreter `nobody` can run with its packages (PYTHON=...): one under /root (a pyenv) is out of its reach.
    check = [os.environ.get("PYTHON", sys.executable), "-m", "gpudiag", "check", "--direct", "--json"]
    as_root = subprocess.run(check, capture_output=True, text=True, env=env, cwd="/", timeout=300)
    (out / "root.json").write_text(as_root.stdout)
    unit = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", f"--groups={_groups() or NOBODY}",
            "--inh-caps=-all,+syslog", "--ambient-caps=-all,+syslog", "--bounding-set=-all,+syslog", "--no-new-privs",
            "sh", "-c", 'grep -E "^(Uid|Groups|Cap(Eff|Amb|Bnd))" /proc/self/status >&2; exec "$@"', "sh", *check]
    as_unit = subprocess.run(unit, capture_output=True, text=True, env={**env, "HOME": "/"}, cwd="/", timeout=300)
    (out / "unit.json").write_text(as_unit.stdout)
    (out / "unit.stderr").write_text(as_unit.stderr)
    (out / "process.txt").write_text("\n".join(line for line in as_unit.stderr.splitlines()
                                               if line.startswith(("Uid", "Groups", "Cap"))) + "\n")
    try:
        root_results = {_key(r): r for r in json.loads(as_root.stdout)["results"]}
        unit_results = {_key(r): r for r in json.loads(as_unit.stdout)["results"]}
    except (ValueError, KeyError) as exc:
        (out / "differences.txt").write_text(f"a report did not parse: {exc} (unit.stderr says why)\n")
        return 1
    lines = []
    for key in sorted(set(root_results) | set(unit_results), key=str):
        ours, theirs = root_results.get(key), unit_results.get(key)
        pick = (lambda r: (r["status"], r["action"]) if r else None)
        if pick(ours) != pick(theirs):
            lines.append(f"{key[0]} {key[1] or 'node'}: root {pick(ours)} / unit {pick(theirs)}: "
                         f"{(theirs or {}).get('message', '')[:300]}")
    (out / "differences.txt").write_text("\n".join(lines or ["none"]) + "\n")
    print(f"{len(lines)} difference(s); {out}/differences.txt")
    shutil.rmtree(copy, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
