"""`gpudiag screen`: prove idle GPUs correct by policy, and give them back within seconds (docs/screening.md).

Run by gpudiag-screen.timer (opt-in) every few minutes: each run screens the GPUs that are due and idle, at most
`screen_max_gpus` at once, and records every screen. `gpudiag screen --stop` is for a scheduler's prolog."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from gpudiag.cli.shared.node_collect import UsageProblem
from gpudiag.cli.shared.options import ParamOption, ProfileOption, RootOption, TimeoutOption, finite, split_ids
from gpudiag.exitcodes import ExitCode


class ScreenFormat(str, Enum):
    text = "text"
    json = "json"


def screen(
    every: Optional[str] = typer.Option(None, "--every", help="Screen every GPU at least this often: 7d, 12h, … (profile key screen_every, default 7d)."),
    idle_after: Optional[str] = typer.Option(None, "--idle-after", help="Only GPUs no job has held for this long: 10m, 0s, … (screen_idle_after, default 10m)."),
    max_gpus: Optional[int] = typer.Option(None, "--max-gpus", min=1, max=64, help="GPUs screened at once (screen_max_gpus, default 1)."),
    stress_seconds: Optional[float] = typer.Option(None, "--stress-seconds", min=1.0, max=3600.0, callback=finite, help="How long each screen's verified stress runs (screen_stress_seconds, default 30)."),
    now: bool = typer.Option(False, "--now", help="Screen the idle GPUs now, due or not, whatever their last result (after a repair); the idle rules still hold."),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", "-i", help="Only these GPUs: index, PCI bus ID or UUID (repeat or comma-separate)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say which GPUs would be screened and why, and screen none."),
    stop: bool = typer.Option(False, "--stop", help="For a scheduler's prolog: stop a running screen (of --gpu, or all), wait until its GPUs are free, and hold screens off them for screen_idle_after."),
    reason: str = typer.Option("gpudiag screen --stop", "--reason", help="With --stop: why, as the preempted screen records it (e.g. the job ID)."),
    wait: float = typer.Option(4.5, "--wait", min=0.5, max=60.0, callback=finite, help="With --stop: seconds to wait for the screen to go before killing it."),
    fmt: ScreenFormat = typer.Option(ScreenFormat.text, "--format", "-f", help="Output format."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="Keep the screens' state and journal here (default /var/lib/gpudiag; under --root DIR, DIR/var/lib/gpudiag)."),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
    profile: Optional[str] = ProfileOption,
    params: Optional[List[str]] = ParamOption,
) -> None:
    """Screen idle GPUs with the verified load tests, by policy; yield to any job within seconds."""
    from gpudiag.cli.screen.tick import ScreenPaths
    from gpudiag.service import state_dir as default_state_dir

    paths = ScreenPaths.under(default_state_dir(root, state_dir))
    wanted = split_ids(gpu) or None
    if stop:
        _refuse_with_stop(now, dry_run, every, idle_after, max_gpus, stress_seconds)
        raise typer.Exit(_stop(paths, reason, wanted, wait, fmt))
    raise typer.Exit(_tick(paths, root, timeout, wanted, now, dry_run, fmt, profile, params or [],
                           every, idle_after, max_gpus, stress_seconds))


def _refuse_with_stop(*values: object) -> None:
    if any(value not in (None, False) for value in values):
        raise UsageProblem("--stop stops screens: --now, --dry-run, --every, --idle-after, --max-gpus and "
                           "--stress-seconds do not apply to it")


def _stop(paths, reason: str, wanted: Optional[list[str]], wait: float, fmt: ScreenFormat) -> int:
    from gpudiag.cli.screen.tick import load_or_start, request_stop

    gpus = _known_bus_ids(load_or_start(paths), wanted) if wanted else None
    report = request_stop(paths, reason, gpus, wait)
    if fmt is ScreenFormat.json:
        sys.stdout.write(json.dumps({"schema_version": 1, "was_running": report.was_running, "stopped": report.stopped,
                                     "seconds": round(report.seconds, 3), "held_off": report.marked,
                                     "message": report.message}, indent=2) + "\n")
    elif report.stopped:
        done = (f"stopped the running screen in {report.seconds:.2f} s" if report.was_running
                else "no screen was running")
        print(f"gpudiag screen --stop: {done}; screens held off {len(report.marked)} GPU(s) for screen_idle_after")
    else:
        print(f"gpudiag screen --stop: {report.message}", file=sys.stderr)
    return ExitCode.OK if report.stopped else 1


def _known_bus_ids(state, wanted: list[str]) -> list[str]:
    """--gpu for --stop, resolved against the GPUs the screens know (no vendor library is opened for a prolog)."""
    found = []
    for text in wanted:
        match = [g.pci_bus_id for g in state.gpus
                 if text == str(g.index) or text.lower() == g.pci_bus_id or text.lower() == (g.uuid or "").lower()]
        if not match:
            raise UsageProblem(f"--gpu {text[:60]!r}: the screens know no such GPU (known: "
                               f"{', '.join(f'{g.index} ({g.pci_bus_id})' for g in state.gpus) or 'none yet'})")
        found += match
    return found


def _tick(paths, root: Path, timeout, wanted, now: bool, dry_run: bool, fmt: ScreenFormat, profile, params,
          every, idle_after, max_gpus, stress_seconds) -> int:
    from gpudiag.active.screen.policy import ScreenPolicy, observe, plan, record_use
    from gpudiag.active.screen.supervisor import Settings
    from gpudiag.cli.shared import node_collect
    from gpudiag.cli.screen.tick import load_or_start, tick
    from gpudiag.cli.screen.view import open_reader, render
    from gpudiag.expect import ExpectationError
    from gpudiag.expect.screen_settings import ScreenSettings, duration_seconds, settings_of
    from gpudiag.report.gpu_selection import select_gpus
    import dataclasses
    import time

    expectations = node_collect.expectations(profile, params, None)
    chosen = settings_of(expectations) if expectations is not None else ScreenSettings()
    flags = {"screen_every": ("--every", every), "screen_idle_after": ("--idle-after", idle_after),
             "screen_max_gpus": ("--max-gpus", max_gpus), "screen_stress_seconds": ("--stress-seconds", stress_seconds)}
    try:  # a flag wins over the profile
        chosen = dataclasses.replace(chosen, **{key: value for key, (_, value) in flags.items() if value is not None})
    except ExpectationError as exc:
        raise UsageProblem(f"{flags[exc.key][0]} {flags[exc.key][1]!r}: {exc.problem}") from None
    policy = ScreenPolicy(duration_seconds(chosen.screen_every), duration_seconds(chosen.screen_idle_after),
                          chosen.screen_max_gpus)
    snapshot = node_collect.collect(root, None, timeout, 1, parts=frozenset())
    selected = None
    if wanted:
        try:
            selected = select_gpus(snapshot, wanted)[1]
        except ValueError as exc:
            raise UsageProblem(str(exc)) from None
    if dry_run:
        state = load_or_start(paths)
        seen = [observe(d) for d in snapshot.devices if d.pci_bus_id]
        record_use(state, seen, time.time())
        report_plan = plan(state, [s for s in seen if selected is None or s.pci_bus_id in selected], policy,
                           time.time(), now)
        sys.stdout.write(render(policy, report_plan, [], fmt.value, None))
        return ExitCode.OK
    settings = Settings(stress_seconds=chosen.screen_stress_seconds, memory_fraction=chosen.screen_memory_fraction)
    report = tick(paths, policy, settings, snapshot.devices, lambda devices: open_reader(devices, root),
                  now_requested=now, selected=selected)
    sys.stdout.write(render(policy, report.plan, report.runs, fmt.value, report.busy or report.held_back))
    return report.exit_code
