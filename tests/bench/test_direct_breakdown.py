"""bench/direct_breakdown.py's listing of NVML calls, run over the tests' fake NVIDIA node: the figures it prints
on the lab come from code that runs, and a collector kept open asks the board constants only once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.paths import REPO


LIST_CALLS_OVER_FAKE_NODE = (
    "import json, sys\nsys.path.insert(0, 'bench')\n"
    "from tests.support.fakes.fake_nvml import FakeNode, installed\nfrom direct_breakdown import child_calls\n"
    "with installed(FakeNode.hgx_h200(2)):\n    print(json.dumps(child_calls()))\n")


def test_the_call_listing_shows_the_board_constants_asked_once_and_no_call_repeated():
    done = subprocess.run([sys.executable, "-c", LIST_CALLS_OVER_FAKE_NODE], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    first, *later = json.loads(done.stdout)["rounds"]
    constants = ("nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetTemperatureThreshold")
    assert [first["by_call"][name]["count"] for name in constants] == [2 * 3, 2 * 4]  # two GPUs
    assert first["by_call"]["nvmlInit"]["count"] == 1 and "nvmlInitWithFlags" not in first["by_call"]
    for item in later:
        assert not set(constants) & set(item["by_call"]) and "nvmlInit" not in item["by_call"]
        assert item["by_call"]["nvmlDeviceGetClockInfo"]["count"] == 2 * 3  # what changes is still read
    for item in (first, *later):
        assert item["repeated"] == [] and item["calls"] == sum(c["count"] for c in item["by_call"].values())
