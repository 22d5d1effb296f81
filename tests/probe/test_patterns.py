"""gpudiag/probe/patterns.py: the kernel-log readers' patterns are compiled when first used, not when a check imports
them (issue 36, item 9), and each behaves as the compiled pattern; every pattern the probe declares compiles."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import gpudiag.probe.kernel_log.reader  # noqa: F401 - declares the kernel-log readers' patterns
import gpudiag.probe.network.part  # noqa: F401 - and the NIC drivers'
from gpudiag.probe import patterns
from gpudiag.probe.patterns import lazy_compile
from tests.support.paths import REPO

# Which modules call re.compile while the kernel-log reader and the NIC part are imported, in a fresh interpreter.
COMPILED_AT_IMPORT = """
import json, re, sys
callers = []
real = re.compile
def compile(pattern, flags=0):
    callers.append(sys._getframe(1).f_globals.get("__name__"))
    return real(pattern, flags)
re.compile = compile
import gpudiag.probe.kernel_log.reader, gpudiag.probe.network.part
print(json.dumps(sorted(set(c for c in callers if c and c.startswith("gpudiag.")))))
"""


def test_importing_the_kernel_log_reader_compiles_none_of_its_patterns():
    done = subprocess.run([sys.executable, "-c", COMPILED_AT_IMPORT], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    compiling = json.loads(done.stdout)
    readers = [m for m in compiling if m.startswith("gpudiag.probe.kernel_log") or m.endswith("network.kernel_log")]
    assert readers == []  # (the NIC tree's few short patterns, network/rdma.py's, cost next to nothing)


def test_every_declared_pattern_compiles():
    assert len(patterns.DECLARED) > 50
    for pattern in patterns.DECLARED:
        assert isinstance(pattern.compiled(), re.Pattern)


def test_a_lazy_pattern_is_the_compiled_pattern_once_used():
    lazy, real = lazy_compile(r"Xid \(PCI:([0-9a-f:.]+)\): ([0-9]+)", re.ASCII), re.compile(
        r"Xid \(PCI:([0-9a-f:.]+)\): ([0-9]+)", re.ASCII)
    assert "_compiled" not in lazy.__dict__  # nothing compiled until it is used
    text = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1"
    assert lazy.search(text).groups() == real.search(text).groups() == ("0000:3b:00", "79")
    assert lazy.match(text) is None and lazy.sub("X", text) == real.sub("X", text)
    assert lazy.groups == 2 and lazy.pattern == real.pattern and lazy.flags == real.flags
    assert lazy.__dict__["search"] == real.search.__self__.search  # bound once: later calls go straight to re
    assert repr(lazy).startswith("lazy_compile(")
