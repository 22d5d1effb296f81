"""A week of screening policy in compressed time (docs/screening.md "The policy"): the real tick of `gpudiag screen`
(gpudiag/cli/screen/tick.py: the state file, the journal, the policy) every 5 minutes of a clock the test holds, over an
8-GPU node where fake jobs come and go (seeded), with simulated screens that a job preempts when it arrives while
they run. Each GPU is verified within its period; no GPU held by a job is screened; preemptions are counted; and a
GPU kept busy past its period grows overdue: the checks warn, and the exporter's series, fed to promtool with the
shipped rules, raise GpudiagScreeningOverdue for that GPU and for no other."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest
import yaml

pytestmark = pytest.mark.slow  # 2,016 ticks: half a minute (tests/README.md)

from gpudiag.active.screen.policy import ScreenPolicy
from gpudiag.active.screen.supervisor import Settings
from gpudiag.checks import run_checks
from gpudiag.cli.screen.tick import ScreenPaths, tick
from gpudiag.exporter.node_metrics import add_snapshot
from gpudiag.exporter.families import FamilySet
from gpudiag.expect.profile import load_expectations
from gpudiag.model import DeviceSnapshot, GpuProcess, MemoryUsage, NodeSnapshot, Status, Utilization, Vendor
from gpudiag.model.screen import PREEMPTED, VERIFIED, ScreeningInfo, ScreenRun
from gpudiag.model.screen_file import load_state
from gpudiag.model import normalize_pci_bus_id
from tests.support.fakes.fake_nvml import HGX_BUS_IDS
from tests.support.paths import REPO

DAY, HOUR, MINUTE = 86400.0, 3600.0, 60.0
TICK = 5 * MINUTE  # gpudiag-screen.timer's OnUnitActiveSec
SCREEN_SECONDS = 300.0  # a screen of a long stress (5 minutes): long enough for jobs to arrive during some
EVERY = DAY  # a one-day period: seven periods in the week
BUSY_GPU = 7  # kept busy from day 1 to day 3.5
BUS = [normalize_pci_bus_id(b) for b in HGX_BUS_IDS]
PROMTOOL = shutil.which("promtool")
RULES = REPO / "monitoring" / "prometheus"


@dataclass
class Job:
    gpu: int
    start: float
    end: float
    pid: int


@dataclass
class Week:
    """The clock, the jobs, and what the test saw happen."""
    now: float = 0.0
    jobs: list[Job] = field(default_factory=list)
    screens: list[ScreenRun] = field(default_factory=list)
    screened_while_held: list[tuple[int, float]] = field(default_factory=list)
    preempted_by_sim: int = 0

    def clock(self) -> float:
        return self.now

    def holding(self, gpu: int, at: float) -> list[Job]:
        return [j for j in self.jobs if j.gpu == gpu and j.start <= at < j.end]

    def devices(self) -> list[DeviceSnapshot]:
        found = []
        for gpu in range(8):
            jobs = self.holding(gpu, self.now)
            found.append(DeviceSnapshot(
                index=gpu, vendor=Vendor.NVIDIA, source="nvml", pci_bus_id=BUS[gpu], uuid=f"GPU-{gpu:04d}",
                name="NVIDIA H200", processes=[GpuProcess(j.pid, "compute", 40 * 1024**3) for j in jobs],
                utilization=Utilization(gpu_percent=95 if jobs else 0, memory_percent=0),
                memory=MemoryUsage(total_bytes=141 * 1024**3, used_bytes=40 * 1024**3 * len(jobs), reserved_bytes=0)))
        return found

    def run_screens(self, targets, settings, reader, stop_requested, clock) -> list[ScreenRun]:
        """The screens of one tick: each takes SCREEN_SECONDS unless a job opens its GPU meanwhile, which
        preempts it (gone a second later)."""
        runs, started = [], self.now
        for target in targets:
            gpu = target.device.index
            if self.holding(gpu, started):
                self.screened_while_held.append((gpu, started))
            arriving = [j for j in self.jobs if j.gpu == gpu and started < j.start < started + SCREEN_SECONDS]
            if arriving:
                self.preempted_by_sim += 1
                job = min(arriving, key=lambda j: j.start)
                run = ScreenRun(BUS[gpu], started, job.start + 1.0, PREEMPTED, "a job opened the GPU",
                                index=gpu, preempted_by=[job.pid], yield_seconds=1.0)
            else:
                run = ScreenRun(BUS[gpu], started, started + SCREEN_SECONDS, VERIFIED, "verified", index=gpu,
                                tests=["hbm", "memtest", "stress"], launches_verified=600)
            runs.append(run)
        self.screens += runs
        self.now = max([started] + [r.finished_at for r in runs])
        return runs


class _Reader:
    def close(self) -> None:
        pass


def jobs(seed: int = 35) -> list[Job]:
    """Jobs on GPUs 0-6 about every 3 hours, 20 minutes to 4 hours long; GPU 7 held from day 1 to day 3.5."""
    rng, found, pid = random.Random(seed), [], 10_000
    for gpu in range(7):
        at = rng.expovariate(1 / (3 * HOUR))
        while at < 7 * DAY:
            length = rng.uniform(20 * MINUTE, 4 * HOUR)
            found.append(Job(gpu, at, at + length, pid))
            pid += 1
            at += length + rng.expovariate(1 / (3 * HOUR))
    found.append(Job(BUSY_GPU, 1 * DAY, 3.5 * DAY, pid))
    return found


def overdue_series(paths: ScreenPaths, week: Week) -> dict[int, float]:
    """gpudiag_screen_overdue_seconds of every GPU, as the exporter renders it from the state at this moment."""
    snapshot = NodeSnapshot(hostname="n1", devices=week.devices(),
                            screening=ScreeningInfo(path=str(paths.state), state=load_state(paths.state),
                                                    read_at=week.now))
    fs = FamilySet()
    add_snapshot(fs, snapshot)  # as the exporter renders them (the family's module found by its name)
    text = fs.exposition().decode()
    return {int(gpu): float(value) for gpu, value in
            re.findall(r'gpudiag_screen_overdue_seconds\{gpu="(\d+)",[^}]*\} (\S+)', text)}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    paths = ScreenPaths.under(tmp_path_factory.mktemp("state"))
    week = Week(jobs=jobs())
    policy = ScreenPolicy(EVERY, 10 * MINUTE, max_gpus=2)
    hourly: list[dict[int, float]] = []
    warned: dict[int, list[float]] = {}
    next_hour = 0.0
    while week.now < 7 * DAY:
        began = week.now
        tick(paths, policy, Settings(progress=None), week.devices(), lambda devices: _Reader(), week.run_screens,
             week.clock)
        week.now = max(week.now, began + TICK)
        if week.now >= next_hour:
            hourly.append(overdue_series(paths, week))
            snapshot = NodeSnapshot(hostname="n1", devices=week.devices(), screening=ScreeningInfo(
                state=load_state(paths.state), read_at=week.now))
            for result in run_checks(snapshot, load_expectations(None, ["screen_every=1d"]), only=["screen.coverage"]):
                if result.status is Status.WARN:
                    warned.setdefault(result.device.index, []).append(week.now)
            next_hour += HOUR
    return paths, week, hourly, warned


def test_every_gpu_not_kept_busy_is_verified_within_its_period(simulated):
    _, week, _, _ = simulated
    for gpu in range(7):
        verified = sorted(r.finished_at for r in week.screens if r.pci_bus_id == BUS[gpu] and r.outcome == VERIFIED)
        gaps = [b - a for a, b in zip([0.0] + verified, verified + [7 * DAY])]
        assert max(gaps) <= EVERY, (gpu, [round(g / HOUR, 1) for g in gaps])
        assert len(verified) >= 7


def test_no_gpu_held_by_a_job_is_screened(simulated):
    _, week, _, _ = simulated
    assert week.screens and week.screened_while_held == []


def test_preemptions_are_counted_per_gpu_and_the_runs_recorded(simulated):
    paths, week, _, _ = simulated
    state = load_state(paths.state)
    assert week.preempted_by_sim > 0
    assert sum(g.preemptions for g in state.gpus) == week.preempted_by_sim
    for gpu in state.gpus:
        mine = [r for r in week.screens if r.pci_bus_id == gpu.pci_bus_id]
        assert sum(gpu.runs.values()) == len(mine)
        assert gpu.preemptions == sum(1 for r in mine if r.outcome == PREEMPTED)
    journal = (paths.directory / "journal.jsonl").read_text().splitlines()
    assert len(journal) == len(week.screens)  # the week's journal fits its first generation


def test_the_gpu_kept_busy_grows_overdue_and_is_screened_once_free(simulated):
    _, week, hourly, warned = simulated
    # screen.coverage warns for GPU 7 while it is held past its period, and for no other GPU
    assert set(warned) == {BUSY_GPU}
    assert min(warned[BUSY_GPU]) <= 2.1 * DAY and max(warned[BUSY_GPU]) <= 3.6 * DAY
    overdue = [h.get(BUSY_GPU, 0.0) for h in hourly]
    assert max(overdue) > DAY  # past the alert's day of grace
    assert all(max(v for g, v in h.items() if g != BUSY_GPU) == 0.0 for h in hourly)
    after = [r for r in week.screens if r.pci_bus_id == BUS[BUSY_GPU] and r.started_at >= 3.5 * DAY]
    assert after and after[0].outcome == VERIFIED and after[0].started_at < 3.5 * DAY + 30 * MINUTE


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_the_shipped_rule_raises_the_overdue_alert_for_that_gpu_only(simulated, tmp_path):
    _, _, hourly, _ = simulated
    series = []
    for gpu in range(8):
        values = " ".join(f"{h.get(gpu, 0.0):g}" for h in hourly)
        series.append(f"      - series: 'gpudiag_screen_overdue_seconds{{gpu=\"{gpu}\",uuid=\"GPU-{gpu:04d}\","
                      f"pci_bus_id=\"{BUS[gpu]}\",instance=\"n1\",job=\"gpudiag\"}}'\n        values: '{values}'")
    firing = [hour for hour, h in enumerate(hourly) if h.get(BUSY_GPU, 0.0) > DAY]
    quiet = [hour for hour in range(len(hourly)) if hour not in firing and hour + 1 not in firing]
    assert firing and quiet
    rule = next(r for g in yaml.safe_load((RULES / "gpudiag-alerts.yml").read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "GpudiagScreeningOverdue")
    annotations = {k: v.replace("{{ $labels.gpu }}", "7").replace("{{ $labels.pci_bus_id }}", BUS[BUSY_GPU])
                   .replace("{{ $labels.instance }}", "n1") for k, v in rule["annotations"].items()}
    expected = ("        exp_alerts:\n          - exp_labels: {severity: warning, gpu: \"7\", uuid: GPU-0007, "
                f"pci_bus_id: \"{BUS[BUSY_GPU]}\", instance: n1, job: gpudiag}}\n"
                f"            exp_annotations: {json.dumps(annotations)}")
    cases = [f"      - eval_time: {hour}h\n        alertname: GpudiagScreeningOverdue\n{expected}"
             for hour in (firing[0], firing[len(firing) // 2], firing[-1])]
    cases += [f"      - eval_time: {hour}h\n        alertname: GpudiagScreeningOverdue\n        exp_alerts: []"
              for hour in (quiet[0], quiet[len(quiet) // 2], quiet[-1])]
    shutil.copy(RULES / "gpudiag-alerts.yml", tmp_path / "gpudiag-alerts.yml")
    test = tmp_path / "week.test.yml"
    test.write_text("rule_files: [gpudiag-alerts.yml]\nevaluation_interval: 1h\ntests:\n  - interval: 1h\n"
                    "    input_series:\n" + "\n".join(series) + "\n    alert_rule_test:\n" + "\n".join(cases) + "\n")
    done = subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
