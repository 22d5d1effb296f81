import dataclasses

import pytest

from gpudiag.checks.common import PhysicalGpu
from gpudiag.checks.pcie_power import LoadedLink, under_load
from gpudiag.expect import Expectations
from gpudiag.model import ActiveDevice, ActiveResults, CopyBandwidth, ErrorKind, PcieDpmLevel, ProbeError, Status
from tests.support.snapshots import amd_mi300x_node, assert_actionable, for_gpu, node_level, nvidia_h200_node, run


def _downshift(device, pci, generation):
    device.pcie.current_generation = generation
    pci.current_link_generation = generation


def test_slot_capping_a_gen5_gpu_at_gen4_fails_naming_gpu_and_slot():
    snap = nvidia_h200_node()
    device, pci = snap.devices[1], snap.pci_gpus[1]
    _downshift(device, pci, 4)
    device.pcie.max_generation = 4  # NVML's system max: the lesser of GPU and slot
    pci.upstream_max_link_generation = 4
    result = for_gpu(run(snap, "pcie.link_generation"), 1)
    assert_actionable(result, Status.FAIL)
    assert "Gen4 x16 of Gen5 x16" in result.message
    assert "GPU 1 (0000:3b:00.0)" in result.message and pci.upstream_pci_bus_id in result.message
    assert result.observed["slot"] == pci.upstream_pci_bus_id and result.expected == "Gen5 x16"
    assert "BIOS" in result.remediation and "retimer" in result.remediation
    assert f"lspci -vvv -s {pci.upstream_pci_bus_id}" in result.remediation
    assert "current_link_speed" in result.remediation
    assert for_gpu(run(snap, "pcie.link_generation"), 0).status == Status.PASS


def test_slot_cap_seen_by_the_library_alone_also_fails():
    snap = amd_mi300x_node()
    snap.pci_gpus = []
    device = snap.devices[3]
    device.pcie.current_generation = device.pcie.max_generation = 4
    assert for_gpu(run(snap, "pcie.link_generation"), 3).status == Status.FAIL


def _idle(device, pstate):
    device.utilization.gpu_percent = 0
    device.clocks.throttle_reasons = ["gpu_idle"]
    device.clocks.performance_state = pstate


def test_idle_gpu_in_p0_below_its_generation_fails():
    # The lab's H200s idle in P0 (gpu_idle, 0 %) at Gen5 x16: in P0 a lower link is a fault, idle or not.
    snap = nvidia_h200_node()
    device = snap.devices[0]
    _downshift(device, snap.pci_gpus[0], 4)
    _idle(device, 0)
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert_actionable(result, Status.FAIL)
    assert "Gen4 x16 of Gen5 x16" in result.message and "P0" in result.message
    assert result.observed["performance_state"] == "P0"
    assert "reseat" in result.remediation and "BIOS" in result.remediation and "LnkSta" in result.remediation
    assert "nvidia-smi -q -i 0000:19:00.0 -d PCI" in result.remediation and "--level 2" in result.remediation


def test_idle_gpu_in_p8_at_gen1_is_not_a_failure_and_says_how_to_confirm():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    _downshift(device, snap.pci_gpus[0], 1)
    _idle(device, 8)
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert_actionable(result, Status.WARN)
    assert "Gen1 x16 of Gen5 x16" in result.message and "P8" in result.message
    assert "--level 2" in result.remediation and "nvidia-smi -q -i 0000:19:00.0 -d PCI" in result.remediation
    # The same GPU at Gen5 in P8 (persistence mode keeps some boards up) is simply healthy.
    _downshift(device, snap.pci_gpus[0], 5)
    assert for_gpu(run(snap, "pcie.link_generation"), 0).status == Status.PASS


def test_a_low_p_state_alone_excuses_a_lower_link_and_p0_or_unknown_not_a_narrower_one():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    _downshift(device, snap.pci_gpus[0], 2)
    device.utilization.gpu_percent = None
    device.clocks.throttle_reasons = None
    device.clocks.performance_state = 8
    assert for_gpu(run(snap, "pcie.link_generation"), 0).status == Status.WARN
    device.pcie.current_width = snap.pci_gpus[0].current_link_width = 8
    # nvidia-smi documents the current width, too, as "may be reduced when the GPU is not in use".
    assert_actionable(for_gpu(run(snap, "pcie.link_width"), 0), Status.WARN)
    for pstate in (0, None):
        device.clocks.performance_state = pstate
        width = for_gpu(run(snap, "pcie.link_width"), 0)
        assert_actionable(width, Status.FAIL)
        assert "trained at Gen2 x8 of Gen5 x16" in width.message and "lanes failed to train" in width.remediation


def test_amd_idle_utilisation_is_no_excuse_without_link_dpm():
    snap = amd_mi300x_node()  # utilisation 0, no pp_dpm_pcie
    snap.devices[4].pcie.current_generation = snap.pci_gpus[4].current_link_generation = 4
    result = for_gpu(run(snap, "pcie.link_generation"), 4)
    assert_actionable(result, Status.FAIL)
    assert "pp_dpm_pcie" in result.message


def _dpm(pci, levels, current):
    pci.pcie_dpm_levels = [PcieDpmLevel(generation, width) for generation, width in levels]
    pci.pcie_dpm_current = current


def test_amd_link_dpm_below_its_top_level_is_excused_and_at_the_top_it_is_not():
    snap = amd_mi300x_node()
    device, pci = snap.devices[4], snap.pci_gpus[4]
    device.pcie.current_generation = pci.current_link_generation = 1
    device.pcie.current_width = pci.current_link_width = 1
    _dpm(pci, [(1, 1), (5, 16)], current=0)  # "0: 2.5GT/s, x1 619Mhz *" / "1: 32.0GT/s, x16 1143Mhz"
    generation, width = for_gpu(run(snap, "pcie.link_generation"), 4), for_gpu(run(snap, "pcie.link_width"), 4)
    assert_actionable(generation, Status.WARN)
    assert width.status == Status.WARN
    assert "level 0" in generation.message and generation.observed["pcie_dpm_top"] == "Gen5 x16"
    assert "pp_dpm_pcie" in generation.remediation and "--level 2" in generation.remediation
    # The top level in use, yet the link below its maximum: the link trained low.
    device.pcie.current_generation = pci.current_link_generation = 4
    device.pcie.current_width = pci.current_link_width = 16
    _dpm(pci, [(1, 1), (4, 16)], current=1)
    result = for_gpu(run(snap, "pcie.link_generation"), 4)
    assert_actionable(result, Status.FAIL)
    assert "top level" in result.message


def test_amd_link_dpm_levels_without_a_current_level_are_no_excuse():
    # pp_dpm_pcie lists its levels but marks none with `*` (or the mark could not be read): no evidence of power
    # saving, so a link below its maximum is what it trained at.
    snap = amd_mi300x_node()
    device, pci = snap.devices[4], snap.pci_gpus[4]
    device.pcie.current_generation = pci.current_link_generation = 4
    _dpm(pci, [(1, 1), (5, 16)], current=None)
    result = for_gpu(run(snap, "pcie.link_generation"), 4)
    assert_actionable(result, Status.FAIL)
    assert "pp_dpm_pcie" in result.message


def test_busy_gpu_below_its_generation_fails():
    snap = nvidia_h200_node()
    _downshift(snap.devices[0], snap.pci_gpus[0], 4)
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert_actionable(result, Status.FAIL)
    assert "P0" in result.message and "reseat" in result.remediation


def test_unknown_p_state_warns_instead_of_excusing_silently():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    _downshift(device, snap.pci_gpus[0], 3)
    device.utilization.gpu_percent = 0
    device.clocks.throttle_reasons = ["gpu_idle"]
    device.clocks.performance_state = None
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert_actionable(result, Status.WARN)
    assert "P-state could not be read" in result.message and "--level 2" in result.remediation


def _loaded(snap, index, generation, width=16):
    device = snap.devices[index]
    copies = [CopyBandwidth(gb_per_second=50.0, link_generation=generation, link_width=width) for _ in range(2)]
    snap.active = ActiveResults(tests=["pcie"], devices=[
        ActiveDevice(index=index, pci_bus_id=device.pci_bus_id, h2d=copies[0], d2h=copies[1])])


def test_under_load_gen4_fails_even_in_a_low_p_state():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    _downshift(device, snap.pci_gpus[0], 1)
    _idle(device, 8)
    _loaded(snap, 0, 4)
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert_actionable(result, Status.FAIL)
    assert "Gen4 x16 of Gen5 x16 while copying" in result.message and result.observed["under_load"] == "Gen4 x16"


def test_under_load_gen5_passes_a_link_that_idles_at_gen1():
    snap = nvidia_h200_node()
    device = snap.devices[0]
    _downshift(device, snap.pci_gpus[0], 1)
    _idle(device, 8)
    _loaded(snap, 0, 5)
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert result.status == Status.PASS and "under load" in result.message
    assert result.observed["under_load"] == "Gen5 x16"
    assert for_gpu(run(snap, "pcie.link_width"), 0).status == Status.PASS


def test_under_load_narrow_link_fails_on_amd_too():
    snap = amd_mi300x_node()
    _loaded(snap, 2, 5, width=8)
    assert_actionable(for_gpu(run(snap, "pcie.link_width"), 2), Status.FAIL)
    assert for_gpu(run(snap, "pcie.link_generation"), 2).status == Status.PASS


def test_expected_generation_overrides_the_gpu_capability():
    snap = nvidia_h200_node()
    for device, pci in zip(snap.devices, snap.pci_gpus):
        _downshift(device, pci, 4)
        device.pcie.max_generation = pci.upstream_max_link_generation = 4
    gen4_platform = dataclasses.replace(Expectations(), expected_pcie_generation=4)
    assert {r.status for r in run(snap, "pcie.link_generation", gen4_platform)} == {Status.PASS}
    assert {r.status for r in run(snap, "pcie.link_generation")} == {Status.FAIL}


def test_narrow_link_fails_even_when_idle():
    snap = amd_mi300x_node()  # idle GPUs
    snap.devices[2].pcie.current_width = 8
    snap.pci_gpus[2].current_link_width = 8
    result = for_gpu(run(snap, "pcie.link_width"), 2)
    assert_actionable(result, Status.FAIL)
    assert "Gen5 x8 of Gen5 x16" in result.message and "reseat" in result.remediation


def test_narrow_slot_names_bifurcation():
    snap = nvidia_h200_node()
    snap.pci_gpus[0].upstream_max_link_width = 8
    snap.devices[0].pcie.current_width = snap.pci_gpus[0].current_link_width = 8
    result = for_gpu(run(snap, "pcie.link_width"), 0)
    assert_actionable(result, Status.FAIL)
    assert "provides only x8" in result.message and "bifurcation" in result.remediation


def test_gpu_on_the_bus_only_is_judged_from_sysfs():
    snap = nvidia_h200_node()
    del snap.devices[1]
    snap.pci_gpus[1].current_link_width = 4
    (width,) = node_level(run(snap, "pcie.link_width"))
    assert_actionable(width, Status.FAIL)
    assert "0000:3b:00.0" in width.message


def test_unreachable_and_unsupported_links():
    snap = nvidia_h200_node()
    snap.devices[0].reachable = False
    assert for_gpu(run(snap, "pcie.link_width"), 0).status == Status.UNKNOWN

    snap = nvidia_h200_node()
    snap.pci_gpus = []
    device = snap.devices[1]
    device.pcie.current_width = device.pcie.device_max_width = device.pcie.max_width = None
    assert for_gpu(run(snap, "pcie.link_width"), 1).status == Status.SKIP
    device.errors.append(ProbeError("nvml.nvmlDeviceGetCurrPcieLinkWidth", ErrorKind.ERROR, "Unknown Error"))
    assert_actionable(for_gpu(run(snap, "pcie.link_width"), 1), Status.UNKNOWN)


def test_without_sysfs_the_library_system_max_still_bounds_the_width():
    # NVML has no GPU-only max width; with no sysfs view the system max is what the link should reach.
    snap = nvidia_h200_node()
    snap.pci_gpus = []
    device = snap.devices[0]
    device.pcie.device_max_width = None
    device.pcie.current_width = 8
    assert_actionable(for_gpu(run(snap, "pcie.link_width"), 0), Status.FAIL)


def test_a_failed_field_batch_explains_the_missing_replay_counter():
    snap = nvidia_h200_node()
    snap.devices[0].pcie.replay_count = None
    assert for_gpu(run(snap, "pcie.replay_errors"), 0).status == Status.SKIP
    snap.devices[0].errors.append(ProbeError("nvml.nvmlDeviceGetFieldValues", ErrorKind.ERROR, "Unknown Error"))
    assert for_gpu(run(snap, "pcie.replay_errors"), 0).status == Status.UNKNOWN


def test_replays_above_threshold_warn():
    snap = nvidia_h200_node()
    snap.devices[1].pcie.replay_count = 450
    results = run(snap, "pcie.replay_errors")
    assert_actionable(for_gpu(results, 1), Status.WARN)
    assert for_gpu(results, 1).observed["replay_count"] == 450
    assert for_gpu(results, 0).status == Status.PASS
    strict = dataclasses.replace(Expectations(), pcie_replay_warn_count=500)
    assert for_gpu(run(snap, "pcie.replay_errors", strict), 1).status == Status.PASS


def test_aer_uncorrectable_fails_and_correctable_warns():
    snap = amd_mi300x_node()
    snap.pci_gpus[0].aer["fatal"].update({"Surprise Down Error": 1, "TOTAL_ERR_FATAL": 1})
    snap.pci_gpus[1].aer["nonfatal"].update({"Completion Timeout": 3, "TOTAL_ERR_NONFATAL": 3})
    snap.pci_gpus[2].aer["correctable"].update({"Receiver Error": 700, "TOTAL_ERR_COR": 700})
    snap.pci_gpus[3].aer["correctable"].update({"Receiver Error": 12, "TOTAL_ERR_COR": 12})
    results = run(snap, "pcie.aer")
    assert_actionable(for_gpu(results, 0), Status.FAIL)
    assert "aer_dev_" in for_gpu(results, 0).remediation
    assert for_gpu(results, 1).status == Status.FAIL and for_gpu(results, 1).observed["nonfatal"] == 3
    assert_actionable(for_gpu(results, 2), Status.WARN)
    assert for_gpu(results, 3).status == Status.PASS


def test_aer_falls_back_to_library_counters_and_skips_without_any():
    snap = nvidia_h200_node()
    snap.pci_gpus[0].aer = {}
    snap.devices[0].pcie.error_counters = {"fatal_errors": 1, "non_fatal_errors": 0, "correctable_errors": 5}
    snap.pci_gpus[1].aer = {}
    results = run(snap, "pcie.aer")
    assert for_gpu(results, 0).status == Status.FAIL
    assert for_gpu(results, 1).status == Status.SKIP


def test_aer_is_judged_even_when_the_gpu_is_lost():
    snap = nvidia_h200_node()
    snap.devices[0].reachable = False
    snap.pci_gpus[0].aer["fatal"]["TOTAL_ERR_FATAL"] = 2
    assert for_gpu(run(snap, "pcie.aer"), 0).status == Status.FAIL


# ---------------------------------------------------------------------------------------------------------------
# Boundaries the mutation run (tools/mutate.py) found unpinned.


def _bus_only_gpu1(**link):
    """The H200 node with GPU 1 on the PCI bus only (the library does not see it), its sysfs link set to `link`."""
    snap = nvidia_h200_node()
    del snap.devices[1]
    for name, value in link.items():
        setattr(snap.pci_gpus[1], name, value)
    return snap


def _idle_gpu0_at(generation, pstate):
    """The H200 node with GPU 0 idle in `pstate` and its link at `generation`."""
    snap = nvidia_h200_node()
    _downshift(snap.devices[0], snap.pci_gpus[0], generation)
    _idle(snap.devices[0], pstate)
    return snap


def test_warning_says_which_question_stays_open_low_p_state_or_unreadable_p_state():
    # A low P-state excuses the link: only whether it reaches Gen5 is open. An unreadable P-state excuses nothing:
    # it is open whether the link is power saving at all.
    snap = _idle_gpu0_at(1, 8)
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert result.status == Status.WARN
    assert result.message == ("GPU 0 (0000:19:00.0) link at Gen1 x16 of Gen5 x16, in P8: NVIDIA GPUs lower the link "
                              "in low P-states to save power; whether it trains at Gen5 cannot be judged until the "
                              "GPU is loaded")
    snap.devices[0].clocks.performance_state = None
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert result.status == Status.WARN
    assert result.message == ("GPU 0 (0000:19:00.0) link at Gen1 x16 of Gen5 x16, its P-state could not be read; "
                              "whether that is power saving or a fault cannot be told until the GPU is loaded")


def test_a_load_reading_of_the_width_alone_judges_the_width_and_leaves_the_generation_to_the_idle_reading():
    # A runtime may report the link width under load but not its speed: the generation is then judged as read idle.
    snap = _idle_gpu0_at(1, 8)
    _loaded(snap, 0, None, 16)
    generation = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert_actionable(generation, Status.WARN)
    assert "under_load" not in generation.observed and "cannot be judged" in generation.message
    width = for_gpu(run(snap, "pcie.link_width"), 0)
    assert width.status == Status.PASS
    assert width.message == "GPU 0 (0000:19:00.0) link at Gen? x16 under load"
    assert width.observed["under_load"] == "Gen? x16"


def test_a_load_reading_of_the_generation_alone_settles_the_generation():
    snap = _idle_gpu0_at(1, 8)
    _loaded(snap, 0, 5, None)
    generation = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert generation.status == Status.PASS
    assert generation.message == "GPU 0 (0000:19:00.0) link at Gen5 x? under load"
    width = for_gpu(run(snap, "pcie.link_width"), 0)
    assert width.status == Status.PASS and "under_load" not in width.observed


def test_copies_without_any_link_reading_are_no_load_reading():
    snap = nvidia_h200_node()
    _loaded(snap, 0, None, None)
    gpu = PhysicalGpu(snap.devices[0], snap.pci_gpus[0])
    assert under_load(snap, gpu) is None
    _loaded(snap, 0, 4, None)
    assert under_load(snap, gpu) == LoadedLink(4, None)


def test_a_load_reading_recorded_for_another_bus_id_is_not_this_gpus():
    # ActiveDevice carries the snapshot index and the bus ID; if they disagree (a GPU fell off the bus between the
    # collection and the load test, renumbering the library's indices) the reading is another GPU's.
    snap = _idle_gpu0_at(1, 8)
    copy = CopyBandwidth(gb_per_second=50.0, link_generation=5, link_width=16)
    snap.active = ActiveResults(tests=["pcie"], devices=[
        ActiveDevice(index=0, pci_bus_id=snap.devices[1].pci_bus_id, h2d=copy, d2h=copy)])
    result = for_gpu(run(snap, "pcie.link_generation"), 0)
    assert result.status == Status.WARN and "under_load" not in result.observed


@pytest.mark.parametrize("check_id, what, part, expected_field, target", [
    ("pcie.link_generation", "PCIe link generation", "generation", "expected_pcie_generation", 5),
    ("pcie.link_width", "PCIe link width", "width", "expected_pcie_width", 16),
])
def test_link_not_read_skips_whether_the_current_or_the_maximum_is_missing(check_id, what, part, expected_field,
                                                                          target):
    snap = nvidia_h200_node()
    device, pci = snap.devices[1], snap.pci_gpus[1]
    setattr(device.pcie, f"current_{part}", None)
    setattr(pci, f"current_link_{part}", None)
    result = for_gpu(run(snap, check_id), 1)
    assert result.status == Status.SKIP
    assert result.message == f"{what} is not supported on GPU 1 (0000:3b:00.0) (NVIDIA H200)"

    snap = nvidia_h200_node()
    device, pci = snap.devices[1], snap.pci_gpus[1]
    for name in (f"device_max_{part}", f"max_{part}"):
        setattr(device.pcie, name, None)
    setattr(pci, f"max_link_{part}", None)
    result = for_gpu(run(snap, check_id), 1)
    assert result.status == Status.SKIP and f"{what} is not supported" in result.message
    # A profile's expected generation or width is a target even without the GPU's maximum.
    profile = dataclasses.replace(Expectations(), **{expected_field: target})
    assert for_gpu(run(snap, check_id, profile), 1).status == Status.PASS


def test_a_gpu_on_the_bus_only_without_a_link_reading_skips_naming_sysfs():
    snap = _bus_only_gpu1(current_link_generation=None)
    (result,) = node_level(run(snap, "pcie.link_generation"))
    assert result.status == Status.SKIP
    assert result.message == ("GPU at 0000:3b:00.0 (on the PCI bus, not enumerated by a vendor library): PCIe link "
                              "generation not readable from sysfs")


@pytest.mark.parametrize("width", [0, 63])
def test_the_width_of_a_link_whose_speed_reads_unknown_is_never_a_failure(width):
    """sysfs reads "Unknown" and x0 for a link that is down, and x63 (all ones) from a GPU gone from the bus
    (drivers/pci/pci-sysfs.c: both from Link Status; tests/probe/test_host.py reads them): issue 27 saw a lost GPU
    fail pcie.link_width as `Gen? x0`, and x63 would have passed as wider than x16."""
    snap = _bus_only_gpu1(current_link_generation=None, current_link_width=width)
    (result,) = node_level(run(snap, "pcie.link_width"))
    assert result.status == Status.UNKNOWN
    assert f"the link's speed reads Unknown (the link is down or did not answer), so its width x{width}" in (
        result.message)
    assert "inventory.gpus_visible" in result.remediation and "lspci -vvv -s 0000:3b:00.0" in result.remediation
    assert for_gpu(run(snap, "pcie.link_width"), 0).status == Status.PASS


def test_replay_counter_of_a_gpu_on_the_bus_only_skips():
    snap = _bus_only_gpu1()
    (result,) = node_level(run(snap, "pcie.replay_errors"))
    assert result.status == Status.SKIP
    assert result.message == ("GPU at 0000:3b:00.0 (on the PCI bus, not enumerated by a vendor library): replay "
                              "counters come from the vendor library")
    assert for_gpu(run(snap, "pcie.replay_errors"), 0).status == Status.PASS


def test_amd_gpu_on_the_bus_only_is_judged_by_amdgpu_link_dpm():
    # Without the library, the vendor comes from sysfs: an AMD GPU's evidence is pp_dpm_pcie, not a P-state.
    snap = amd_mi300x_node()
    del snap.devices[4]
    pci = snap.pci_gpus[4]
    pci.current_link_generation = 4
    (result,) = node_level(run(snap, "pcie.link_generation"))
    assert_actionable(result, Status.FAIL)
    assert "no amdgpu link DPM level (pp_dpm_pcie) says the link is power-managed" in result.message
    pci.current_link_generation, pci.current_link_width = 1, 1
    _dpm(pci, [(1, 1), (5, 16)], current=0)
    (width,) = node_level(run(snap, "pcie.link_width"))
    assert_actionable(width, Status.WARN)
    assert "level 0" in width.message


def test_nvidia_gpu_on_the_bus_only_warns_with_the_nvidia_confirmation():
    snap = _bus_only_gpu1(current_link_generation=4)
    (result,) = node_level(run(snap, "pcie.link_generation"))
    assert_actionable(result, Status.WARN)
    assert "P-state could not be read" in result.message
    assert "`nvidia-smi -q -i 0000:3b:00.0 -d PCI` (Link Info, Current)" in result.remediation


def test_aer_correctable_at_the_threshold_passes_and_one_more_warns():
    snap = amd_mi300x_node()
    snap.pci_gpus[3].aer["correctable"].update({"Receiver Error": 100, "TOTAL_ERR_COR": 100})
    result = for_gpu(run(snap, "pcie.aer"), 3)
    assert result.status == Status.PASS
    assert result.message == "GPU 3 (0000:65:00.0): no uncorrectable PCIe errors, 100 correctable"
    assert result.expected == "no fatal/nonfatal errors, correctable <= 100"
    snap.pci_gpus[3].aer["correctable"].update({"Receiver Error": 101, "TOTAL_ERR_COR": 101})
    result = for_gpu(run(snap, "pcie.aer"), 3)
    assert_actionable(result, Status.WARN)
    assert result.message == "GPU 3 (0000:65:00.0) logged 101 correctable PCIe errors"


def test_aer_observed_carries_the_sysfs_detail_or_nothing_from_the_library():
    snap = nvidia_h200_node()
    snap.pci_gpus[0].aer["correctable"].update({"Bad TLP": 2, "TOTAL_ERR_COR": 2})
    result = for_gpu(run(snap, "pcie.aer"), 0)
    assert result.observed == {"fatal": 0, "nonfatal": 0, "correctable": 2, "detail": snap.pci_gpus[0].aer}

    snap = nvidia_h200_node()
    snap.pci_gpus = []
    snap.devices[0].pcie.error_counters = {"fatal_errors": 0, "non_fatal_errors": 0, "correctable_errors": 3}
    result = for_gpu(run(snap, "pcie.aer"), 0)
    assert result.status == Status.PASS
    assert result.observed == {"fatal": 0, "nonfatal": 0, "correctable": 3, "detail": {}}
