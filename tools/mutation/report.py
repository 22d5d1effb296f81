"""The mutation score per file, the survivors for reading, and the machine-readable list of every mutant."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mutation.sites import Mutant

KILLED = ("killed", "timeout")
# survived: every test that ran the line passed; not covered: no test ran it; unclear: the failing test also fails
# without the mutant in that order (not counted as a kill); error: the runner could not run it.
NOT_KILLED = ("survived", "not covered", "unclear", "error")


@dataclass
class Outcome:
    mutant: Mutant
    result: str  # one of KILLED + NOT_KILLED
    tests: int  # tests that could see it
    ran: int = 0  # tests run until the verdict
    seconds: float = 0.0
    by: Optional[str] = None  # the test that killed it (or hung)
    fresh: bool = False  # run in a fresh process (the mutant runs at import) rather than in the live functions
    error: str = ""


def line_text(o: Outcome, root: Path) -> str:
    return (root / o.mutant.path).read_text().splitlines()[o.mutant.line - 1].strip()


def progress_line(o: Outcome) -> str:
    where = ", fresh process" if o.fresh else ""
    return (f"  {o.mutant.path}:{o.mutant.line} {o.mutant.description}: {o.result} ({o.ran}/{o.tests} tests, "
            f"{o.seconds:.1f} s{where})")


def scores(outcomes: list[Outcome], files: list[str]) -> dict[str, dict]:
    out = {}
    for f in files:
        mine = [o for o in outcomes if o.mutant.path == f]
        killed = sum(o.result in KILLED for o in mine)
        out[f] = {"mutants": len(mine), "killed": killed, "timeouts": sum(o.result == "timeout" for o in mine),
                  "score": round(100 * killed / len(mine), 1) if mine else 100.0}
    return out


def print_report(outcomes: list[Outcome], files: list[str], wall: float, cpu: float, workers: int,
                 root: Path) -> None:
    # The CPU seconds tell the run's cost apart from what other work on the machine took from it.
    print(f"\nmutation score ({len(outcomes)} mutants, {wall:.0f} s with {workers} worker(s), {cpu:.0f} s of CPU; "
          f"timeouts count as killed)")
    for f, s in scores(outcomes, files).items():
        print(f"  {f}: {s['score']:.1f} % ({s['killed']}/{s['mutants']} killed, {s['timeouts']} by timeout)")
    killed = sum(o.result in KILLED for o in outcomes)
    if outcomes:
        print(f"  overall: {100 * killed / len(outcomes):.1f} % ({killed}/{len(outcomes)})")
    for title, kinds in (("survivors (equivalent mutants among them need a reason, the rest a test)",
                          ("survived", "not covered")),
                         ("killed by timeout (a test ran past its deadline; that test passes without the mutant)",
                          ("timeout",)),
                         ("unclear (the failing test fails without the mutant too, in that order): not counted as "
                          "killed", ("unclear",)),
                         ("errors (the runner could not run the mutant): not counted as killed", ("error",))):
        listed = [o for o in outcomes if o.result in kinds]
        if listed:
            print(f"\n{title}:")
            for o in sorted(listed, key=lambda o: (o.mutant.path, o.mutant.line, o.mutant.index)):
                extra = f" by {o.by}" if o.result != "survived" and o.by else f" {o.error}" if o.error else ""
                print(f"  {o.mutant.path}:{o.mutant.line} {o.mutant.description} [{o.result}]  "
                      f"{line_text(o, root)[:90]}{extra}")


def write_json(path: Path, outcomes: list[Outcome], files: list[str], wall: float, cpu: float, workers: int,
               root: Path) -> None:
    rows = [{"file": o.mutant.path, "line": o.mutant.line, "index": o.mutant.index,
             "description": o.mutant.description, "outcome": o.result, "function": ".".join(o.mutant.scope[-1:]),
             "source": line_text(o, root), "tests": o.tests, "ran": o.ran, "seconds": round(o.seconds, 2),
             "killed_by": o.by if o.result in KILLED else None, "fresh_process": o.fresh,
             **({"error": o.error} if o.error else {})}
            for o in sorted(outcomes, key=lambda o: (o.mutant.path, o.mutant.index))]
    killed = sum(o.result in KILLED for o in outcomes)
    path.write_text(json.dumps({"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "workers": workers,
                                "overall": round(100 * killed / len(outcomes), 1) if outcomes else 100.0,
                                "files": scores(outcomes, files), "mutants": rows}, indent=1) + "\n")
