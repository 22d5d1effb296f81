"""Node profiles: every key, typed, from TOML and from -p; bad input named precisely; the shipped profiles."""

import dataclasses
import re
import sys

import pytest

from gpudiag.checks import run_checks
from gpudiag.expect import DEFAULT_EXPECTATIONS, FAMILY_SETTINGS, ExpectationError, Expectations
from gpudiag.expect.profile import ProfileError, load_expectations, load_profile, settings, shipped_profiles
from gpudiag.model import Status
from tests.support.acceptance_nodes import NODES

# A valid TOML value for every key that is not the default, so that applying it shows. Keys whose type alone does
# not give a valid value (enumerations, bounded ratios, versions, vocabularies) are listed; the others come from
# their type.
SPECIAL = {
    "retired_pages_fail_count": (80, 80),
    "expected_gpu_model": ('"NVIDIA H200"', "NVIDIA H200"),
    "expected_compute_partition": ('"CPX"', "CPX"),
    "expected_memory_partition": ('"NPS4"', "NPS4"),
    "expected_iommu_mode": ('"off"', "off"),
    "expected_driver_version": ('"580.159.04"', "580.159.04"),
    "min_driver_version": ('"550.54.15"', "550.54.15"),
    "amdgpu_fail_kinds": ('["ring_timeout"]', ("ring_timeout",)),
    "amdgpu_warn_kinds": ('["init_failed"]', ("init_failed",)),
    "amdgpu_ignore_kinds": ('["page_fault", "throttled"]', ("page_fault", "throttled")),
    "required_kernel_modules": ('["nvidia", "nvidia_peermem"]', ("nvidia", "nvidia_peermem")),
    "large_bar_required": ("false", False),
    "expected_ecc_enabled": ("false", False),
    "pcie_recovery_fail_count_per_day": ("5", 5),
    "kernel_log_repeat_boots": ("2", 2),
}
# A family's keys whose type alone gives no valid sample come with the family's settings module, as its SAMPLES
# (key -> (TOML text, the value read)), so that a new family edits nothing here (issue 34, item 2).
SPECIAL.update({key: sample for kind in FAMILY_SETTINGS
                for key, sample in getattr(sys.modules[kind.__module__], "SAMPLES", {}).items()})
BY_TYPE = {"int": ("3", 3), "float": ("0.5", 0.5), "bool": ("true", True), "tuple": ("[48, 79]", (48, 79))}
WRONG = {"int": ('"3"', "expected an integer"), "float": ('"fast"', "expected a number"),
         "bool": ('"yes"', "expected true or false"), "str": ("5", "expected a string"),
         "tuple": ('"48"', "expected a list")}


def _kind(hint) -> str:
    text = str(hint)
    for kind in ("tuple", "bool", "float", "int", "str"):
        if kind in text:
            return kind
    raise AssertionError(text)


def _valid(key: str) -> tuple[str, object]:
    return SPECIAL.get(key) or BY_TYPE[_kind(settings()[key])]


def _write(tmp_path, text: str, name: str = "node.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("key", sorted(settings()))
def test_every_key_is_read_from_toml_with_its_type(tmp_path, key):
    toml_value, expected = _valid(key)
    assert DEFAULT_EXPECTATIONS.setting(key) != expected, "the sample must differ from the default"
    values = load_profile(str(_write(tmp_path, f'name = "t"\n{key} = {toml_value}\n')))
    assert values == {key: expected}
    assert load_expectations(str(tmp_path / "node.toml")).setting(key) == expected


@pytest.mark.parametrize("key", sorted(settings()))
def test_every_key_rejects_a_value_of_the_wrong_type_naming_file_and_key(tmp_path, key):
    toml_value, problem = WRONG[_kind(settings()[key])]
    path = _write(tmp_path, f"{key} = {toml_value}\n")
    with pytest.raises(ProfileError) as error:
        load_profile(str(path))
    message = str(error.value)
    assert message.startswith(f"profile {path}: {key}: ") and problem in message and "\n" not in message


@pytest.mark.parametrize("key", sorted(settings()))
def test_every_key_can_be_overridden_with_p(key):
    toml_value, expected = _valid(key)
    text = {"bool": toml_value, "tuple": ",".join(str(v) for v in expected) if isinstance(expected, tuple) else ""}
    param = text.get(_kind(settings()[key])) or str(expected)
    assert load_expectations(None, [f"{key}={param}"]).setting(key) == expected


def test_none_and_boot_words_reset_optional_settings():
    expect = load_expectations("h200-8x", ["expected_gpu_count=none", "kernel_log_window_seconds=boot"])
    assert expect.expected_gpu_count is None and expect.kernel_log_window_seconds is None
    assert load_expectations(None, ["kernel_log_window_seconds=3600"]).kernel_log_window_seconds == 3600.0


def test_overrides_apply_after_the_profile():
    expect = load_expectations("mi300x-8x", ["expected_compute_partition=CPX", "expected_memory_partition=NPS4"])
    assert (expect.expected_compute_partition, expect.expected_memory_partition) == ("CPX", "NPS4")
    assert expect.expected_gpu_count == 8  # the rest of the profile stays


@pytest.mark.parametrize("param, message", [
    ("expected_gpu_cont=8", "-p expected_gpu_cont: unknown setting; did you mean expected_gpu_count"),
    ("expected_gpu_count", "-p expected_gpu_count: expected KEY=VALUE"),
    ("=8", "-p =8: expected KEY=VALUE"),
    ("expected_gpu_count=eight", "-p expected_gpu_count: 'eight' is not an integer"),
    ("persistence_mode_required=maybe", "-p persistence_mode_required: 'maybe' is not true or false"),
    ("xid_fail_codes=48,x", "-p xid_fail_codes: 'x' is not an integer"),
    ("baseline=/tmp/golden.json", "-p baseline: unknown setting"),
    ("retired_pages_warn_count=99", "-p retired_pages_warn_count: 99 is above retired_pages_fail_count (60)"),
    ("expected_iommu_mode=pt", "-p expected_iommu_mode: 'pt' is not one of passthrough, translated, off"),
    ("amdgpu_fail_kinds=gpu_hang", "-p amdgpu_fail_kinds: 'gpu_hang' is not an amdgpu event kind"),
    ("required_kernel_modules=ib_core", "-p required_kernel_modules: gpudiag does not probe module 'ib_core'"),
    ("xid_fail_codes=0", "-p xid_fail_codes: 0 is not an Xid code"),
    ("family_settings=x", "-p family_settings: unknown setting"),
    ("expected_nic=8", "-p expected_nic: unknown setting; did you mean expected_nics"),
    ("gpu_nic_affinity=rack", "-p gpu_nic_affinity: 'rack' is not one of switch, numa"),
])
def test_bad_overrides_are_one_line_naming_the_key(param, message):
    with pytest.raises(ProfileError) as error:
        load_expectations(None, [param])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_an_override_inconsistent_with_the_profile_names_both():
    with pytest.raises(ProfileError, match=r"^-p expected_driver_version: 535.1 is below min_driver_version "
                                           r"\(550.54.15\)$"):
        load_expectations(None, ["min_driver_version=550.54.15", "expected_driver_version=535.1"])
    with pytest.raises(ProfileError, match=r"^-p \(with retired_pages_warn_count from the profile or the default\): "
                                           r"15 is above retired_pages_fail_count \(10\)$"):
        load_expectations(None, ["retired_pages_fail_count=10"])


@pytest.mark.parametrize("text, message", [
    ("expected_gpu_count = 8\nexpected_gpu_count = 4\n", "TOML syntax error: Cannot overwrite a value"),
    ("expected_gpu_count = \n", "TOML syntax error: Invalid value (at line 1, column 22)"),
    ("expected_gpu_cont = 8\n", "expected_gpu_cont: unknown setting; did you mean expected_gpu_count"),
    ("[pcie]\nexpected_pcie_generation = 5\n", "pcie: is a table; profile settings are flat keys"),
    ("name = 5\n", "name: expected a string, got int"),
    ("retired_pages_warn_count = 70\n", "retired_pages_warn_count: 70 is above retired_pages_fail_count (60)"),
    ("bad_pages_warn_fraction = 1.5\n", "bad_pages_warn_fraction: must be in (0, 1], got 1.5"),
    ("thermal_warn_margin_celsius = -1\n", "thermal_warn_margin_celsius: must not be negative, got -1.0"),
    ("expected_gpu_count = 0\n", "expected_gpu_count: must be above 0"),
    ("gpu_idle_percent = 101\n", "gpu_idle_percent: is a percentage (0-100), got 101"),
    ('kernel_log_window_seconds = "yesterday"\n', "kernel_log_window_seconds: expected a number, got str"),
    ('min_driver_version = "r550"\n', "min_driver_version: 'r550' is not a dotted version"),
    ("xid_fail_codes = [79]\nxid_ignore_codes = [79]\n", "xid_ignore_codes: 79 is also in xid_fail_codes"),
    ('amdgpu_warn_kinds = ["page_fault"]\namdgpu_ignore_kinds = ["page_fault"]\n',
     "amdgpu_ignore_kinds: 'page_fault' is also in amdgpu_warn_kinds"),
    ('expected_compute_partition = "spx"\n', "expected_compute_partition: 'spx' is not one of SPX, DPX"),
    ("active_pcie_warn_ratio = 0.6\nactive_pcie_fail_ratio = 0.8\n", "active_pcie_fail_ratio: 0.8 is above"),
])
def test_bad_profiles_are_one_line_naming_file_key_and_problem(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as error:
        load_expectations(str(path))
    assert str(error.value).startswith(f"profile {path}: {message}"), str(error.value)
    assert "\n" not in str(error.value)


def test_missing_and_unreadable_profiles(tmp_path):
    with pytest.raises(ProfileError, match=r"^profile nope: not a shipped profile \(h100-8x, .*\(\./nope\)$"):
        load_expectations("nope")
    with pytest.raises(ProfileError, match=r"^profile ./nope: no such file, and not a shipped profile \(h100-8x, "):
        load_expectations("./nope")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ProfileError, match=rf"^profile {binary}: not UTF-8 text \(byte 0xff at offset 0\)$"):
        load_expectations(str(binary))


def test_expectations_errors_name_their_field():
    with pytest.raises(ExpectationError) as error:
        Expectations(expected_power_limit_watts=0.0)
    assert error.value.key == "expected_power_limit_watts"
    with pytest.raises(ExpectationError, match="expected_mig_enabled|expected_memory_partition"):
        dataclasses.replace(DEFAULT_EXPECTATIONS, expected_memory_partition="NPS3")


# -- the shipped profiles ---------------------------------------------------------------------------------------


def test_the_five_skus_are_shipped_and_every_value_cites_its_source():
    assert shipped_profiles() == ["h100-8x", "h200-8x", "mi300x-8x", "mi325x-8x", "mi355x-8x"]
    from importlib import resources
    for name in shipped_profiles():
        text = resources.files("gpudiag.profiles").joinpath(f"{name}.toml").read_text()
        lines = text.splitlines()
        setting = re.compile(r"^[a-z_]+ = ")
        for i, line in enumerate(lines):
            if setting.match(line) and not line.startswith(("name ", "description ")):
                above = i - 1  # settings grouped under one comment share it
                while above >= 0 and setting.match(lines[above]):
                    above -= 1
                assert lines[above].startswith("#"), f"{name}.toml: {line!r} has no comment saying where it comes from"


@pytest.mark.parametrize("name", sorted(NODES))
def test_each_shipped_profile_passes_its_healthy_node(name):
    expect = load_expectations(name)
    assert expect.expected_gpu_count == 8 and expect.expected_pcie_generation == 5
    results = run_checks(NODES[name](), expect)
    bad = [(r.check, r.status, r.message) for r in results if r.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)]
    assert not bad
    judged = {r.check for r in results if r.status == Status.PASS}
    assert {"inventory.gpu_count", "inventory.gpu_model", "power.limit", "topology.links_up",
            "host.kernel_modules", "pcie.link_generation"} <= judged


@pytest.mark.parametrize("name, other, failing", [
    # The MI300X node's THOR2 NICs are not the ConnectX-7 the HGX profile expects eight of.
    ("h200-8x", "mi300x-8x", {"inventory.gpu_model", "power.limit", "topology.links_up", "host.kernel_modules",
                              "network.nics"}),
    ("h100-8x", "h200-8x", {"inventory.gpu_model"}),
    # MI355X nodes carry Pollara NICs, the MI300X node THOR2s.
    ("mi300x-8x", "mi355x-8x", {"inventory.gpu_model", "power.limit", "network.nics"}),
    # 18 NVLinks satisfy "at least 7", and the H100 node's identity IOMMU domains are the passthrough it asks for.
    ("mi355x-8x", "h100-8x", {"inventory.gpu_model", "power.limit", "host.kernel_modules", "network.nics"}),
])
def test_a_shipped_profile_fails_the_other_skus_node(name, other, failing):
    results = run_checks(NODES[other](), load_expectations(name))
    assert {r.check for r in results if r.status == Status.FAIL} == failing


# Which NICs each shipped profile expects (issue 33, item 2; docs/acceptance.md, "The fabric NICs").
EXPECTED_NICS = {"h100-8x": 8, "h200-8x": 8, "mi300x-8x": 8, "mi325x-8x": None, "mi355x-8x": 8}


@pytest.mark.parametrize("name", sorted(NODES))
def test_each_profiles_node_passes_on_the_nics_it_expects(name):
    """The healthy node carries its eight fabric NICs, each judged up at the profile's rate; each GPU of an HGX node
    has its NIC below its own switch (the profile asks for it)."""
    expect = load_expectations(name)
    assert expect.setting("expected_nics") == EXPECTED_NICS[name]
    results = run_checks(NODES[name](), expect, only=["network", "topology.gpu_nic_affinity"])
    passed = [r for r in results if r.status == Status.PASS]
    assert {r.check for r in passed} >= {"network.nics", "network.rate", "network.gpudirect"}
    assert len([r for r in passed if r.check == "network.rate"]) == 8  # one per fabric port
    if expect.setting("gpu_nic_affinity") == "switch":
        assert len([r for r in passed if r.check == "topology.gpu_nic_affinity"]) == 8
    assert not [r for r in results if r.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)]


@pytest.mark.parametrize("name", sorted(NODES))
def test_a_profiles_node_without_rdma_devices_fails_where_the_profile_expects_nics(name):
    snap = NODES[name]()
    snap.network.devices, snap.network.class_present = [], False  # ib_core not loaded: no /sys/class/infiniband
    results = run_checks(snap, load_expectations(name), only=["network.nics"])
    (result,) = results
    if EXPECTED_NICS[name] is None:
        assert result.status == Status.SKIP
        return
    assert result.status == Status.FAIL and "ib_core is not loaded" in result.message
    for pci_id in load_expectations(name).setting("nic_pci_ids"):
        assert f"lspci -nn -d {pci_id}" in result.remediation
