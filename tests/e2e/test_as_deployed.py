"""Right as deployed (issue 33, item 1): every fake node the tests build (tests/support/as_deployed_nodes.py), judged by
`gpudiag textfile` and `gpudiag serve` once as root and once as the shipped units run them — the `gpudiag` user with
exactly the units' capabilities, groups, NoNewPrivileges, UMask and file-system view, after their `ExecStartPre=+`
(tests/support/as_deployed.py) — must give the same verdict on every check and device: the textfile's
gpudiag_check_status, and the status and action of each result the service's socket answers `check` with. A difference
is allowed only as a `skip` that docs/service.md documents, naming the run that judges it (DOCUMENTED_SKIPS: none
today).

Needs root (to switch users), setpriv and a mount namespace (`unshare --mount`); skips without them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.as_deployed import EXPORTER_UNIT, REPO, Runtime, judge_both_ways, unit_capability_mask
from tests.support.as_deployed_nodes import NODES
from tests.support.as_user import GPUDIAG

pytestmark = pytest.mark.slow

# check -> why the service's user may skip it where root judges it, as docs/service.md says it ("What the service
# cannot read, and who reads it"). Everything else root reads, the units read too, or root records it for them.
DOCUMENTED_SKIPS: dict[str, str] = {}


def _unusable() -> str:
    if os.geteuid() != 0:
        return "switching users needs root"
    for tool in ("setpriv", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no mount namespace here (unshare --mount: {probe.stderr.strip()})"
    return ""


@pytest.fixture(scope="module")
def runtime():
    why = _unusable()
    if why:
        pytest.skip(why)
    built = Runtime()
    if built.python is None:
        built.remove()
        pytest.skip("no Python interpreter the gpudiag user can run with its standard library")
    yield built
    built.remove()


def differences(sides: dict) -> list[str]:
    found = []
    for channel in ("textfile", "serve"):
        root, unit = sides["root"][channel], sides["unit"][channel]
        for key in sorted(set(root) | set(unit), key=str):
            theirs, ours = root.get(key), unit.get(key)
            status = ours[0] if isinstance(ours, tuple) else ours
            if theirs != ours and not (status == "skip" and key[0] in DOCUMENTED_SKIPS):
                found.append(f"{channel} {key[0]} on {key[1] or 'the node'}: root {theirs}, as deployed {ours}")
    return found


@pytest.mark.parametrize("name", sorted(NODES))
def test_the_units_judge_every_node_as_root_does(runtime, name):
    with tempfile.TemporaryDirectory(prefix="gpudiag-as-deployed-") as work:
        Path(work).chmod(0o755)
        sides = judge_both_ways(runtime, NODES[name], Path(work))
    process = sides["unit"]["process"]
    caps = unit_capability_mask(EXPORTER_UNIT)
    assert (process["Uid"], process["Gid"], process["NoNewPrivs"]) == (GPUDIAG, GPUDIAG, 1)
    assert process["CapEff"] == process["CapPrm"] == process["CapAmb"] == process["CapBnd"] == caps
    assert sides["root"]["process"]["Uid"] == 0
    assert sides["root"]["textfile"] and sides["root"]["serve"]  # something was judged
    assert differences(sides) == []


@pytest.mark.parametrize("name,check,root_says,unit_says", [
    ("h200-ib-acs-redirect", "network.gpudirect", ("warn", "watch"), ("unknown", "watch")),
    ("mi300x-fatal-cper", "ras.cper", ("fail", "rma"), ("skip", "none")),
    ("nvidia-xid79-in-three-boots", "kernel_log.xid", ("fail", "rma"), ("fail", "reboot")),
])
def test_without_roots_record_the_sandbox_hides_what_root_reads(runtime, name, check, root_says, unit_says):
    """The comparison above is not vacuous: without the units' ExecStartPre=+ the unit's view (64 bytes of config
    space, a system journal it may not read) changes these verdicts, as it did before root recorded them."""
    with tempfile.TemporaryDirectory(prefix="gpudiag-as-deployed-") as work:
        Path(work).chmod(0o755)
        sides = judge_both_ways(runtime, NODES[name], Path(work), pre=False)
    worst = {side: [v for (c, _), v in sides[side]["serve"].items() if c == check] for side in ("root", "unit")}
    assert root_says in worst["root"] and unit_says in worst["unit"] and root_says not in worst["unit"]


def test_the_documented_skips_are_in_the_service_docs():
    text = (REPO / "docs/service.md").read_text()
    assert "## What the service cannot read, and who reads it" in text
    for check in DOCUMENTED_SKIPS:
        assert f"`{check}`" in text
