"""nvidia-smi's habits (issue 27, item 4): a "did you mean" for a misspelt check ID, `gpudiag profiles`, and the
completion of option values."""

from __future__ import annotations

import json

import pytest

from gpudiag.checks import CHECK_IDS, FAMILIES
from gpudiag.cli import app as cli
from gpudiag.exitcodes import ExitCode
from gpudiag.expect.profile import load_profile, shipped_profiles
from tests.support.paths import FIXTURES, REPO

RECORDING = FIXTURES / "h200x2" / "snapshot.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- did you mean ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option, name, suggested", [
    ("--only", "pcie.link_widht", "pcie.link_width"),
    ("--skip", "pcei", "pcie"),
    ("--only", "thermal.temprature", None),
])
def test_a_misspelt_check_is_one_short_line_with_suggestions(capsys, option, name, suggested):
    code, out, err = run(capsys, "check", "--replay", str(RECORDING), option, name)
    assert (code, out) == (ExitCode.USAGE, "")
    (line,) = err.splitlines()
    assert line.startswith(f"gpudiag: error: {option}: unknown check or family {name!r}; did you mean ")
    offered = line.split("did you mean ", 1)[1].rstrip("?").split(", ")
    assert 1 <= len(offered) <= 3 and all(o in CHECK_IDS or o in FAMILIES for o in offered)
    if suggested:
        assert offered[0] == suggested
    assert len(line) < 200


def test_a_name_like_nothing_lists_the_families_only(capsys):
    code, _, err = run(capsys, "check", "--replay", str(RECORDING), "--only", "zzzz")
    assert code == ExitCode.USAGE and len(err.splitlines()) == 1
    assert "families: " + ", ".join(FAMILIES) in err and not any(i in err for i in CHECK_IDS)


def test_the_service_and_the_direct_path_refuse_alike():
    from gpudiag.report.selection import select_checks

    with pytest.raises(ValueError, match=r"did you mean pcie\.link_width"):
        select_checks(["pcie.link_widht"])
    assert [c.id for c in select_checks(["pcie"], ["pcie.link_width"])] == \
        [i for i in CHECK_IDS if i.startswith("pcie.") and i != "pcie.link_width"]


# -- gpudiag profiles -----------------------------------------------------------------------------------------------


def test_profiles_lists_every_shipped_profile_with_what_it_expects(capsys):
    code, out, err = run(capsys, "profiles")
    assert (code, err) == (0, "")
    for name in shipped_profiles():
        settings = load_profile(name)
        (line,) = [i for i, text in enumerate(out.splitlines()) if text.startswith(name + " ")]
        expects = out.splitlines()[line + 1]
        assert f"gpu_count={settings['expected_gpu_count']}" in expects
        assert f"gpu_model={settings['expected_gpu_model']}" in expects


def test_profiles_as_json_holds_every_setting(capsys):
    code, out, _ = run(capsys, "profiles", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["schema_version"] == 1
    assert [p["name"] for p in document["profiles"]] == shipped_profiles()
    for profile in document["profiles"]:
        assert profile["description"]
        assert profile["settings"].keys() == load_profile(profile["name"]).keys()


# -- completion of option values ------------------------------------------------------------------------------------


def test_profile_completion_offers_the_shipped_names():
    from gpudiag.cli.shared.completion import complete_profile

    assert complete_profile("") == shipped_profiles()
    assert complete_profile("mi3") == [n for n in shipped_profiles() if n.startswith("mi3")] != []
    assert complete_profile("./site") == []  # a path: the shell completes files


def test_check_completion_offers_families_and_ids_after_a_comma_too():
    from gpudiag.cli.shared.completion import complete_checks

    assert complete_checks("") == [*FAMILIES, *CHECK_IDS]
    assert complete_checks("pcie.link_w") == ["pcie.link_width"]
    offered = complete_checks("ecc,pcie.")
    assert offered and all(o.startswith("ecc,pcie.") for o in offered)
    assert {o.split(",")[1] for o in offered} == {i for i in CHECK_IDS if i.startswith("pcie.")}
    assert "pcie,pcie" not in complete_checks("pcie,pci")  # a name already given is not offered again


@pytest.mark.slow
def test_the_shell_gets_them_through_typer(tmp_path):
    import os
    import subprocess
    import sys

    repo = REPO
    done = subprocess.run([sys.executable, "-c", "from gpudiag.cli.app import run; run()"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(repo), "_GPUDIAG_COMPLETE": "complete_bash",
                               "COMP_WORDS": "gpudiag check --only pcie.link_w", "COMP_CWORD": "3"},
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["pcie.link_width"], done.stderr


# -- check -i / --gpu -----------------------------------------------------------------------------------------------


@pytest.fixture
def node_with_a_bad_gpu_1(tmp_path):
    from tests.support.fakes.fake_nvml import FakeNode
    from tests.support.nvidia_node import sysfs_for

    node = FakeNode.hgx_h200(2)
    node.gpus[1].remap_pending = True
    sysfs_for(node, tmp_path)
    return node, tmp_path


def test_gpu_selects_what_is_judged_and_the_exit_code(capsys, node_with_a_bad_gpu_1):
    from tests.support.fakes.fake_nvml import installed

    node, root = node_with_a_bad_gpu_1
    base = ["check", "--root", str(root), "--direct", "--format", "json"]
    with installed(node):
        whole, out_whole, _ = run(capsys, *base)
        code0, out0, _ = run(capsys, *base, "-i", "0")
        code1, out1, _ = run(capsys, *base, "--gpu", node.gpus[1].bus_id)
        both, out_both, _ = run(capsys, *base, "-i", "0", "--gpu", node.gpus[1].uuid.upper())
    assert (whole, code0, code1, both) == (1, 0, 1, 1)
    reports = [json.loads(o) for o in (out_whole, out0, out1, out_both)]

    def gpus_in(report):
        return {r["device"]["index"] for r in report["results"] if r.get("device")}

    assert [gpus_in(r) for r in reports] == [{0, 1}, {0}, {1}, {0, 1}]
    node_level = [{r["check"] for r in report["results"] if not r.get("device")} for report in reports]
    assert node_level[0] and node_level[0] == node_level[1] == node_level[2]  # the node's checks still count
    assert reports[1]["status"] == "pass" and reports[2]["status"] == "fail"


def test_gpu_in_junit_too(capsys, node_with_a_bad_gpu_1):
    from tests.support.fakes.fake_nvml import installed

    node, root = node_with_a_bad_gpu_1
    with installed(node):
        code, out, _ = run(capsys, "check", "--root", str(root), "--direct", "--format", "junit", "-i", "0")
    assert code == 0 and "remap_pending" not in out.split("failure")[0] and "<failure" not in out


def test_an_unknown_gpu_is_one_line_naming_those_there(capsys):
    code, out, err = run(capsys, "check", "--replay", str(RECORDING), "-i", "0,9")
    assert (code, out) == (ExitCode.USAGE, "")
    (line,) = err.splitlines()
    assert line.startswith("gpudiag: error: --gpu '9': no such GPU on this node; it has 0 (0000:00:06.0, GPU-")
    assert "; 1 (0000:00:07.0, GPU-" in line
