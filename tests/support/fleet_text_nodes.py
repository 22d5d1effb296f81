"""A fleet of 14 nodes as a Prometheus scraping their `gpudiag serve` answers `gpudiag fleet --prometheus`: each
node's check series (gpudiag_check_ok 1 for pass/warn/skip, 0 for fail/unknown; gpudiag_check_status) come from
what `gpudiag check --json` judged on a node of tests/support/checklist_scenarios.py, its GPUs and their answering state
from the same report, so that the fleet text of tests/e2e/test_fleet_text.py is measured over what real checks say.

Nodes: 8 healthy, a lost GPU (nvidia-gpu-lost), a hung GPU (nvidia-gpu-hung), a GPU at x8 (nvidia-pcie-width-x8), two
NVLinks down (nvidia-nvlink-down), eight GPUs of the wrong model (profile-mismatch) and a target that is down.
"""

from __future__ import annotations

import json
from functools import lru_cache

from tests.support.checklist_scenarios import checklist
from tests.support.prometheus_stand_in import sample, success

FAULTY = {"gpu09:9858": "nvidia-gpu-lost", "gpu10:9858": "nvidia-gpu-hung", "gpu11:9858": "nvidia-pcie-width-x8",
          "gpu12:9858": "nvidia-nvlink-down", "gpu13:9858": "profile-mismatch"}
HEALTHY = [f"gpu0{i}:9858" for i in range(1, 9)]
DOWN = "gpu14:9858"


@lru_cache(maxsize=None)
def _results(scenario: str) -> tuple:
    _, report = checklist(scenario, "--json")
    return tuple(json.loads(report)["results"])


def _series(instance: str) -> list[dict]:
    """(check, gpu, status) of each result the node's exporter would export."""
    scenario = FAULTY.get(instance, "nvidia-healthy")
    return [{"check": r["check"], "gpu": "" if r["device"] is None else str(r["device"]["index"]),
             "pci_bus_id": (r["device"] or {}).get("pci_bus_id") or "", "status": r["status"]}
            for r in _results(scenario)]


def prepare() -> None:
    """Judge every node first (in this thread: `gpudiag check` writes to this process's stdout), before a stand-in
    Prometheus answers from them."""
    for scenario in {"nvidia-healthy", *FAULTY.values()}:
        _results(scenario)


def answers(promql: str, headers: dict) -> tuple[int, dict]:
    """What Prometheus answers fleet.prometheus's queries over these nodes (the queries it does not need: none)."""
    judged = [*HEALTHY, *FAULTY]
    if promql.startswith("up{"):
        return success([sample(1, instance=i) for i in judged] + [sample(0, instance=DOWN)])
    if "gpudiag_build_info" in promql:
        return success([sample(1, instance=i) for i in judged])
    if "gpudiag_last_collection_timestamp_seconds" in promql:
        return success([sample(5.0, instance=i) for i in judged])
    if promql.startswith("count_values by (instance)") and "gpudiag_check_ok" in promql:
        counts = []
        for instance in judged:
            oks = [s["status"] not in ("fail", "unknown") for s in _series(instance)]
            counts += [sample(oks.count(True), instance=instance, ok="1")]
            counts += [sample(oks.count(False), instance=instance, ok="0")] if not all(oks) else []
        return success(counts)
    if "gpudiag_check_ok" in promql:  # != 1
        return success([sample(0, instance=i, check=s["check"], gpu=s["gpu"]) for i in judged for s in _series(i)
                        if s["status"] in ("fail", "unknown") and i in promql])
    if "gpudiag_check_status" in promql:  # status="unknown" == 1
        return success([sample(1, instance=i, check=s["check"], gpu=s["gpu"], status="unknown") for i in judged
                        for s in _series(i) if s["status"] == "unknown" and i in promql])
    if "gpudiag_device_up" in promql:  # != 1: the GPU that does not answer
        lost = [(i, s) for i in judged for s in _series(i) if s["check"] == "inventory.gpus_visible"
                and s["status"] == "fail"]
        return success([sample(0, instance=i, gpu=s["gpu"], pci_bus_id=s["pci_bus_id"]) for i, s in lost])
    if "gpudiag_gpu_info" in promql:
        gpus = {(i, s["gpu"], s["pci_bus_id"]) for i in judged for s in _series(i) if s["gpu"]}
        return success([sample(1, instance=i, gpu=gpu, pci_bus_id=bus, model="NVIDIA H200",
                               driver_version="550.127.05", vbios_version="96.00.A5.00.1A") for i, gpu, bus in gpus])
    return success([])
