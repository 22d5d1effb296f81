"""`gpudiag check` through the running service against `nvidia-smi -q`, a cold `gpudiag check --direct` against
`nvidia-smi -q`, and the exporter's scrape latency and CPU while 10 checks a second go through the service — in one
run (issue: one NVML client per node).

`gpudiag check` through the service is the fast path (gpudiag/cli/check/fastpath.py: the service judges and renders; the
benchmark checks that it was taken); "service, full CLI" is the same check judged by the full CLI in the client, as
before the fast path. Goals: through the service ≤ 0.5 × nvidia-smi -q; cold --direct ≤ 1.0 × nvidia-smi -q; scrape
latency unchanged under the check load (the exporter's CPU is reported as it is: a client asking for a collection at
most a second old makes the service collect up to once a second instead of once per --interval).

It starts its own `gpudiag serve` (loopback port, socket and journal in a temporary directory: no root needed, and
a system service already running is left alone). Commands run as fresh processes, interleaved, medians of --runs
after one warm-up each.

    python3 bench/check_via_service.py                  # on a GPU node (nvidia-smi on PATH for the ratios)
    python3 bench/check_via_service.py --gpudiag /opt/gpudiag/bin/gpudiag   # the installed console script
    python3 bench/check_via_service.py --fake 2         # over the fake 2-GPU node of the tests (no ratios)

Without --gpudiag it runs this tree with `python3 -m gpudiag` under the interpreter that runs the benchmark; with
it, the console script pip installed (README: a venv of its own) and that script's interpreter, as an operator runs
them. The "python -c pass" row is that interpreter's own start-up: the floor under any Python client.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_vs_nvidia_smi import interleaved, precompile, timed  # noqa: E402 - the sibling benchmark's harness
# Runs gpudiag with the tests' fake NVML installed (the fake node's GPUs), for --fake.
FAKE_RUNNER = ("import sys; from pathlib import Path; from tests.support.exporter_node import fake_node; "
               "from tests.support.fakes import fake_nvml_events; from tests.support.fakes.fake_nvml import installed; "
               "fake = installed(fake_node(int(sys.argv[1]))); fake.__enter__(); "
               "from gpudiag.cli.app import main; sys.exit(main(sys.argv[2:]))")


FULL_CLI = "from gpudiag.cli.app import run; run()"
CHECK_REQUEST = {"op": "check", "format": "json"}  # what `gpudiag check --json` sends (gpudiag/cli/check/fastpath.py)


def fast_path_taken(python: str, cmd: list[str], env: dict) -> bool:
    """`gpudiag check` answered by the service's fast path (gpudiag/cli/check/fastpath.py): nothing heavy imported."""
    program = cmd[1:] if cmd[0] == python else cmd  # `python -m gpudiag …`, or a console script run by python
    done = subprocess.run([python, "-X", "importtime", *program], capture_output=True, text=True, env=env, cwd=REPO)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done.returncode in (0, 1) and not imported & {"gpudiag.cli.app", "typer", "gpudiag.model"}


def script_interpreter(script: Path) -> str:
    """The interpreter on a console script's `#!` line (pip writes the venv's python there)."""
    first = script.read_bytes().split(b"\n", 1)[0].decode()
    if not first.startswith("#!") or len(first.split()) != 1:
        raise SystemExit(f"{script}: not a console script with a plain #! line")
    return first[2:]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_service(gpudiag: list[str], where: list[str], env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([*gpudiag, "serve", "--listen", "127.0.0.1:0", "--interval", "15", *where],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, cwd=REPO, text=True)
    line = proc.stderr.readline()
    found = re.search(r"serving (http://\S+)/metrics", line)
    if not found:
        proc.kill()
        raise SystemExit(f"gpudiag serve did not start: {line}{proc.stderr.read()}")
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain its log
    return proc, found.group(1)


def scrape_window(url: str, pid: int, seconds: float) -> dict:
    """Scrape every 0.25 s for `seconds`: median/max scrape latency and the exporter's CPU share meanwhile."""
    latencies, cpu0, t0 = [], cpu_seconds(pid), time.monotonic()
    while time.monotonic() - t0 < seconds:
        started = time.perf_counter()
        with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
            response.read()
        latencies.append(time.perf_counter() - started)
        time.sleep(0.25)
    share = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    return {"scrape_median_ms": round(statistics.median(latencies) * 1000, 2),
            "scrape_max_ms": round(max(latencies) * 1000, 2), "exporter_cpu_percent": round(share * 100, 1)}


def check_load(cmd: list[str], env: dict, socket_path: Path, rate: float, stop: threading.Event, mode: str,
               done: list) -> None:
    """`rate` checks a second through the service: whole `gpudiag check` processes, or (mode "requests") the
    check request each of them makes, from this process (what the service sees is the same)."""
    sys.path.insert(0, str(REPO))
    from gpudiag.service.client import ask

    next_at = time.monotonic()
    while not stop.is_set():
        if mode == "processes":
            threading.Thread(target=lambda: done.append(timed(cmd, env)[1]), daemon=True).start()
        else:
            threading.Thread(target=lambda: done.append(ask(socket_path, CHECK_REQUEST, 10.0) is not None),
                             daemon=True).start()
        next_at += 1.0 / rate
        stop.wait(max(0.0, next_at - time.monotonic()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--fake", type=int, metavar="GPUS", help="run over the tests' fake NVIDIA node")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of scraping, idle and under load")
    parser.add_argument("--rate", type=float, default=10.0, help="checks a second through the service")
    parser.add_argument("--load", choices=("requests", "processes"), default="processes")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile the modules first")
    parser.add_argument("--gpudiag", type=Path, help="time this installed `gpudiag` console script (and its "
                        "interpreter) instead of this tree under the benchmark's interpreter")
    args = parser.parse_args()
    if not args.no_compile:  # as pip install does on a real node (see bench/check_vs_nvidia_smi.py)
        sys.path.insert(0, str(REPO))
        print("byte-compiled:", ", ".join(precompile()))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    tmp = Path(tempfile.mkdtemp(prefix="gpudiag-bench-"))
    sock = tmp / "gpudiag.sock"
    python, gpudiag = sys.executable, [sys.executable, "-m", "gpudiag"]
    if args.gpudiag:
        python, gpudiag = script_interpreter(args.gpudiag), [str(args.gpudiag)]
        env.pop("PYTHONPATH")  # the installed package, not this tree
        print(f"timing {args.gpudiag} (interpreter {python})")
    if args.fake:
        sys.path.insert(0, str(REPO))
        from tests.support.exporter_node import fake_node, fake_root

        root = tmp / "root"
        fake_root(root, fake_node(args.fake))
        direct_gpudiag = [sys.executable, "-c", FAKE_RUNNER, str(args.fake)]
        where = ["--root", str(root)]
        service, url = start_service(
            direct_gpudiag, [*where, "--socket", str(sock), "--state-dir", str(tmp / "state")], env
        )
    else:
        direct_gpudiag, where = gpudiag, []
        service, url = start_service(gpudiag, ["--socket", str(sock), "--state-dir", str(tmp / "state")], env)
    try:
        while not sock.exists():
            time.sleep(0.05)
        commands = {
            "check via service": [*gpudiag, "check", "--json", "--socket", str(sock), *where],
            # the same through the full CLI (what `check` did before the fast path): the client judging the snapshot
            "service, full CLI": [python, "-c", FULL_CLI, "check", "--json", "--socket", str(sock), *where],
            "check --direct": [*direct_gpudiag, "check", "--json", "--direct", *where],
            # the floor under any Python command on this machine (site, .pth files of the installed packages)
            "python -c pass": [python, "-c", "pass"],
        }
        # the same cold check through typer (gpudiag/cli/app.py), as before gpudiag/cli/check/direct.py
        if not args.fake:
            commands["--direct, full CLI"] = [python, "-c", FULL_CLI, "check", "--json", "--direct"]
        fast = fast_path_taken(python, commands["check via service"], env)
        print(f"check via service took the fast path (no gpudiag.cli.app, typer or gpudiag.model imported): "
              f"{'yes' if fast else 'NO'}")
        if shutil.which("nvidia-smi") and not args.fake:
            commands["nvidia-smi -q"] = ["nvidia-smi", "-q"]
        samples, codes = interleaved(commands, args.runs, env)
        figures = {name: {"median_ms": round(statistics.median(v) * 1000, 1), "min_ms": round(min(v) * 1000, 1),
                          "exit_codes": sorted(codes[name])} for name, v in samples.items()}
        for name, fig in figures.items():
            print(f"{name:20s} median {fig['median_ms']:7.1f} ms (min {fig['min_ms']:.1f}, exit codes "
                  f"{fig['exit_codes']}, {args.runs} runs)")
        ratios = {}
        if "nvidia-smi -q" in figures:
            smi = figures["nvidia-smi -q"]["median_ms"]
            for name, goal in (("check via service", 0.5), ("check --direct", 1.0)):
                ratios[name] = round(figures[name]["median_ms"] / smi, 2)
                print(f"ratio {name} / nvidia-smi -q = {ratios[name]:.2f} (goal ≤ {goal}: "
                      f"{'meets' if ratios[name] <= goal else 'MISSES'})")
        else:
            print("no nvidia-smi (or --fake): no ratios; the absolute times above compare the two paths")

        idle = scrape_window(url, service.pid, args.window)
        stop, done = threading.Event(), []
        load = threading.Thread(target=check_load, args=(commands["check via service"], env, sock, args.rate, stop,
                                                         args.load, done), daemon=True)
        load.start()
        loaded = scrape_window(url, service.pid, args.window)
        stop.set()
        load.join()
        print(f"exporter idle:              scrape median {idle['scrape_median_ms']} ms, max {idle['scrape_max_ms']}"
              f" ms, CPU {idle['exporter_cpu_percent']} %")
        print(f"exporter, {args.rate:g} checks/s ({args.load}): scrape median {loaded['scrape_median_ms']} ms, max "
              f"{loaded['scrape_max_ms']} ms, CPU {loaded['exporter_cpu_percent']} % ({len(done)} checks started)")
        if args.json:
            args.json.write_text(json.dumps({"runs": args.runs, "fast_path": fast, "figures": figures, "ratios": ratios,
                                             "idle": idle,
                                             "loaded": loaded, "rate": args.rate, "load": args.load}, indent=2))
    finally:
        service.terminate()
        try:
            service.wait(15)
        except subprocess.TimeoutExpired:
            service.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
