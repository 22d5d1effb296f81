"""A fleet of `gpudiag check --level 2 --format json` reports made from the real one recorded on the lab's H200
(tests/fixtures/h200/recorded/check-level2.json): each node gets its GPUs (the template's per-GPU results repeated
with HGX bus IDs), its own hostname, measured figures spread a little as real runs are, and whatever a test
changes (a slow copy, another firmware, a failing check)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Callable, Optional

from tests.support.paths import FIXTURES

TEMPLATE = FIXTURES / "h200" / "recorded" / "check-level2.json"
BUS_IDS = ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
           "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0")
VBIOS = "96.00.A5.00.1A"  # as the lab's 2x H200 reports (tests/golden/h200x2.check.json)
FIRMWARE = {"inforom_ecc": "7.16", "inforom_image": "G520.0282.02.02", "inforom_oem": "2.1"}

Edit = Callable[[dict], None]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """`gpudiag fleet ARGV...` in this process: (exit code, stdout, stderr)."""
    from gpudiag.cli import app as cli

    code = cli.main(["fleet", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def statuses(out: str) -> dict[str, str]:
    """node → status, from `gpudiag fleet --json` output."""
    return {n["node"]: n["status"] for n in json.loads(out)["nodes"]}


def fleet_report(hostname: str, gpus: int = 2, seed: int = 0, edit: Optional[Edit] = None) -> dict:
    template = json.loads(TEMPLATE.read_text())
    noise = random.Random(f"{hostname}/{seed}")
    results = []
    for result in template["results"]:
        if result["device"] is None:
            results.append(copy.deepcopy(result))
            continue
        for index in range(gpus):
            one = copy.deepcopy(result)
            one["device"].update(index=index, pci_bus_id=BUS_IDS[index],
                                 uuid=f"GPU-{abs(hash((hostname, index))) % 10**8:08d}-7b7c-2e9a-5991-b14be5ffd32d")
            observed = one["observed"]
            if isinstance(observed, dict):
                for key in ("gb_per_second", "fp32_tflops"):  # within 1 %, as repeated runs on alike GPUs are
                    if isinstance(observed.get(key), float):
                        observed[key] = round(observed[key] * noise.uniform(0.99, 1.01), 2)
            results.append(one)
    if gpus > 1:  # the template's GPU had no peer; the lab's 2x H200 measured 394.48 GB/s over 18 NVLinks
        results = [r for r in results if r["check"] != "active.p2p_bandwidth"] + [
            _p2p(template, src, dst, round(394.48 * noise.uniform(0.99, 1.01), 2))
            for src in range(gpus) for dst in range(gpus) if src != dst]
    report = dict(template, hostname=hostname, results=results)
    by_check = checks(report)
    by_check["driver.library"][0]["observed"]["device_count"] = gpus
    if gpus > 1:  # the template's single GPU has nothing to compare firmware with; an HGX node does
        by_check["firmware.vbios_consistent"][0].update(status="pass", observed={VBIOS: list(range(gpus))})
        by_check["firmware.versions_consistent"][0].update(status="pass", observed=dict(FIRMWARE))
    if edit is not None:
        edit(report)
    return report


def _p2p(template: dict, src: int, dst: int, gb_per_second: float) -> dict:
    """An active.p2p_bandwidth result as the lab's 2x H200 gave it (tests/fixtures/h200x2/recorded/active_2gpu.txt)."""
    device = next(r["device"] for r in template["results"] if r["device"] is not None)
    return {"check": "active.p2p_bandwidth", "status": "pass",
            "device": dict(device, index=src, pci_bus_id=BUS_IDS[src]),
            "observed": {"dst": dst, "gb_per_second": gb_per_second, "p2p_enabled": True,
                         "bidirectional_gb_per_second": None},
            "expected": {"gb_per_second": 360.0, "basis": "18 NVLinks carry (450 GB/s per direction raw)"},
            "message": f"GPU {src} -> GPU {dst}: {gb_per_second} GB/s", "remediation": "", "action": "none",
            "fault_code": None}


def checks(report: dict) -> dict[str, list[dict]]:
    """check ID → its results (per GPU index order), to edit a report in place."""
    found: dict[str, list[dict]] = {}
    for result in report["results"]:
        found.setdefault(result["check"], []).append(result)
    return found


def on_gpu(report: dict, check: str, gpu: int) -> dict:
    (result,) = [r for r in checks(report)[check] if r["device"] and r["device"]["index"] == gpu]
    return result


def write_fleet(directory: Path, count: int, gpus: int = 2, edits: Optional[dict[str, Edit]] = None) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    names = [f"gpu-node-{i:03d}" for i in range(count)]
    for name in names:
        report = fleet_report(name, gpus, edit=(edits or {}).get(name))
        (directory / f"{name}.json").write_text(json.dumps(report))
    return names
