"""How many lines `gpudiag check` prints for every scenario of tests/support/checklist_scenarios.py (each single-fault
node the tests' fakes build, both vendors, and issue 27's three noisy cases), by default and with --verbose, against the
line budget of docs/checklist.md. No GPU needed: the fake NVML and amdsmi libraries of tests/support/fakes/.

Usage: PYTHONPATH=. python3 bench/checklist_lines.py [SCENARIO...]   (from the repository root)
"""

from __future__ import annotations

import logging
import sys

from tests.support.checklist_scenarios import ALL, ISSUE_CASES, checklist

BUDGET = 43  # lines, by default, for any of these nodes (docs/checklist.md "The line budget")


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)  # the load tests' progress and the probe's warnings go to stderr anyway
    names = argv or ALL
    print(f"{'scenario':36} {'lines':>5} {'verbose':>7}  exit")
    over = []
    for name in names:
        code, text = checklist(name)
        _, long_form = checklist(name, "--verbose")
        lines = len(text.splitlines())
        if lines > BUDGET:
            over.append(name)
        print(f"{name:36} {lines:5} {len(long_form.splitlines()):7}  "
              f"{code}{'  (issue 27)' if name in ISSUE_CASES else ''}")
    print(
        f"budget {BUDGET} lines by default: " + (f"over it: {', '.join(over)}" if over else "every scenario within it")
    )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
