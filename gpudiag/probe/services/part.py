"""The services family's probe part: the host services a GPU node depends on, from systemd's own view of each unit
(`systemctl show -p Id,LoadState,ActiveState,SubState,NRestarts`, run from the root being read, so a fake root brings
its own systemctl) and /proc and /dev: nvidia_peermem in /proc/modules, the amdgpu KFD node /dev/kfd and the DRM
render nodes /dev/dri/renderD*. The reading is kept in NodeSnapshot.parts["services"] as plain values.

systemctl runs bounded by the collection's deadline (5 s at most); one that fails, hangs or prints what is not
systemctl's `show` output leaves the units unread ("error"), never an empty list: the checks say unknown.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from gpudiag.model import ErrorKind, NodeSnapshot, ProbeError

# The units gpudiag looks at: NVIDIA's fabric manager (NVSwitch systems), persistence daemon and IMEX daemon
# (multi-node NVLink), and AMD's ROCm Data Center daemon (rdc.service, ROCm's RDC package).
UNITS = ("nvidia-fabricmanager.service", "nvidia-persistenced.service", "nvidia-imex.service", "rdc.service")
PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "NRestarts")
MAX_SECONDS = 5.0
MAX_OUTPUT = 64 * 1024


def _systemctl(root: str) -> Optional[str]:
    for path in ("usr/bin/systemctl", "bin/systemctl"):
        candidate = os.path.join(root, path)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def parse_show(text: str) -> dict[str, dict]:
    """`systemctl show` output (KEY=value lines, one blank-line-separated block per unit) -> unit -> its state. A
    block without Id, or a unit gpudiag did not ask for, is left out; NRestarts that is no number is None."""
    units = {}
    for block in text.split("\n\n"):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        unit = values.get("Id")
        if unit not in UNITS:
            continue
        restarts = values.get("NRestarts", "")
        units[unit] = {"load": values.get("LoadState"), "active": values.get("ActiveState"),
                       "sub": values.get("SubState"),
                       "restarts": int(restarts) if restarts.isascii() and restarts.isdigit() and len(restarts) < 10
                       else None}
    return units


def read_units(root: str, until: float) -> tuple[dict[str, dict], Optional[str]]:
    """(unit -> state, None) or ({}, why they could not be read)."""
    program = _systemctl(root)
    if program is None:
        return {}, f"no systemctl under {root}"
    timeout = min(MAX_SECONDS, until - time.monotonic())
    if timeout <= 0:
        return {}, "the collection's deadline passed before systemctl ran"
    import subprocess  # here: a process that only stores the part runs nothing

    try:
        done = subprocess.run([program, "show", "-p", ",".join(PROPERTIES), "--", *UNITS], capture_output=True,
                              timeout=timeout, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin", "SYSTEMD_PAGER": ""})
    except subprocess.TimeoutExpired:
        return {}, f"systemctl show did not answer within {timeout:.1f} s"
    except OSError as exc:
        return {}, f"systemctl could not run: {exc.strerror or exc}"
    if done.returncode != 0:
        return {}, f"systemctl show exited {done.returncode}: {done.stderr.decode(errors='replace')[:200].strip()}"
    units = parse_show(done.stdout[:MAX_OUTPUT].decode("utf-8", errors="replace"))
    if set(units) != set(UNITS):
        return {}, f"systemctl show left out {sorted(set(UNITS) - set(units))}"
    return units, None


def _modules(root: str) -> Optional[list[str]]:
    try:
        with open(os.path.join(root, "proc/modules"), encoding="ascii", errors="replace") as handle:
            return sorted({line.split(" ", 1)[0] for line in handle.read(1 << 20).splitlines() if line})
    except OSError:
        return None


def collect(snapshot: NodeSnapshot, options, until: float) -> dict:
    root = str(options.root)
    units, error = read_units(root, until)
    dri = os.path.join(root, "dev/dri")
    try:
        render = sorted(name for name in os.listdir(dri) if name.startswith("renderD"))
    except OSError:
        render = []
    # No systemctl at all (a container that sees the host's /dev but not its systemd) is told apart from one that
    # failed: the checks skip the units there rather than say unknown on every containerised node.
    return {"units": units, "error": error, "systemd": _systemctl(root) is not None, "modules": _modules(root),
            # no /dev under the root (a sysfs-only replay, a container without the host's /dev): not read, None
            "kfd": os.path.exists(os.path.join(root, "dev/kfd")) if os.path.isdir(os.path.join(root, "dev")) else None,
            "render_nodes": render}


def store(snapshot: NodeSnapshot, value: Optional[dict], error: Optional[ProbeError]) -> None:
    if value is None:  # fail closed: the checks see why, never an empty reading
        why = error.message if error is not None else "not read"
        value = {"units": {}, "error": why, "systemd": None, "modules": None, "kfd": None, "render_nodes": None}
        snapshot.errors.append(error or ProbeError("services", ErrorKind.ERROR, why))
    snapshot.parts["services"] = value
