"""A cold `gpudiag check --direct` against `nvidia-smi -q` on the same node, and where gpudiag's time goes: one
command for the lab GPU (issue 36, item 9: the first answer no slower than `nvidia-smi -q`).

1. Both commands run as fresh processes, interleaved (so that both see the same machine state), after one warm-up
   of each; `python -c pass` runs beside them, the floor under any Python command. It prints the median and p90 of
   each, and the ratio of the medians.
2. The breakdown: a few more cold runs of the same check, each reporting its own phases (interpreter start, the fast
   path, the imports, the probe and its parts, judging and writing, the exit; NVML's early initialisation beside the
   imports; any program it started, timed again on its own), as many less each overlap of the probe with the
   imports (the A/Bs: bench WITHOUT), and one more run with each module body timed (CPU by package, the top
   modules). With the early collection the "probe" step is what is left of it once the imports are done.
3. With `--compare PATH` (another installed console script: the code before a change), that check runs in the same
   interleaved rounds, so that a change is judged against the code before on the same machine state rather than in
   runs that take turns: its median, its ratio to `nvidia-smi -q`, and this check's to it.

gpudiag runs as a user runs it: `python3 -m gpudiag check --direct` (gpudiag/__main__.py calls
gpudiag.cli.check.fastpath:run, the console script's own entry point) from this tree under this interpreter, or
with `--gpudiag PATH` an installed console script. `--direct`: the node is probed by this process even where a
`gpudiag serve` listens. Python modules are byte-compiled first, as `pip install` does on a real node (the lab sets
PYTHONDONTWRITEBYTECODE=1; without this step every run would compile gpudiag and pynvml from source); `--no-compile`
measures that case.

    PYTHONPATH=. python3 bench/check_vs_nvidia_smi.py            # on a GPU node: figures on stdout and under $OUT
    python3 bench/check_vs_nvidia_smi.py --gpudiag /opt/gpudiag/bin/gpudiag
    python3 bench/check_vs_nvidia_smi.py --gpudiag /tmp/new/bin/gpudiag --compare /tmp/old/bin/gpudiag
    python3 bench/check_vs_nvidia_smi.py --fake 1                # over the tests' fake NVIDIA node (no nvidia-smi)

With $OUT set (or --out DIR), it writes check_vs_nvidia_smi.json (every sample, the summary, the breakdown) and
check_vs_nvidia_smi.txt (what it printed) there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Where the breakdown's, the timeline's and the import profile's `python -c` runs start: `python -c` puts its working
# directory first on sys.path, so from the tree they would import this tree's gpudiag, not --gpudiag's installed one.
# main() points it elsewhere for --gpudiag (the interleaved timing runs the console script itself).
CHILD_CWD = REPO
COMPARED = "--compare's check"  # --compare's command, in the interleaved rounds and the figures


def timed(cmd: list[str], env: dict) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    return time.perf_counter() - started, done.returncode


def interleaved(commands: dict[str, list[str]], runs: int, env: dict,
                budget_seconds: float = float("inf")) -> tuple[dict, dict]:
    """One warm-up run of each command, then `runs` rounds of each in turn (fewer when `budget_seconds` runs out):
    wall times and exit codes by name."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    until = time.monotonic() + budget_seconds
    for cmd in commands.values():
        timed(cmd, env)
    for _ in range(runs):
        if time.monotonic() > until:
            break
        for name, cmd in commands.items():
            seconds, rc = timed(cmd, env)
            samples[name].append(seconds)
            codes[name].add(rc)
    return samples, codes


# What `gpudiag check` imports (gpudiag itself and its dependencies), byte-compiled before timing.
MODULES = ("gpudiag", "pynvml", "psutil", "typer", "click", "rich", "pydantic", "pydantic_core", "shellingham",
           "annotated_doc", "typing_extensions")


def precompile() -> list[str]:
    import compileall
    import importlib.util

    compiled = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            continue
        target = Path(spec.origin)
        ok = compileall.compile_dir(str(target.parent), quiet=2) if target.name == "__init__.py" else \
            compileall.compile_file(str(target), quiet=2)
        compiled.append(name if ok else f"{name} (not writable)")
    return compiled


def figures(values: list[float], codes: set[int]) -> dict:
    ms = sorted(v * 1000 for v in values)
    p90 = statistics.quantiles(ms, n=10, method="inclusive")[8] if len(ms) > 1 else ms[0]
    return {"runs": len(ms), "median_ms": round(statistics.median(ms), 1), "p90_ms": round(p90, 1),
            "min_ms": round(ms[0], 1), "max_ms": round(ms[-1], 1), "exit_codes": sorted(codes)}


# --- the breakdown of one cold check --------------------------------------------------------------------------------

# Runs the check as `python -m gpudiag` does (fastpath.main, then fastpath.leave), noting when each step ended and
# which programs it started; the notes go to the file named by argv[1], the check's arguments follow. PRELUDE
# installs the fake NVML node with --fake.
CHILD = """import time
FIRST_LINE = time.perf_counter()
import sys
SPAWNED = []
sys.addaudithook(lambda event, args: event == "subprocess.Popen" and SPAWNED.append(
    [time.perf_counter(), [str(a) for a in (args[1] or [args[0]])][:6]]))
notes, sys.argv = sys.argv[1], ["gpudiag", *sys.argv[2:]]
{prelude}
sys.stderr.write("bench: gpudiag starts\\n")
STARTED = time.perf_counter()
from gpudiag.cli.check import fastpath
code = fastpath.main()
sys.stdout.flush()
ENDED = time.perf_counter()
import json
from gpudiag.cli.check import direct
from gpudiag.probe.nvml import early
from gpudiag.cli.check import early_collect
with open(notes, "w") as out:
    json.dump({{"first_line": FIRST_LINE, "started": STARTED, "marks": direct.MARKS, "parts": direct.PROBE_PARTS,
               "early_nvml": direct.NVML_WINDOW or early.WINDOW,
               "child_marks": direct.CHILD_MARKS + early_collect.CHILD_MARKS,
               "spawned": SPAWNED, "ended": ENDED, "code": code,
               "modules": globals().get("MODULE_CPU", {{}})}}, out)
fastpath.leave(code)
"""
FAKE_PRELUDE = ("import os\nfrom tests.support.fakes.fake_nvml import FakeNode, installed\n"
                "FAKE = installed(FakeNode.hgx_h200(int(os.environ['GPUDIAG_BENCH_FAKE'])))\nFAKE.__enter__()")
# The steps of one run, each ending at a note: the interpreter's start (to the runner's first line), the runner's own
# set-up (with --fake: installing the fake node), the fast path's import and parsing, the imports of the direct check,
# the probe, judging and writing the report, and the exit.
STEPS = ("interpreter start", "bench set-up", "fast path", "imports", "probe", "judge, render, write", "exit")


def one_breakdown(python: list[str], check_args: list[str], env: dict, prelude: str) -> dict:
    """One cold check in steps (milliseconds); the probe's parts and NVML's early start beside them."""
    with tempfile.NamedTemporaryFile(suffix=".json") as notes:
        spawned = time.perf_counter()
        done = subprocess.run([*python, "-c", CHILD.format(prelude=prelude), notes.name, *check_args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=CHILD_CWD, text=True)
        exited = time.perf_counter()
        try:
            got = json.loads(Path(notes.name).read_text())
        except ValueError:
            raise SystemExit(f"the breakdown run failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    marks = dict(got["marks"])
    if "probed" not in marks:
        raise SystemExit(f"the breakdown run did not probe the node (exit {got['code']}): {done.stderr[-400:]}")
    ends = [got["first_line"], got["started"], marks["entered"], marks["imported"], marks["probed"],
            marks["judged and written"], exited]
    steps = {name: (end - begin) * 1e3 for name, begin, end in zip(STEPS, [spawned, *ends], ends)}
    early = got["early_nvml"]
    return {"steps": steps, "total": (exited - spawned) * 1e3,
            "parts": {name: seconds * 1e3 for name, seconds in got["parts"].items()},
            # the early NVML thread: pynvml's import, nvmlInit, opening each GPU, and how long before (negative:
            # after) the end of the imports it was done; absent where it did not run (no /dev/nvidiactl)
            "early_nvml": {"library loaded": (early[1] - early[0]) * 1e3, "nvmlInit": (early[2] - early[1]) * 1e3,
                           "GPUs opened": (early[3] - early[2]) * 1e3,
                           "done before the imports ended": (marks["imported"] - early[3]) * 1e3} if early else {},
            "spawned": [{"at_ms": (at - spawned) * 1e3, "argv": argv} for at, argv in got["spawned"]]}


# Times each module's body (its own CPU time, on the thread that imports it, less the modules it imports in turn):
# appended to the runner's set-up for one more run. -X importtime would count a module imported on another thread
# (the kernel-log scan, NVML's early start) against whichever import the main thread was in.
MODULE_TIMER = """
import threading, importlib._bootstrap_external as _external
MODULE_CPU, _stacks, _exec = {}, threading.local(), _external._LoaderBasics.exec_module
def _timed_exec(loader, module):
    stack = _stacks.__dict__.setdefault("stack", [])
    started = time.thread_time()
    stack.append(0.0)
    try:
        return _exec(loader, module)
    finally:
        took, inner = time.thread_time() - started, stack.pop()
        MODULE_CPU[module.__name__] = MODULE_CPU.get(module.__name__, 0.0) + took - inner
        if stack:
            stack[-1] += took
_external._LoaderBasics.exec_module = _timed_exec
"""


# Marks the collector's steps in whichever process collects (the forked child sends them back with its answer:
# gpudiag/cli/check/early_collect.py CHILD_MARKS): appended to the runner's set-up for one more run. The methods are
# wrapped when their module is first executed, so that nothing is imported earlier than the check itself imports it.
TIMELINE = """
import functools as _functools, importlib._bootstrap_external as _external2
_MARKED = {"gpudiag.probe.collector": [("Collector", m) for m in ("_collect_host", "_open_backends",
                                                                  "_collect_devices", "_collect_peers",
                                                                  "_finish_kernel_log", "_finish_family_parts",
                                                                  "close")],
           "gpudiag.probe.kernel_log.reader": [(None, "read_kernel_log")],
           "gpudiag.probe.nvml.backend": [("NvmlBackend", "open"), ("NvmlBackend", "probe_device")]}
def _mark(label):
    from gpudiag.cli.check import early_collect
    early_collect.CHILD_MARKS.append((label, time.perf_counter()))
def _wrap(owner, name):
    original = getattr(owner, name)
    @_functools.wraps(original)
    def wrapper(*args, **kwargs):
        _mark(name + " begins")
        try:
            return original(*args, **kwargs)
        finally:
            _mark(name + " ends")
    setattr(owner, name, wrapper)
_exec2 = _external2._LoaderBasics.exec_module
def _exec_and_mark(loader, module):
    _exec2(loader, module)
    for owner, name in _MARKED.get(module.__name__, ()):
        _wrap(getattr(module, owner) if owner else module, name)
_external2._LoaderBasics.exec_module = _exec_and_mark
"""


def timeline(python: list[str], check_args: list[str], env: dict, prelude: str, runs: int) -> dict:
    """`runs` more cold checks with the collector's steps marked (TIMELINE): each mark's median time since the
    check's process was started (ms), the parent's and the collecting child's in one list, in order."""
    samples: list[dict] = []
    for _ in range(runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as notes:
            spawned = time.perf_counter()
            subprocess.run([*python, "-c", CHILD.format(prelude=prelude + TIMELINE), notes.name, *check_args],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=CHILD_CWD)
            exited = time.perf_counter()
            got = json.loads(Path(notes.name).read_text())
        marks: dict[str, float] = {"first line": got["first_line"], "gpudiag starts": got["started"]}
        marks.update((f"parent: {step}", at) for step, at in got["marks"])
        seen: dict[str, int] = {}
        for label, at in got["child_marks"]:  # a step made more than once (one per GPU) is numbered
            seen[label] = seen.get(label, 0) + 1
            marks[label if seen[label] == 1 else f"{label} #{seen[label]}"] = at
        marks["exited"] = exited
        samples.append({label: (at - spawned) * 1e3 for label, at in marks.items()})
    labels = [label for label in samples[0] if all(label in s for s in samples)]
    return {"runs": runs, "median_ms_since_start": dict(sorted(
        ((label, statistics.median(s[label] for s in samples)) for label in labels), key=lambda kv: kv[1]))}


def import_profile(python: list[str], check_args: list[str], env: dict, prelude: str, top: int = 15) -> dict:
    """One more cold check, each module's body timed (MODULE_TIMER): CPU by package (gpudiag's sub-packages apart)
    and the top modules, from gpudiag's start (with --fake, what the fake node imported before, pynvml and
    dataclasses among them, is not counted)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as notes:
        subprocess.run([*python, "-c", CHILD.format(prelude=prelude + MODULE_TIMER), notes.name, *check_args],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=CHILD_CWD)
        modules = {name: seconds * 1e3 for name, seconds in json.loads(Path(notes.name).read_text())["modules"].items()}
    by_package: dict[str, float] = {}
    for name, ms in modules.items():
        parts = name.split(".")
        package = ".".join(parts[:2]) if parts[0] == "gpudiag" else parts[0] if parts[0] in (
            "pynvml", "psutil", "typer", "click", "rich") else "(standard library and others)"
        by_package[package] = by_package.get(package, 0.0) + ms
    return {"total_ms": sum(modules.values()), "modules": len(modules),
            "by_package_ms": {k: v for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])},
            "top_modules_ms": {k: v for k, v in sorted(modules.items(), key=lambda kv: -kv[1])[:top]}}


# The same check less one of its overlaps, for the A/Bs beside the breakdown's runs: the collection in a child
# forked before the imports (gpudiag/cli/check/early_collect.py; without it, this process probes after importing,
# with NVML's early start beside the imports), and NVML's early start (gpudiag/probe/nvml/early.py: nvmlInit and
# each GPU opened beside the imports of the probe, in whichever process probes), and the NVML-ahead process.
WITHOUT = {
    "without the forked collection": "\nimport gpudiag.cli.check.direct as _direct\n"
                                     "_direct.forks_the_collection = lambda root: False\n",
    "without NVML's early start": "\nimport gpudiag.probe.nvml.early as _early\n"
                                  "_early.start_nvml_init = lambda: None\n",
    # NVML's reads made by a process of their own, forked first (gpudiag/probe/nvml/ahead.py)
    "without NVML ahead": "\nimport gpudiag.cli.check.early_collect as _forked\n"
                            "_forked._nvidia_driver_loaded = lambda: False\n",
}


def breakdown(python: list[str], check_args: list[str], env: dict, prelude: str, runs: int) -> dict:
    """`runs` cold checks in steps, and interleaved with them as many less each overlap (WITHOUT: the A/Bs)."""
    samples: list[dict] = []
    variants: dict[str, list[dict]] = {label: [] for label in WITHOUT}
    for number in range(runs + 1):  # one warm-up of each
        shipped = one_breakdown(python, check_args, env, prelude)
        others = {label: one_breakdown(python, check_args, env, prelude + extra) for label, extra in WITHOUT.items()}
        if number:
            samples.append(shipped)
            for label, sample in others.items():
                variants[label].append(sample)
    median = {name: statistics.median(s["steps"][name] for s in samples) for name in STEPS}
    parts = {name: statistics.median(s["parts"].get(name, 0.0) for s in samples) for name in samples[0]["parts"]}
    early = {name: statistics.median(s["early_nvml"][name] for s in samples) for name in samples[0]["early_nvml"]}
    a_b = {label: {"total": statistics.median(s["total"] for s in group),
                   "imports": statistics.median(s["steps"]["imports"] for s in group),
                   "probe": statistics.median(s["steps"]["probe"] for s in group),
                   "nvml part": statistics.median(s["parts"].get("nvml", 0.0) for s in group)}
           for label, group in (("as shipped", samples), *variants.items())}
    return {"runs": runs, "steps_median_ms": median, "timeline": timeline(python, check_args, env, prelude, runs),
            "total_median_ms": statistics.median(s["total"] for s in samples),
            "probe_parts_median_ms": parts, "early_nvml_median_ms": early, "spawned": samples[-1]["spawned"],
            "a_b_ms": a_b, "imports": import_profile(python, check_args, env, prelude), "samples": samples}


def time_programs(spawned: list[dict], env: dict, runs: int = 3, budget_seconds: float = 30.0) -> dict[str, dict]:
    """Each program the check started (journalctl for earlier boots' kernel records: probe/kernel_log/boot_history.py),
    run again on its own as the check runs it: its median wall time and output size (within `budget_seconds` in all:
    a program left out says so). The check waits for the kernel log's part, and so for these, before it judges."""
    found: dict[str, dict] = {}
    until = time.monotonic() + budget_seconds
    for argv in dict.fromkeys(tuple(s["argv"]) for s in spawned):
        if time.monotonic() > until:
            found[" ".join(argv)] = {"median_ms": None, "output_bytes": None, "note": "not timed: budget spent"}
            continue
        seconds, size = [], 0
        for _ in range(runs):
            started = time.perf_counter()
            done = subprocess.run(list(argv), capture_output=True, env={**env, "SYSTEMD_PAGER": "", "LC_ALL": "C"},
                                  timeout=60)
            seconds.append(time.perf_counter() - started)
            size = len(done.stdout)
        found[" ".join(argv)] = {"median_ms": round(statistics.median(seconds) * 1e3, 1), "output_bytes": size}
    return found


def describe(found: dict) -> list[str]:
    lines = [f"one cold check in steps, medians of {found['runs']} runs (ms; total {found['total_median_ms']:.1f}):"]
    lines += [f"  {name:22} {value:7.1f}" for name, value in found["steps_median_ms"].items()]
    lines.append("  the probe's parts (kernel_log and the family parts run beside the devices): " + ", ".join(
        f"{name} {value:.1f}" for name, value in found["probe_parts_median_ms"].items()))
    early = found["early_nvml_median_ms"]
    lines.append("  NVML's early start beside the imports: " + (", ".join(
        f"{name} {value:.1f}" for name, value in early.items()) if early else
        "none in the probing process (no /dev/nvidiactl, or the NVML-ahead process opened NVML: its marks are in the "
        "timeline)"))
    lines.append("  the same check less each overlap, interleaved (medians): " + "; ".join(
        f"{label}: total {v['total']:.1f}, imports {v['imports']:.1f}, then probe {v['probe']:.1f} (nvml part "
        f"{v['nvml part']:.1f})" for label, v in found["a_b_ms"].items()))
    lines.append("  programs started: " + ("; ".join(f"{' '.join(s['argv'])} at {s['at_ms']:.1f} ms"
                                                    for s in found["spawned"]) or "none"))
    for argv, timing in found.get("programs", {}).items():
        lines.append(f"    {argv}: " + (timing.get("note") or f"{timing['median_ms']:.1f} ms on its own (median of 3), "
                                                           f"{timing['output_bytes']} bytes"))
    lines.append(f"a timeline of {found['timeline']['runs']} more runs, collector steps marked (medians, ms since the "
                 f"process was started; parent and collecting child):")
    lines += [f"  {at:7.1f}  {label}" for label, at in found["timeline"]["median_ms_since_start"].items()]
    imports = found["imports"]
    lines.append(f"module bodies of one more run: {imports['total_ms']:.1f} ms of CPU in {imports['modules']} modules "
                 f"(each its own, on the thread that imported it)")
    lines.append("  by package: " + ", ".join(f"{k} {v:.1f}" for k, v in imports["by_package_ms"].items() if v >= 0.5))
    lines.append("  top modules: " + ", ".join(f"{k} {v:.1f}" for k, v in imports["top_modules_ms"].items()))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31, help="interleaved rounds (at least 21 for the lab figure)")
    parser.add_argument("--breakdown-runs", type=int, default=7)
    parser.add_argument("--gpudiag", help="an installed console script to time instead of this tree")
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT") or None,
                        help="where the JSON and the text go (default: $OUT; neither: not written)")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile the modules first")
    parser.add_argument("--only", help="time `gpudiag check --direct --only ONLY` instead of the full checklist")
    parser.add_argument("--budget-seconds", type=float, default=150.0,
                        help="stop adding interleaved rounds after this long (the whole run stays under 3 minutes)")
    parser.add_argument("--fake", type=int, metavar="GPUS", help="over the tests' fake NVIDIA node (no ratio)")
    parser.add_argument("--compare", metavar="PATH",
                        help="another installed console script (the code before a change) timed in the same rounds")
    args = parser.parse_args()
    if args.fake is None and shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: this benchmark runs on an NVIDIA node (or use --fake)", file=sys.stderr)
        return 2
    if args.gpudiag:
        script = Path(args.gpudiag).resolve()
        python = [str(script.parent / "python")]  # the console script's own interpreter (a venv's bin/)
        gpudiag = [str(script)]
        if args.fake is None:  # (the fake node's prelude imports the tests' support from the tree)
            global CHILD_CWD
            CHILD_CWD = Path(tempfile.mkdtemp(prefix="gpudiag-bench-"))
    else:
        python = [sys.executable]
        gpudiag = [sys.executable, "-m", "gpudiag"]
    printed: list[str] = []

    def say(line: str) -> None:
        printed.append(line)
        print(line, flush=True)

    env = dict(os.environ)
    if not args.gpudiag:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if not args.no_compile:
        sys.path.insert(0, str(REPO))
        say("byte-compiled: " + ", ".join(precompile()))
    check_args = ["check", "--direct"] + (["--only", args.only] if args.only else [])
    prelude, scratch = "", None
    commands = {"gpudiag check --direct": [*gpudiag, *check_args], "nvidia-smi -q": ["nvidia-smi", "-q"],
                "python -c pass": [*python, "-c", "pass"]}
    if args.compare and args.fake is None:
        commands[COMPARED] = [str(Path(args.compare).resolve()), *check_args]
    if args.fake is not None:
        sys.path.insert(0, str(REPO))
        from tests.support.exporter_node import fake_node, fake_root

        scratch = tempfile.TemporaryDirectory()
        fake_root(Path(scratch.name), fake_node(args.fake))
        check_args += ["--root", scratch.name]
        env["GPUDIAG_BENCH_FAKE"] = str(args.fake)
        prelude = FAKE_PRELUDE
        commands = {"gpudiag check --direct": [*python, "-c", CHILD.format(prelude=prelude), os.devnull, *check_args],
                    "python -c pass": [*python, "-c", "pass"]}
        say(f"over the tests' fake {args.fake}-GPU NVIDIA node: no nvidia-smi, no ratio")

    started = time.monotonic()
    samples, codes = interleaved(commands, args.runs, env, args.budget_seconds)
    summary = {name: figures(values, codes[name]) for name, values in samples.items()}
    say(f"timing {' '.join(gpudiag if args.fake is None else ['(fake node)'])} {' '.join(check_args)} "
        f"({python[0]}), interleaved with nvidia-smi -q and python -c pass"
        + (f" and {' '.join(commands[COMPARED])}" if COMPARED in commands else ""))
    for name, fig in summary.items():
        say(f"{name:24s} median {fig['median_ms']:7.1f} ms  p90 {fig['p90_ms']:7.1f}  (min {fig['min_ms']:.1f}, "
            f"max {fig['max_ms']:.1f}; exit codes {fig['exit_codes']}; {fig['runs']} runs)")
    ratio = None
    if "nvidia-smi -q" in summary:
        ratio = summary["gpudiag check --direct"]["median_ms"] / summary["nvidia-smi -q"]["median_ms"]
        p90_ratio = summary["gpudiag check --direct"]["p90_ms"] / summary["nvidia-smi -q"]["p90_ms"]
        what = f"--only {args.only}" if args.only else "full checklist"
        say(f"ratio gpudiag check --direct / nvidia-smi -q = {ratio:.2f} (medians; p90s {p90_ratio:.2f}; {what}; "
            f"{'meets' if ratio <= 1.0 else 'MISSES'} the target: no slower than nvidia-smi -q)")
    if COMPARED in summary:
        compared = summary[COMPARED]["median_ms"]
        say(f"compared in the same rounds: {COMPARED} / nvidia-smi -q = "
            f"{compared / summary['nvidia-smi -q']['median_ms']:.2f}; gpudiag check --direct / it = "
            f"{summary['gpudiag check --direct']['median_ms'] / compared:.3f} (medians)")
    found = breakdown(python, check_args, env, prelude, args.breakdown_runs)
    found["programs"] = time_programs(found["spawned"], env)
    for line in describe(found):
        say(line)
    say(f"({time.monotonic() - started:.0f} s in all)")
    result = {"command": commands["gpudiag check --direct"] if args.fake is None else "fake node",
              "python": python[0], "figures": summary, "ratio": None if ratio is None else round(ratio, 3),
              "samples_ms": {name: [round(v * 1e3, 2) for v in values] for name, values in samples.items()},
              "breakdown": found}
    for path in filter(None, [args.json, args.out and args.out / "check_vs_nvidia_smi.json"]):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
    if args.out:
        (args.out / "check_vs_nvidia_smi.txt").write_text("\n".join(printed) + "\n")
    if scratch is not None:
        scratch.cleanup()
    if CHILD_CWD != REPO:
        shutil.rmtree(CHILD_CWD, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
