"""The services family's metrics: each GPU service unit's state as systemd reports it (probe/services/part.py)."""

from __future__ import annotations

from gpudiag.exporter import catalog
from gpudiag.model import NodeSnapshot

UNIT_ACTIVE = catalog.define("gpudiag_service_unit_active", "gauge",
                             "1 when systemd reports the GPU service unit active, 0 when it is not; absent: not read.",
                             ("unit",))
UNIT_RESTARTS = catalog.define("gpudiag_service_unit_restarts_total", "counter",
                               "Times systemd restarted the GPU service unit (NRestarts) since it was last started.",
                               ("unit",))


def add(fs, snapshot: NodeSnapshot) -> None:
    reading = snapshot.parts.get("services") or {}
    for unit, state in sorted((reading.get("units") or {}).items()):
        if state.get("load") != "loaded":
            continue  # not installed: no series, rather than a 0 that pages
        fs.add(UNIT_ACTIVE, (unit,), int(state.get("active") == "active"))
        if state.get("restarts") is not None:
            fs.add(UNIT_RESTARTS, (unit,), state["restarts"])
