"""A family's probe part module (gpudiag/probe/<name>/part.py) imports, at its top, only what its `store` needs: a cold
`gpudiag check --direct` imports each one in the parent for `store` alone, on the check's longest chain
(gpudiag/probe/split.py join). What `collect` needs to read the node it imports itself. On the lab H100 the parent
spent 22 ms between its imports and the children's answers, most of it importing the parts' readers (the RDMA
reader and the host probe, the CPER reader, subprocess): tests/fixtures/h100/recorded/lab-2026-12-07b/."""

from __future__ import annotations

import json
import subprocess
import sys

from gpudiag.probe.index import FAMILY_PARTS

SCRIPT = """
import json, sys
import gpudiag.model, gpudiag.probe.collector
before = set(sys.modules)
import importlib
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_each_part_module_imports_only_what_its_store_needs():
    for name, module in FAMILY_PARTS.items():
        done = subprocess.run([sys.executable, "-c", SCRIPT, module], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        added = set(json.loads(done.stdout)) - {module, module.rpartition(".")[0]}
        assert not {m for m in added if not m.startswith("gpudiag.model")}, (name, sorted(added))
