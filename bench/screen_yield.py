"""Idle-time screening on a real GPU (issue 35, "Done means"; docs/screening.md): one command, about 6 minutes on one
H100/H200, everything it saw written under $OUT.

  a. a screen of the idle GPU runs and is recorded: `gpudiag screen`'s report, the state file, the screens' journal,
     `gpudiag history`, `gpudiag textfile` (the gpudiag_screen_* series) and `gpudiag check --only screen`;
  e. a GPU held by a job (a torch process with a context and 5 % of the memory) is not screened, even with --now;
  d. an injected, validation-only SM flip (GPUDIAG_VALIDATION_ONLY_FLIP_SM=17) fails the screen, names SM 17, and
     `gpudiag check` then fails screen.result with the drain action;
  b. trials (10 by default): a screen runs (its worker listed by NVML, then 3 s more), and a torch BF16 matmul job
     starts: from the job's time.time() right before its first CUDA call (t0) to the screen's process gone and its
     memory gone from NVML's list, p50/p99/max; the job allocates 90 % of the GPU's memory at once (every time);
  c. throughput: the job's FLOP over its first 30 s with a screen running, against the same job on the idle GPU,
     interleaved (idle, screen, idle, screen): the ratio of the means (goal ≥ 0.95). The screen runs of (c) are
     trials of (b) too.

Usage (the lab machine: root, torch, nvidia-ml-py, no systemd):
    OUT=/tmp/out PYTHONPATH=. python3 bench/screen_yield.py
Options: --trials N (10), --pairs N (2 throughput pairs), --budget SECONDS (460: later parts are skipped, and said
so, rather than overrun), --fake (the tests' fake node and a stand-in job: the bench's logic, no GPU; short windows).
Written: $OUT/screen_yield.json (every figure), $OUT/summary.txt (what it printed) and $OUT/screen-bench.tar.gz (each
part's files: a/ the screen's report, state.json, journal.jsonl, history, gpudiag.prom, check.json; d/, e/, trials/).
Exit 0 when every goal it measured holds, 1 when one does not, 2 when it could not measure (a part failed to run).
Partial results are written and printed whatever happens; every process it starts is ended on the way out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screen_lab import FakeMachine, Job, Machine  # noqa: E402  (bench/ is not a package)

FLIP_SM = 17  # an SM of every H100/H200 (132 SMs); the fake GPU has 4 (--fake flips SM 2)
GIB = 1024**3


class Bench:
    def __init__(self, machine: Machine, out: Path, budget: float, window: float, short: float,
                 flip_sm: int = FLIP_SM):
        self.m, self.out, self.window, self.short, self.flip_sm = machine, out, window, short, flip_sm
        self.deadline = time.monotonic() + budget
        self.processes: list[subprocess.Popen] = []
        self.jobs: list[Job] = []
        self.results: dict = {"machine": {"bus_id": machine.bus, "total_bytes": machine.total, "fake": machine.fake},
                              "parts": {}}

    # -- plumbing ---------------------------------------------------------------------------------------------

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def gpudiag(self, *args: str, env: Optional[dict] = None, timeout: float = 180) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self.m.gpudiag(*args), env={**self.m.env, **(env or {})}, capture_output=True,
                                  text=True, timeout=timeout, cwd=self.m.env.get("GPUDIAG_BENCH_REPO"))
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(exc.cmd, 124, exc.stdout or "", f"timed out after {timeout} s")

    def screen_args(self, state: Path, *extra: str) -> list[str]:
        return ["screen", "--state-dir", str(state), *self.m.root_args(), "--now", "--idle-after", "0s",
                "--format", "json", *extra]

    def save(self, directory: Path, name: str, text: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)

    def wait_idle(self, timeout: float = 20.0) -> bool:
        """No process on the GPU and 0 % utilisation, twice in a row (a job's last sample lingers in NVML)."""
        deadline, quiet = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            listed, busy = self.m.listed(), self.m.utilization()
            quiet = quiet + 1 if listed == {} and busy == 0 else 0
            if quiet >= 2:
                return True
            time.sleep(0.25)
        return False

    def cleanup(self) -> None:
        for job in self.jobs:
            job.stop()
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)

    # -- a: an idle screen, recorded ------------------------------------------------------------------------

    def part_a(self) -> dict:
        state, where = self.out / "a" / "state", self.out / "a"
        self.wait_idle()
        done = self.gpudiag(*self.screen_args(state, "--stress-seconds", "20"))
        self.save(where, "screen.json", done.stdout)
        self.save(where, "screen.stderr.txt", done.stderr)
        runs = _runs(done.stdout)
        for name in ("state.json", "journal.jsonl"):
            if (state / "screen" / name).exists():
                shutil.copy(state / "screen" / name, where / name)
        history = self.gpudiag("history", "--state-dir", str(state), *self.m.root_args(), "--socket",
                               str(self.out / "no-service.sock"))
        self.save(where, "history.txt", history.stdout + history.stderr)
        history_json = self.gpudiag("history", "--state-dir", str(state), *self.m.root_args(), "--format", "json",
                                    "--socket", str(self.out / "no-service.sock"))
        self.save(where, "history.json", history_json.stdout)
        textfile = self.gpudiag("textfile", "--state-dir", str(state), *self.m.root_args(), "-o",
                                str(where / "gpudiag.prom"))
        check = self.gpudiag("check", "--only", "screen", "--state-dir", str(state), *self.m.root_args(), "--json")
        self.save(where, "check.json", check.stdout)
        prom = (where / "gpudiag.prom").read_text() if (where / "gpudiag.prom").exists() else ""
        run = runs[0] if runs else {}
        return {"exit": done.returncode, "outcome": run.get("outcome"), "reason": run.get("reason"),
                "duration_seconds": run.get("duration_seconds"), "footprint_bytes": run.get("footprint_bytes"),
                "footprint_limit_bytes": run.get("footprint_limit_bytes"),
                "memory_tested_bytes": run.get("memory_tested_bytes"),
                "launches_verified": run.get("launches_verified"),
                "journal_entries": len((where / "journal.jsonl").read_text().splitlines())
                if (where / "journal.jsonl").exists() else 0,
                "history_shows_screen": "screen verified" in history.stdout,
                "metrics_series": sorted({line.split("{")[0].split(" ")[0] for line in prom.splitlines()
                                          if line.startswith("gpudiag_screen_")}),
                "textfile_exit": textfile.returncode,
                "check": _statuses(check.stdout),
                "goal": run.get("outcome") == "verified" and "screen verified" in history.stdout
                and "gpudiag_screen_last_verified_timestamp_seconds" in prom}

    # -- e: a held GPU is not screened ------------------------------------------------------------------------

    def part_e(self) -> dict:
        state, where = self.out / "e" / "state", self.out / "e"
        self.wait_idle()
        job = self.m.job(0.05, 0.0, hold=True)
        self.jobs.append(job)
        try:
            if job.wait_for("ready", 120) is None:
                return {"error": "the holding job did not start: " + "".join(job.err)[-500:]}
            job.go()
            if job.wait_for("alloc_ok", 60) is None:
                return {"error": "the holding job made no context: " + "".join(job.err)[-500:]}
            listed = self.m.listed()
            done = self.gpudiag(*self.screen_args(state, "--stress-seconds", "5"))
            self.save(where, "screen.json", done.stdout)
            self.save(where, "screen.stderr.txt", done.stderr)
            decisions = json.loads(done.stdout).get("decisions", []) if done.stdout.startswith("{") else []
        finally:
            job.stop()
        runs = _runs(done.stdout)
        return {"listed_while_held": sorted(listed or {}), "decisions": decisions, "runs": len(runs),
                "goal": bool(listed) and not runs and bool(decisions) and not any(d["screen"] for d in decisions)}

    # -- d: an injected SM flip fails the screen and drains ---------------------------------------------------

    def part_d(self) -> dict:
        state, where = self.out / "d" / "state", self.out / "d"
        self.wait_idle()
        done = self.gpudiag(*self.screen_args(state, "--stress-seconds", "5"),
                            env={"GPUDIAG_VALIDATION_ONLY_FLIP_SM": str(self.flip_sm)})
        self.save(where, "screen.json", done.stdout)
        self.save(where, "screen.stderr.txt", done.stderr)
        check = self.gpudiag("check", "--only", "screen.result", "--state-dir", str(state), *self.m.root_args(),
                             "--json")
        self.save(where, "check.json", check.stdout)
        run = (_runs(done.stdout) or [{}])[0]
        result = next((r for r in _results(check.stdout) if r.get("device")), {})
        sms = [s.get("location") for s in run.get("mismatched_sms") or []]
        return {"exit": done.returncode, "outcome": run.get("outcome"), "reason": run.get("reason"),
                "mismatched_sms": sms, "validation_fault": run.get("validation_fault"),
                "check": {k: result.get(k) for k in ("status", "action", "fault_code", "message")},
                "check_exit": check.returncode,
                "flip_sm": self.flip_sm,
                "goal": run.get("outcome") == "failed" and f"SM {self.flip_sm}" in sms
                and result.get("action") == "drain"}

    # -- b and c: a job arrives while a screen runs ------------------------------------------------------------

    def trial(self, state: Path, job: Job, seconds: float, number: int) -> dict:
        """A screen runs; `job` (started, torch imported) comes: when the screen and its memory are gone after
        the job's t0."""
        if job.wait_for("ready", 120) is None:
            return {"error": "the job did not start: " + "".join(job.err)[-500:]}
        screen, before = None, {}
        for attempt in range(3):
            self.wait_idle()
            screen = subprocess.Popen(self.m.gpudiag(*self.screen_args(state, "--stress-seconds", "600")),
                                      env=self.m.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=self.m.env.get("GPUDIAG_BENCH_REPO"))
            self.processes.append(screen)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and screen.poll() is None and not before:
                before = self.m.listed() or {}
                time.sleep(0.05)
            if before:
                break
            out, err = screen.communicate(timeout=30)
            self.save(self.out / "trials", f"trial-{number}-start-{attempt}.txt", out + err)
        if not before:
            job.stop()
            return {"error": "no screen started (see trials/trial-N-start-*.txt)"}
        progress: list[str] = []
        threading.Thread(target=lambda: progress.extend(screen.stderr), daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("stress (" in line for line in progress):
            time.sleep(0.05)  # past the HBM copy and the memory test: the verified stress is what a job meets
        stress_seen = any("stress (" in line for line in progress)
        time.sleep(3.0)  # the stress runs a few seconds
        screen_pids = set(self.m.listed() or before)
        job.go()
        exit_at = gone_at = None
        limit = time.monotonic() + 30
        while time.monotonic() < limit and (exit_at is None or gone_at is None):
            now = time.time()
            if exit_at is None and screen.poll() is not None:
                exit_at = now
            listed = self.m.listed()
            if gone_at is None and listed is not None and not screen_pids & set(listed):
                gone_at = now
            time.sleep(0.005)
        t0 = job.wait_for("t0", 10)
        context, alloc = job.wait_for("context", 30), job.wait_for("alloc_ok", 30)
        job.wait_for("end", seconds + 60)
        job.stop()
        if screen.poll() is None:
            screen.terminate()
        out = screen.stdout.read() if screen.stdout else ""
        screen.wait(timeout=30)
        self.save(self.out / "trials", f"trial-{number}-screen.json", out)
        self.save(self.out / "trials", f"trial-{number}-screen.stderr.txt", "".join(progress))
        run = (_runs(out) or [{}])[0]
        t0 = t0 and t0["t0"]
        found = {"t0": t0, "screen_pids": sorted(screen_pids), "stress_running": stress_seen,
                 "screen_outcome": run.get("outcome"),
                 "screen_reason": run.get("reason"), "screen_yield_seconds": run.get("yield_seconds"),
                 "footprint_bytes": run.get("footprint_bytes"),
                 "context_seconds": round(context["context"] - t0, 3) if context and t0 else None,
                 "alloc_ok": bool(alloc and alloc["alloc_ok"]), "alloc_error": alloc and alloc.get("error"),
                 "exit_seconds": round(exit_at - t0, 3) if exit_at and t0 else None,
                 "gone_seconds": round(gone_at - t0, 3) if gone_at and t0 else None}
        found["yield_seconds"] = (max(found["exit_seconds"], found["gone_seconds"])
                                  if found["exit_seconds"] is not None and found["gone_seconds"] is not None else None)
        found["throughput_flops"] = job.throughput(self.window) if seconds >= self.window else None
        return found

    def idle_run(self, job: Job, seconds: float) -> dict:
        self.wait_idle()
        time.sleep(2.0)
        if job.wait_for("ready", 120) is None:
            return {"error": "the job did not start: " + "".join(job.err)[-500:]}
        job.go()
        alloc = job.wait_for("alloc_ok", 60)
        job.wait_for("end", seconds + 60)
        job.stop()
        return {"alloc_ok": bool(alloc and alloc["alloc_ok"]), "throughput_flops": job.throughput(self.window)}

    def trials(self, count: int, pairs: int) -> tuple[dict, dict]:
        state = self.out / "trials" / "state"
        plan = []
        shorts = max(0, count - pairs)
        per_pair = -(-shorts // max(1, pairs)) if pairs else shorts
        for pair in range(pairs):
            plan += ["idle", "screen-long"] + ["screen-short"] * min(per_pair, shorts - pair * per_pair)
        plan += ["screen-short"] * max(0, shorts - pairs * per_pair)
        yields, idle, shared, skipped = [], [], [], []
        cost = {"idle": self.window + 10, "screen-long": self.window + 20, "screen-short": self.short + 18}
        length = {"idle": self.window + 1.0, "screen-long": self.window + 1.0, "screen-short": self.short}
        jobs: dict[int, Job] = {}

        def job_for(number: int) -> Optional[Job]:
            """Each trial's job is started a trial ahead: torch's import (seconds) overlaps the trial before; a
            job that waits for its go has nothing on the GPU."""
            if number < len(plan) and number not in jobs:
                jobs[number] = self.m.job(0.9, length[plan[number]])
                self.jobs.append(jobs[number])
            return jobs.get(number)

        for number, kind in enumerate(plan):
            job = job_for(number)
            if self.left() < cost[kind]:
                skipped.append(kind)
                continue
            job_for(number + 1)
            if kind == "idle":
                idle.append(self.idle_run(job, length[kind]))
                continue
            found = self.trial(state, job, length[kind], number)
            found["kind"] = kind
            yields.append(found)
            if kind == "screen-long":
                shared.append(found)
            print(f"  trial {number} ({kind}): yield {found.get('yield_seconds')} s, alloc "
                  f"{'ok' if found.get('alloc_ok') else 'FAILED'}, screen {found.get('screen_outcome')}"
                  f"{', ' + found['error'] if found.get('error') else ''}", flush=True)
        return _yield_summary(yields, skipped), _throughput_summary(idle, shared, self.window)


def _runs(stdout: str) -> list[dict]:
    try:
        return json.loads(stdout).get("runs") or []
    except (ValueError, AttributeError):
        return []


def _results(stdout: str) -> list[dict]:
    try:
        return json.loads(stdout).get("results") or []
    except (ValueError, AttributeError):
        return []


def _statuses(stdout: str) -> list[tuple]:
    return [(r.get("check"), (r.get("device") or {}).get("index"), r.get("status")) for r in _results(stdout)]


def percentile(values: list[float], share: float) -> Optional[float]:
    """The nearest-rank percentile (p99 of 10 values is the largest)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -(-round(share * 100) * len(ordered) // 100) - 1))]


def _yield_summary(trials: list[dict], skipped: list[str]) -> dict:
    measured = [t["yield_seconds"] for t in trials if t.get("yield_seconds") is not None]
    allocs = [t.get("alloc_ok") for t in trials if "alloc_ok" in t]
    p99 = percentile(measured, 0.99)
    return {"trials": trials, "skipped_for_time": skipped, "measured": len(measured),
            "p50_seconds": percentile(measured, 0.50), "p99_seconds": p99, "max_seconds": max(measured, default=None),
            "alloc_ok": sum(bool(a) for a in allocs), "alloc_tried": len(allocs),
            "preempted": sum(t.get("screen_outcome") == "preempted" for t in trials),
            "goal": len(measured) >= 10 and p99 is not None and p99 <= 5.0 and all(allocs)
            and len(allocs) == len(trials)}


def _throughput_summary(idle: list[dict], shared: list[dict], window: float) -> dict:
    alone = [r["throughput_flops"] for r in idle if r.get("throughput_flops")]
    together = [r["throughput_flops"] for r in shared if r.get("throughput_flops")]
    ratio = (sum(together) / len(together)) / (sum(alone) / len(alone)) if alone and together else None
    return {"window_seconds": window, "idle_tflops": [round(v / 1e12, 1) for v in alone],
            "with_screen_tflops": [round(v / 1e12, 1) for v in together],
            "ratio": None if ratio is None else round(ratio, 4), "idle_runs": idle,
            "goal": ratio is not None and len(alone) >= 2 and len(together) >= 2 and ratio >= 0.95}


def summary_text(results: dict) -> str:
    parts = results["parts"]
    machine = results["machine"]
    lines = [f"gpudiag screen bench · GPU {machine['bus_id']} · {machine['total_bytes'] / GIB:.1f} GiB"
             f"{' · FAKE (no GPU)' if machine['fake'] else ''} · {results.get('elapsed_seconds')} s"]
    a = parts.get("a", {})
    lines.append(f"a. idle screen: {a.get('outcome')} ({a.get('reason')}); held {_gib(a.get('footprint_bytes'))} at "
                 f"most (bound {_gib(a.get('footprint_limit_bytes'))}); journal {a.get('journal_entries')} entr(ies); "
                 f"history {'shows it' if a.get('history_shows_screen') else 'MISSING'}; "
                 f"{len(a.get('metrics_series') or [])} gpudiag_screen_* series -> {_goal(a)}")
    e = parts.get("e", {})
    lines.append(f"e. held GPU: {e.get('runs')} screen(s) ran; decision: "
                 f"{(e.get('decisions') or [{}])[0].get('reason')} -> {_goal(e)}")
    d = parts.get("d", {})
    lines.append(f"d. SM {d.get('flip_sm')} flip: {d.get('outcome')} on {d.get('mismatched_sms')}; check "
                 f"{d.get('check')} -> {_goal(d)}")
    b = parts.get("b", {})
    lines.append(f"b. yield over {b.get('measured')} trial(s): p50 {b.get('p50_seconds')} s, p99 "
                 f"{b.get('p99_seconds')} s, max {b.get('max_seconds')} s; 90 % allocated "
                 f"{b.get('alloc_ok')}/{b.get('alloc_tried')}; {b.get('preempted')} screens preempted -> {_goal(b)}")
    c = parts.get("c", {})
    lines.append(f"c. first {c.get('window_seconds')} s throughput: idle {c.get('idle_tflops')} TFLOPS, with a screen "
                 f"{c.get('with_screen_tflops')} TFLOPS: ratio {c.get('ratio')} -> {_goal(c)}")
    for name, error in results.get("errors", {}).items():
        lines.append(f"ERROR in {name}: {error}")
    return "\n".join(lines) + "\n"


def _gib(value: Optional[int]) -> str:
    return "?" if value is None else f"{value / GIB:.2f} GiB"


def _goal(part: dict) -> str:
    if not part:
        return "NOT RUN"
    if part.get("error"):
        return f"ERROR ({part['error'][:200]})"
    return "goal met" if part.get("goal") else "GOAL NOT MET"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--budget", type=float, default=460.0)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--fake", action="store_true")
    args = parser.parse_args(argv)
    out = Path(os.environ.get("OUT") or "screen-bench-out")
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    machine = (FakeMachine if args.fake else Machine)(out, args.gpu)
    window, short = (4.0, 2.0) if args.fake else (30.0, 4.0)
    bench = Bench(machine, out, args.budget, window, short, 2 if args.fake else FLIP_SM)
    results = bench.results
    results["errors"] = {}
    try:
        if not bench.wait_idle(30):
            results["errors"]["start"] = f"the GPU is not idle: {machine.listed()} listed, {machine.utilization()} %"
        for name, part, cost in (("a", bench.part_a, 60), ("e", bench.part_e, 30), ("d", bench.part_d, 40)):
            if bench.left() < cost:
                results["parts"][name] = {"error": "skipped: the time budget is spent"}
                continue
            print(f"part {name} …", flush=True)
            try:
                results["parts"][name] = part()
            except Exception as exc:  # noqa: BLE001 - the next part still runs; the JSON says what broke
                results["errors"][name] = f"{type(exc).__name__}: {exc}"
            _write(out, results, began)
        print("parts b and c: trials …", flush=True)
        try:
            results["parts"]["b"], results["parts"]["c"] = bench.trials(args.trials, args.pairs)
        except Exception as exc:  # noqa: BLE001
            results["errors"]["b"] = f"{type(exc).__name__}: {exc}"
    except KeyboardInterrupt:
        results["errors"]["interrupted"] = "Ctrl-C"
    finally:
        bench.cleanup()
        machine.close()
        _write(out, results, began)
        _pack(out)
    print(summary_text(results), end="")
    goals = [results["parts"].get(n, {}).get("goal") for n in ("a", "b", "c", "d", "e")]
    if results["errors"] or any(results["parts"].get(n, {}).get("error") for n in results["parts"]):
        return 2
    return 0 if all(goals) else 1


def _write(out: Path, results: dict, began: float) -> None:
    results["elapsed_seconds"] = round(time.monotonic() - began, 1)
    (out / "screen_yield.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "summary.txt").write_text(summary_text(results))


def _pack(out: Path) -> None:
    """What each part kept (reports, state, journal, history, metrics, the screens' progress lines), in one file
    beside the JSON and the summary: the lab machine brings few files back."""
    parts = [name for name in ("a", "d", "e", "trials") if (out / name).is_dir()]
    if not parts:
        return
    done = subprocess.run(["tar", "czf", str(out / "screen-bench.tar.gz"), "-C", str(out), *parts],
                          capture_output=True, text=True)
    if done.returncode == 0:
        for name in parts:
            shutil.rmtree(out / name, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
