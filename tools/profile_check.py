"""Where the wall time of one `gpudiag check` goes, on a real node: start-up imports, probing, checks, output.

Usage: PYTHONPATH=. python3 tools/profile_check.py   (prints to stderr; the checklist itself is discarded)
"""

from __future__ import annotations

import io
import sys
import time

started = time.perf_counter()
import gpudiag.cli.app  # noqa: E402

imported_cli = time.perf_counter()
import gpudiag.checks  # noqa: E402,F401
import gpudiag.probe  # noqa: E402,F401
import gpudiag.probe.host  # noqa: E402,F401
import gpudiag.probe.nvml.backend  # noqa: E402,F401
import pynvml  # noqa: E402,F401

imported_all = time.perf_counter()
real_stdout, sys.stdout = sys.stdout, io.StringIO()
code = gpudiag.cli.app.main(["check", "--format", "json"])
sys.stdout = real_stdout
finished = time.perf_counter()
print(f"import gpudiag.cli.app {1000 * (imported_cli - started):.1f} ms; checks+probe+pynvml "
      f"{1000 * (imported_all - imported_cli):.1f} ms; check run {1000 * (finished - imported_all):.1f} ms "
      f"(exit {code})", file=sys.stderr)

import cProfile  # noqa: E402
import pstats  # noqa: E402

sys.stdout = io.StringIO()
profile = cProfile.Profile()
profile.enable()
gpudiag.cli.app.main(["check", "--format", "json"])
profile.disable()
sys.stdout = real_stdout
stats = pstats.Stats(profile, stream=sys.stderr)
stats.sort_stats("cumulative").print_stats(25)
