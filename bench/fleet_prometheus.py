"""`gpudiag fleet --prometheus` over a large synthetic fleet: wall time and peak memory.

A fleet of NODES nodes x GPUS GPUs is written as OpenMetrics (the series `gpudiag serve` exports that the fleet
view reads: up, identity, device_up, check states, PCIe, power, ECC, load-test figures), backfilled into a fresh
TSDB with `promtool tsdb create-blocks-from openmetrics`, and a Prometheus (Debian's package) is started on it on
loopback. Three nodes are made faulty on purpose, and the benchmark checks that the fleet view names exactly them:
a failing GPU (pcie.link_width), another driver, and GPU 0 copying 15 % slower.

`gpudiag fleet` runs as its own process; its peak RSS is read from the kernel's accounting of that process
(wait4), its wall time from outside. Prometheus's own load is not in the figures.

`--repeat N` runs it N times and gives the median wall time; `--tree DIR` (again and again) runs the gpudiag of
another checkout too, interleaved with this one's on the same Prometheus: an A/B of two versions under the same
load (only this checkout's answer is checked).

Usage: python3 bench/fleet_prometheus.py [--nodes 2000] [--gpus 8] [--checks 12] [--repeat 1] [--tree DIR]...
[--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKS = ("driver.recovery_action", "inventory.gpus_visible", "pcie.link_generation", "pcie.link_width",
          "pcie.replay_errors", "pcie.aer", "ecc.mode", "ecc.uncorrected", "memory.row_remap_pending",
          "memory.row_remap_failure", "thermal.temperature", "thermal.throttle", "power.brake", "power.limit",
          "topology.links_up", "kernel_log.xid")
STATUSES = ("pass", "warn", "fail", "skip", "unknown")
BUS_IDS = ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
           "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0")
DRIVER, OTHER_DRIVER = "580.159.04", "570.133.20"


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def write_openmetrics(path: Path, nodes: int, gpus: int, checks: int, now: float) -> dict[str, str]:
    """The fleet's series at three instants a minute apart, family by family (OpenMetrics wants each family's
    samples together); returns the faulty nodes by fault."""
    names = [f"gpu-node-{i:05d}:9858" for i in range(nodes)]
    faulty = {"failing": names[nodes // 3], "drift": names[nodes // 2], "slow": names[(2 * nodes) // 3]}
    times = (now - 120, now - 60, now)
    bad_gpu = min(3, gpus - 1)  # the failing node's pcie.link_width fails on this GPU
    noise = random.Random(0)
    job = "gpudiag"

    def gpu_ids(node: str, gpu: int) -> dict[str, str]:
        return {
            "instance": node,
            "job": job,
            "gpu": str(gpu),
            "uuid": f"GPU-{node}-{gpu}",
            "pci_bus_id": BUS_IDS[gpu % 8],
        }

    families = []

    def family(name: str, rows) -> None:
        families.append((name, rows))

    family("up", lambda: ((_labels(instance=n, job=job), 1) for n in names))
    family("gpudiag_build_info", lambda: ((_labels(instance=n, job=job, version="0.1.0", python_version="3.11.7"), 1)
                                          for n in names))
    family("gpudiag_last_collection_timestamp_seconds", lambda: ((_labels(instance=n, job=job), now) for n in names))
    family("gpudiag_node_gpus", lambda: ((_labels(instance=n, job=job, source="answering"), gpus) for n in names))
    family("gpudiag_backend_info", lambda: ((_labels(instance=n, job=job, backend="nvml", vendor="nvidia",
                                                     driver_version=DRIVER, library_version="13." + DRIVER,
                                                     runtime_version="13.0"), 1) for n in names))
    family("gpudiag_gpu_info", lambda: ((_labels(**gpu_ids(n, g), vendor="nvidia", model="NVIDIA H200",
                                                 serial=f"{i:08d}{g}", vbios_version="96.00.A5.00.1A",
                                                 driver_version=OTHER_DRIVER if n == faulty["drift"] else DRIVER), 1)
                                        for i, n in enumerate(names) for g in range(gpus)))
    family("gpudiag_device_up", lambda: ((_labels(**gpu_ids(n, g)), 1) for n in names for g in range(gpus)))
    for metric, value in (("gpudiag_gpu_pcie_link_generation", 5), ("gpudiag_gpu_pcie_link_width_lanes", 16)):
        family(
            metric,
            lambda value=value: (
                (_labels(**gpu_ids(n, g), kind=k), value)
                for n in names
                for g in range(gpus)
                for k in ("current", "max", "device_max")
            ),
        )
    family(
        "gpudiag_gpu_power_limit_watts", lambda: ((_labels(**gpu_ids(n, g)), 700) for n in names for g in range(gpus))
    )
    family("gpudiag_gpu_ecc_enabled", lambda: ((_labels(**gpu_ids(n, g), mode=m), 1)
                                               for n in names for g in range(gpus) for m in ("current", "pending")))

    def check_rows():
        for n in names:
            for check in CHECKS[:checks]:
                for g in range(gpus):
                    bad = n == faulty["failing"] and check == "pcie.link_width" and g == bad_gpu
                    current = "fail" if bad else "pass"
                    for status in STATUSES:
                        yield _labels(instance=n, job=job, check=check, gpu=str(g), uuid=f"GPU-{n}-{g}",
                                      pci_bus_id=BUS_IDS[g % 8], status=status), int(status == current)

    family("gpudiag_check_status", check_rows)
    family("gpudiag_check_ok", lambda: ((_labels(instance=n, job=job, check=c, gpu=str(g)),
                                         int(not (n == faulty["failing"] and c == "pcie.link_width" and g == bad_gpu)))
                                        for n in names for c in CHECKS[:checks] for g in range(gpus)))
    family("gpudiag_active_copy_bandwidth_bytes_per_second", lambda: (
        (_labels(**gpu_ids(n, g), direction=d), 55.4e9 * (0.85 if n == faulty["slow"] and g == 0 and d == "h2d" else
                                                         noise.uniform(0.99, 1.01)))
        for n in names for g in range(gpus) for d in ("h2d", "d2h")))
    family("gpudiag_active_p2p_bandwidth_bytes_per_second", lambda: (
        (_labels(**gpu_ids(n, g), peer_gpu=str(p)), 370e9 * noise.uniform(0.99, 1.01))
        for n in names for g in range(gpus) for p in range(gpus) if p != g))
    family("gpudiag_active_stress_fp32_flops", lambda: ((_labels(**gpu_ids(n, g)), 55.5e12 * noise.uniform(0.99, 1.01))
                                                        for n in names for g in range(gpus)))
    series = 0
    with open(path, "w") as out:
        for name, rows in families:
            out.write(f"# TYPE {name} gauge\n")
            for labels, value in rows():
                series += 1
                out.write("".join(f"{name}{labels} {value} {t:.3f}\n" for t in times))
        out.write("# EOF\n")
    faulty["series"] = str(series)
    return faulty


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Linux counts in a child's peak RSS the memory of the process it was spawned from (exec records the old address
# space's high-water mark, and a vfork or fork child starts in its parent's): a benchmark that holds 500 MiB would
# see every child it times "peak" at 500 MiB. So the timed command is spawned by a small launcher of its own
# (python -I -S, ~9 MiB), which times it and reads its rusage, and writes both to a pipe.
_LAUNCHER = (
    "import os, sys, time\n"
    "started = time.monotonic()\n"
    "pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "os.write(int(sys.argv[1]), f'{time.monotonic() - started} {usage.ru_maxrss}'.encode())\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def timed(argv: list[str], **kwargs) -> tuple[float, int, int, str, str]:
    """(wall seconds, peak RSS in KiB of that process alone, exit status, stdout, stderr)."""
    read, write = os.pipe()
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _LAUNCHER, str(write), *argv], stdout=out,
                                    stderr=err, pass_fds=(write,), **kwargs)
            os.close(write)
            write = -1
            measured = os.read(read, 256).decode().split()
            proc.wait()
            out.seek(0)
            err.seek(0)
            wall, rss = (float(measured[0]), int(measured[1])) if len(measured) == 2 else (float("nan"), 0)
            return wall, rss, proc.returncode, out.read().decode(), err.read().decode()
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--checks", type=int, default=12, help="per-GPU checks with state-set series (of 16)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each gpudiag; the median wall time is given")
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another checkout's gpudiag, too")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not (4 <= args.checks <= len(CHECKS) and args.nodes >= 6 and args.gpus >= 1):
        parser.error(f"--checks 4..{len(CHECKS)} (pcie.link_width is the 4th), --nodes 6 or more, --gpus 1 or more")
    for tool in ("promtool", "prometheus"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not installed (apt-get install prometheus)")
    with tempfile.TemporaryDirectory(prefix="gpudiag-fleet-bench-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        faulty = write_openmetrics(work / "fleet.om", args.nodes, args.gpus, args.checks, time.time())
        generated = time.monotonic() - started
        wall, rss, code, out, err = timed(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                                           str(work / "fleet.om"), str(work / "data")])
        if code != 0:
            sys.exit(f"promtool failed: {err.strip()[-500:]}")
        print(f"fleet: {args.nodes} nodes x {args.gpus} GPUs, {faulty['series']} series; OpenMetrics written in "
              f"{generated:.1f} s, backfilled in {wall:.1f} s")
        (work / "prometheus.yml").write_text("global: {}\n")
        port = free_port()
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", "--query.lookback-delta=1h"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        api = f"http://127.0.0.1:{port}"
        trees = [REPO, *args.tree]
        runs: dict[Path, list[tuple[float, int, int, str, str]]] = {tree: [] for tree in trees}
        try:
            _wait_ready(api, args.nodes)
            for _ in range(max(1, args.repeat)):
                for tree in trees:
                    runs[tree].append(timed(
                        [sys.executable, "-m", "gpudiag", "fleet", "--prometheus", api, "--selector", '{job="gpudiag"}',
                         "--json", "--timeout", "300", "--stale-after", "3600"],
                        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}))
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=30)
    expected = {faulty["failing"]: "fail", faulty["drift"]: "drift", faulty["slow"]: "lag"}
    correct, figures = True, {}
    for tree in trees:
        walls = sorted(run[0] for run in runs[tree])
        wall, rss = statistics.median(walls), max(run[1] for run in runs[tree])
        _, _, code, out, err = runs[tree][-1]
        verdict = json.loads(out) if out.startswith("{") else {}
        flagged = {n["node"]: n["status"] for n in verdict.get("nodes", []) if n["status"] != "pass"}
        which = "" if tree == REPO else f" ({tree})"
        print(f"gpudiag fleet{which}: {wall:.2f} s wall (median of {len(walls)}: "
              f"{', '.join(f'{w:.2f}' for w in walls)})"
              f", peak RSS {rss / 1024:.0f} MiB, exit {code}; {len(verdict.get('nodes', []))} nodes judged, "
              f"flagged {flagged}")
        figures[str(tree)] = {"wall_seconds": round(wall, 3), "walls": [round(w, 3) for w in walls],
                              "peak_rss_mib": round(rss / 1024, 1)}
        if tree == REPO:
            correct = code == 1 and flagged == expected
            print("named exactly the three faulty nodes" if correct else
                  f"WRONG: expected {expected}; stderr: {err[-500:]}")
    if args.json:
        args.json.write_text(json.dumps({"nodes": args.nodes, "gpus": args.gpus, "series": int(faulty["series"]),
                                         **figures.pop(str(REPO)), "others": figures, "correct": correct},
                                        indent=2) + "\n")
    return 0 if correct else 1


def _wait_ready(api: str, nodes: int, timeout: float = 300.0) -> None:
    """Until Prometheus answers with every node's `up` (it reads the backfilled blocks at start)."""
    deadline = time.monotonic() + timeout
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": 'count(up{job="gpudiag"})'})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                result = json.load(response)["data"]["result"]
            if result and int(float(result[0]["value"][1])) == nodes:
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("Prometheus did not load the fleet in time")


if __name__ == "__main__":
    sys.exit(main())
