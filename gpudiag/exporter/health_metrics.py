"""Per-GPU series of what the driver itself says about a GPU (DeviceSnapshot.driver_health): the NVSwitch fabric
state, the recovery action, unrepairable memory and the SRAM threshold. SRAM and DRAM ECC counts travel with the
other per-block ECC counts (gpudiag_gpu_ecc_block_errors_total{block="sram"|"dram"})."""

from __future__ import annotations

from typing import Optional

from gpudiag.exporter import catalog as m
from gpudiag.exporter.metric_set import MetricSet, flag
from gpudiag.model import DeviceSnapshot, DriverHealth

FABRIC_STATES = ("not_started", "in_progress", "completed")
FABRIC_SUMMARIES = ("healthy", "unhealthy", "limited_capacity")
RECOVERY_ACTIONS = ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset", "recover_imex_domain",
                    "bus_reset", "system_reboot")


def _state_set(fs: MetricSet, spec: m.MetricSpec, ids: tuple[str, ...], states: tuple[str, ...],
               current: Optional[str]) -> None:
    if current is None:
        return
    for state in states if current in states else (*states, current):
        fs.add(spec, ids + (state,), int(state == current))


def add_driver_health(fs: MetricSet, ids: tuple[str, ...], device: DeviceSnapshot) -> None:
    health: Optional[DriverHealth] = device.driver_health
    if health is None:
        return
    fabric = health.fabric
    if fabric is not None and fabric.state != "not_supported":
        _state_set(fs, m.FABRIC_STATE, ids, FABRIC_STATES, fabric.state)
        _state_set(fs, m.FABRIC_HEALTH, ids, FABRIC_SUMMARIES, fabric.health_summary)
    _state_set(fs, m.RECOVERY_ACTION, ids, RECOVERY_ACTIONS, health.recovery_action)
    fs.add(m.UNREPAIRABLE_MEMORY, ids, flag(health.unrepairable_memory))
    fs.add(m.SRAM_THRESHOLD_EXCEEDED, ids, flag(health.sram_threshold_exceeded))
