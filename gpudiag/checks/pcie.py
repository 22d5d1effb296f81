"""pcie.*: the GPU's PCIe link: trained generation and width against what the GPU and its slot support, and the
link's error counters (replays, AER) and, on AMD, its retraining counters.

Two sources describe a link: the vendor library (PcieInfo: `max_*` is the system max, the lesser of GPU and slot;
`device_max_*` the GPU's own) and sysfs (PciGpu: `max_link_*` is the GPU's capability, `upstream_max_link_*` the
slot's). The library is preferred where both exist; sysfs alone still judges a GPU the library does not see.
A link below its maximum is excused only on evidence of power saving, and a reading under load settles it
(pcie_power).

- pcie.link_recovery: gpu_metrics' L0 -> Recovery and NAK counters (amdsmi_get_pcie_info "pcie_metric"). The
  thresholds are AMD node-scraper's (warn above 1, error above 3 L0 -> Recovery transitions,
  nodescraper/plugins/inband/amdsmi/analyzer_args.py), with the error limit scaled by days since boot because the
  count is cumulative (gpudiag/expect/__init__.py, pcie_recovery_*).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Callable, Optional

from gpudiag.checks.common import (
    FIELD_BATCH,
    Check,
    PhysicalGpu,
    failed,
    generation_width,
    not_available,
    passed,
    for_each_device,
    for_each_gpu,
    skipped,
    unknown,
    verdict,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.checks.pcie_power import LoadedLink, PowerState, confirm_under_load, power_state, under_load, vendor_of
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, PcieInfo, Status, Vendor
from gpudiag.model.records import dataclass

LINK_GENERATION = "pcie.link_generation"
LINK_WIDTH = "pcie.link_width"
REPLAY_ERRORS = "pcie.replay_errors"
AER = "pcie.aer"
LINK_RECOVERY = "pcie.link_recovery"

_PCIE_TOPICS = ("pcie", "current_link", "max_link", "metrics")


def _first(*values: Optional[int]) -> Optional[int]:
    return next((v for v in values if v is not None), None)


@dataclass
class LinkFacts:
    """A PCIe link's current and maximum generation and width, and the slot's maximum."""
    current_generation: Optional[int]
    current_width: Optional[int]
    gpu_generation: Optional[int]  # what the GPU supports
    gpu_width: Optional[int]
    slot_generation: Optional[int]  # what the slot allows (the upstream port, or the library's system max)
    slot_width: Optional[int]
    slot_bus_id: Optional[str]

    @classmethod
    def of(cls, gpu: PhysicalGpu) -> "LinkFacts":
        pcie = gpu.device.pcie if gpu.device else PcieInfo()
        pci = gpu.pci
        return cls(
            current_generation=_first(pcie.current_generation, pci and pci.current_link_generation),
            current_width=_first(pcie.current_width, pci and pci.current_link_width),
            # NVML has no GPU-only max width, and without sysfs the system max is the best bound there is: it
            # still catches a link trained below it, though not a slot that caps the GPU.
            gpu_generation=_first(pcie.device_max_generation, pci and pci.max_link_generation, pcie.max_generation),
            gpu_width=_first(pcie.device_max_width, pci and pci.max_link_width, pcie.max_width),
            # The library's system max already is min(GPU, slot); below the GPU's own max it names the slot's limit.
            slot_generation=_first(pci and pci.upstream_max_link_generation, pcie.max_generation),
            slot_width=_first(pci and pci.upstream_max_link_width, pcie.max_width),
            slot_bus_id=pci.upstream_pci_bus_id if pci else None,
        )

    def targets(self, expect: Expectations) -> tuple[Optional[int], Optional[int]]:
        """The generation and width the link should train at: the profile's, or else what the GPU supports."""
        return (expect.expected_pcie_generation or self.gpu_generation, expect.expected_pcie_width or self.gpu_width)

    def observed(self) -> dict:
        return {"current": generation_width(self.current_generation, self.current_width),
                "gpu_max": generation_width(self.gpu_generation, self.gpu_width),
                "slot_max": generation_width(self.slot_generation, self.slot_width),
                "slot": self.slot_bus_id}


def _slot_text(facts: LinkFacts) -> str:
    return f"slot {facts.slot_bus_id}" if facts.slot_bus_id else "its slot"


def _confirm(gpu: PhysicalGpu, facts: LinkFacts) -> str:
    port = f" and `lspci -vvv -s {facts.slot_bus_id} | grep -e LnkCap -e LnkSta`" if facts.slot_bus_id else ""
    return (f"Confirm with `lspci -vvv -s {gpu.pci_bus_id} | grep -e LnkCap -e LnkSta`{port}, and "
            f"`cat /sys/bus/pci/devices/{gpu.pci_bus_id}/current_link_speed` under load.")


def _unreadable(check_id: str, gpu: PhysicalGpu, what: str) -> CheckResult:
    if gpu.device is not None:
        return not_available(check_id, gpu.device, what, _PCIE_TOPICS)
    return skipped(check_id, None, f"{gpu.label}: {what} not readable from sysfs")


def _trained_low(gpu: PhysicalGpu, facts: LinkFacts, target: int, what: str, loaded: bool) -> str:
    # Read idle, the operator confirms under load; read under load, what is left is to look at both link ends.
    confirm = _confirm(gpu, facts) if loaded else confirm_under_load(gpu)
    return (f"Both the GPU and {_slot_text(facts)} support {what}, yet the link trained lower: power down, reseat the "
            f"GPU and its riser/cable, check the slot's BIOS PCIe link-speed setting (Auto/Gen{target}) and look for "
            f"AER errors (pcie.aer) on this link. {confirm} A link that retrains low after reseating points at the "
            f"riser/retimer or the GPU: swap slots to tell which.")


def _judge_link(check_id: str, gpu: PhysicalGpu, loaded: Optional[LoadedLink], current: int,
                under_load_value: Optional[int], target: int, what: str, observed: dict, expected: str,
                state: Optional[PowerState], remediation: Callable[[bool], str]) -> CheckResult:
    """The link's generation or width (`current`) against `target`, once the slot is known not to be the limit.
    `state`: the power-management evidence, None where power management never lowers this (NVIDIA's width);
    `remediation(loaded)`: what to do about a link that trained low, read under load or not."""
    device, link = gpu.device, f"{observed['current']} of {expected}"
    if loaded is not None and under_load_value is not None:
        observed["under_load"] = loaded.text
        if under_load_value >= target:
            return passed(check_id, device, f"{gpu.label} link at {loaded.text} under load", observed=observed,
                          expected=expected)
        return failed(check_id, device, f"{gpu.label} link at {loaded.text} of {expected} while copying over it",
                      observed=observed, expected=expected, remediation=remediation(True))
    if current >= target:
        return passed(check_id, device, f"{gpu.label} link at {observed['current']}", observed=observed,
                      expected=expected)
    if state is None:
        return failed(check_id, device, f"{gpu.label} link trained at {link}", observed=observed, expected=expected,
                      remediation=remediation(False))
    observed.update(state.observed)
    if state.excused is not False:
        question = (f"whether it trains at {what} cannot be judged" if state.excused
                    else "whether that is power saving or a fault cannot be told")
        return warned(check_id, device, f"{gpu.label} link at {link}, {state.why}; {question} until the GPU is loaded",
                      observed=observed, expected=expected, remediation=confirm_under_load(gpu))
    return failed(check_id, device, f"{gpu.label} link at {link}, {state.why}", observed=observed,
                  expected=expected, remediation=remediation(False))


def _judge_generation(gpu: PhysicalGpu, expect: Expectations, loaded: Optional[LoadedLink]) -> CheckResult:
    device, facts = gpu.device, LinkFacts.of(gpu)
    target, target_width = facts.targets(expect)
    if facts.current_generation is None or target is None:
        return _unreadable(LINK_GENERATION, gpu, "PCIe link generation")
    observed = facts.observed()
    expected = generation_width(target, target_width)
    current = observed["current"]
    link = f"{current} of {expected}"
    slot = _slot_text(facts)
    if facts.slot_generation is not None and facts.slot_generation < target:
        return failed(
            LINK_GENERATION, device, f"{gpu.label} runs at {link}: {slot} supports only Gen{facts.slot_generation}",
            observed=observed, expected=expected,
            remediation=(f"The slot, not the GPU, limits the link. Set the PCIe link speed of {slot} to "
                         f"Auto/Gen{target} in the BIOS (per-root-port PCIe settings), make sure the riser, retimer "
                         f"and cable are rated for Gen{target} (a Gen{facts.slot_generation} riser caps the link) and "
                         f"that the BIOS and retimer firmware are current. {_confirm(gpu, facts)}"))
    return _judge_link(LINK_GENERATION, gpu, loaded, facts.current_generation, loaded.generation if loaded else None,
                       target, f"Gen{target}", observed, expected, power_state(gpu),
                       lambda under_load: _trained_low(gpu, facts, target, f"Gen{target}", under_load))


def _width_of_no_link(gpu: PhysicalGpu, facts: LinkFacts) -> CheckResult:
    """A width read while the link's speed is unknown is no trained width. sysfs reads both from one register,
    Link Status (drivers/pci/pci-sysfs.c: current_link_speed is "Unknown" for a speed code it does not know,
    current_link_width the Negotiated Link Width field): the PCIe spec leaves that field undefined while the link is
    down, and a GPU gone from the bus answers the read with all ones (x63). So "x0" or "x63" beside an Unknown
    speed is not judged: a lost GPU is inventory.gpus_visible's finding, not a link width failure."""
    if gpu.device is not None:
        return _unreadable(LINK_WIDTH, gpu, "PCIe link width")
    return unknown(LINK_WIDTH, None, f"{gpu.label}: the link's speed reads Unknown (the link is down or did not "
                                     f"answer), so its width x{facts.current_width} is no trained width",
                   observed=facts.observed(), expected="a trained link: a known speed and width",
                   remediation=(f"See inventory.gpus_visible for this GPU. Confirm with `lspci -vvv -s "
                                f"{gpu.pci_bus_id} | grep -e LnkCap -e LnkSta`: a link that stays down points at the "
                                f"GPU, its riser/cable or the slot's power."))


def _judge_width(gpu: PhysicalGpu, expect: Expectations, loaded: Optional[LoadedLink]) -> CheckResult:
    device, facts = gpu.device, LinkFacts.of(gpu)
    target_generation, target = facts.targets(expect)
    if facts.current_width is None or target is None:
        return _unreadable(LINK_WIDTH, gpu, "PCIe link width")
    library_width = gpu.device.pcie.current_width if gpu.device is not None else None
    if library_width is None and gpu.pci is not None and gpu.pci.current_link_generation is None:
        return _width_of_no_link(gpu, facts)
    observed = facts.observed()
    expected = generation_width(target_generation, target)
    link = f"{observed['current']} of {expected}"
    slot = _slot_text(facts)
    if facts.slot_width is not None and facts.slot_width < target:
        return failed(
            LINK_WIDTH, device, f"{gpu.label} runs at {link}: {slot} provides only x{facts.slot_width}",
            observed=observed, expected=expected,
            remediation=(f"The slot is narrower than the GPU: check the BIOS bifurcation setting of {slot} (x16, not "
                         f"x8x8 or x4x4x4x4) and that the riser/cable is x16. {_confirm(gpu, facts)}"))
    # The width is excused only on positive evidence of power saving: amdgpu's DPM level, or a known low NVIDIA
    # P-state (NVIDIA documents that the current width, too, "may be reduced when the GPU is not in use"). In P0 or an
    # unreadable P-state a narrow link is lanes that did not train: the lab's idle P0 H200s keep x16.
    state = power_state(gpu)
    if vendor_of(gpu) != Vendor.AMD and state.excused is not True:
        state = None

    def remediation(under_load: bool) -> str:
        return (f"A link narrower than both ends support means lanes failed to train: power down, reseat the GPU and "
                f"its riser/cable, inspect the connector for damage or debris. {_confirm(gpu, facts)} If the width "
                f"stays low, swap the GPU into another slot to tell a bad riser/slot from a bad GPU.")

    return _judge_link(LINK_WIDTH, gpu, loaded, facts.current_width, loaded.width if loaded else None, target,
                       f"x{target}", observed, expected, state, remediation)


def link_generation(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_gpu(snapshot, LINK_GENERATION, lambda g: _judge_generation(g, expect, under_load(snapshot, g)))


def link_width(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_gpu(snapshot, LINK_WIDTH, lambda g: _judge_width(g, expect, under_load(snapshot, g)))


_MARGINAL_LINK = ("A marginal link: reseat the GPU and its riser/cable, check the retimer firmware and the slot's "
                  "BIOS link settings; if the count keeps growing, move the GPU to another slot to tell a bad riser "
                  "from a bad GPU.")


def _judge_replays(gpu: PhysicalGpu, expect: Expectations) -> CheckResult:
    check_id, device = REPLAY_ERRORS, gpu.device
    if device is None:
        return skipped(check_id, None, f"{gpu.label}: replay counters come from the vendor library")
    pcie = device.pcie
    if pcie.replay_count is None:
        return not_available(check_id, device, "PCIe replay counter", _PCIE_TOPICS + ("replay", FIELD_BATCH))
    observed = {"replay_count": pcie.replay_count, "replay_rollover_count": pcie.replay_rollover_count,
                **pcie.error_counters}
    expected = f"replay_count <= {expect.pcie_replay_warn_count}, no rollover"
    if pcie.replay_count > expect.pcie_replay_warn_count or (pcie.replay_rollover_count or 0) > 0:
        return warned(check_id, device, f"{gpu.label} has {pcie.replay_count} PCIe replays since the driver loaded",
                      observed=observed, expected=expected,
                      remediation=f"{_MARGINAL_LINK} Confirm with `lspci -vvv -s {gpu.pci_bus_id}` (CESta) and the "
                                  f"replay counter in `nvidia-smi -q -d PCIE` / `amd-smi metric --pcie`.")
    return passed(check_id, device, f"{gpu.label}: {pcie.replay_count} PCIe replays", observed=observed,
                  expected=expected)


def replay_errors(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    return for_each_gpu(snapshot, REPLAY_ERRORS, lambda g: _judge_replays(g, expect))


def _aer_total(counters: dict[str, int], total_key: str) -> int:
    return counters[total_key] if total_key in counters else sum(counters.values())


def _aer_counts(gpu: PhysicalGpu) -> Optional[dict[str, int]]:
    """Fatal / nonfatal / correctable totals, from sysfs AER or else the library's counters."""
    aer = gpu.pci.aer if gpu.pci else {}
    if aer:
        return {"fatal": _aer_total(aer.get("fatal", {}), "TOTAL_ERR_FATAL"),
                "nonfatal": _aer_total(aer.get("nonfatal", {}), "TOTAL_ERR_NONFATAL"),
                "correctable": _aer_total(aer.get("correctable", {}), "TOTAL_ERR_COR")}
    counters = gpu.device.pcie.error_counters if gpu.device else {}
    names = {"fatal": "fatal_errors", "nonfatal": "non_fatal_errors", "correctable": "correctable_errors"}
    if not any(n in counters for n in names.values()):
        return None
    return {kind: counters.get(name, 0) for kind, name in names.items()}


def _judge_aer(gpu: PhysicalGpu, expect: Expectations) -> CheckResult:
    check_id, device = AER, gpu.device
    counts = _aer_counts(gpu)
    if counts is None:
        return skipped(check_id, device, f"{gpu.label}: no AER counters exposed (kernel older than 4.19, or AER "
                                         f"handled firmware-first by the BIOS)")
    observed = {**counts, "detail": gpu.pci.aer if gpu.pci else {}}
    expected = f"no fatal/nonfatal errors, correctable <= {expect.aer_correctable_warn_count}"
    where = (f"`cat /sys/bus/pci/devices/{gpu.pci_bus_id}/aer_dev_*` and `dmesg -T | grep -i aer`; errors may be "
             f"counted on the upstream port too")
    if counts["fatal"] or counts["nonfatal"]:
        return failed(check_id, device, f"{gpu.label} logged {counts['fatal']} fatal and {counts['nonfatal']} "
                                        f"nonfatal uncorrectable PCIe errors",
                      observed=observed, expected=expected,
                      remediation=(f"Uncorrectable PCIe errors often precede a GPU falling off the bus. See which with "
                                   f"{where}. Drain the GPU, reseat it and its riser/cable, and update BIOS/retimer "
                                   f"firmware; errors that follow the slot mean the riser/slot, errors that follow the "
                                   f"GPU mean an RMA."))
    if counts["correctable"] > expect.aer_correctable_warn_count:
        return warned(check_id, device, f"{gpu.label} logged {counts['correctable']} correctable PCIe errors",
                      observed=observed, expected=expected, remediation=f"{_MARGINAL_LINK} See which with {where}.")
    return passed(check_id, device, f"{gpu.label}: no uncorrectable PCIe errors, {counts['correctable']} correctable",
                  observed=observed, expected=expected)


def aer(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    # AER counters live in sysfs (or else the library) and stay readable when the GPU no longer answers it.
    return for_each_gpu(snapshot, AER, lambda g: _judge_aer(g, expect), sysfs_only=True)


# ---------------------------------------------------------------------------------------------------------------
# pcie.link_recovery


def _days_up(snapshot: NodeSnapshot) -> float:
    """Days since boot (at least 1): the span the cumulative counters cover."""
    boot = snapshot.host.boot_time
    if boot is None:
        return 1.0
    try:
        now = datetime.fromisoformat(snapshot.collected_at).timestamp() if snapshot.collected_at else time.time()
    except ValueError:
        now = time.time()
    return max(1.0, (now - boot) / 86400)


def link_recovery(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    days = _days_up(snapshot)
    fail_limit = int(expect.pcie_recovery_fail_count_per_day * days)

    def judge(device: DeviceSnapshot) -> CheckResult:
        counters = device.pcie.error_counters
        recoveries = counters.get("l0_to_recovery")
        naks = [counters[k] for k in ("nak_sent", "nak_received") if k in counters]
        if recoveries is None and not naks:
            return not_available(LINK_RECOVERY, device, "PCIe recovery and NAK counters", ("pcie", "metrics"))
        observed = {"l0_to_recovery": recoveries, "nak_sent": counters.get("nak_sent"),
                    "nak_received": counters.get("nak_received"), "days_since_boot": round(days, 1)}
        expected = (f"L0->Recovery <= {expect.pcie_recovery_warn_count} (fail above {fail_limit}), NAKs <= "
                    f"{expect.pcie_replay_warn_count}")
        findings, status = [], Status.PASS
        if recoveries is not None and recoveries > fail_limit:
            findings.append(f"{recoveries} L0->Recovery transitions (more than {fail_limit})")
            status = Status.FAIL
        elif recoveries is not None and recoveries > expect.pcie_recovery_warn_count:
            findings.append(f"{recoveries} L0->Recovery transitions")
            status = Status.WARN
        # A NAK is the receiving end's half of a replay (PCIe data link layer): judged like the replay count.
        if sum(naks) > expect.pcie_replay_warn_count:
            findings.append(f"{sum(naks)} PCIe NAKs")
            status = max(status, Status.WARN, key=_RANK.get)
        if not findings:
            return passed(LINK_RECOVERY, device, f"{device.label}: PCIe link stable ({recoveries} recoveries, "
                                                 f"{sum(naks)} NAKs since the driver loaded)",
                          observed=observed, expected=expected)
        return verdict(LINK_RECOVERY, status, device, f"{device.label}: PCIe link retraining: {'; '.join(findings)} "
                                                      f"since the driver loaded",
                       observed=observed, expected=expected,
                       remediation=(f"A link that keeps dropping into Recovery has a signal-integrity fault (riser, "
                                    f"cable, retimer, slot). Re-read in 10 minutes (`amd-smi metric --pcie -g "
                                    f"{device.index}`): a count that grows is a live fault; check `pcie.aer` and the "
                                    f"upstream port's AER counters, reseat the GPU/riser, and move the GPU to another "
                                    f"slot to see whether the fault follows it."))

    return for_each_device(snapshot, LINK_RECOVERY, judge, vendor=Vendor.AMD)


_RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


CHECKS = (
    Check(LINK_GENERATION, link_generation, "PCIe link generation matches what the GPU and slot support"),
    Check(LINK_WIDTH, link_width, "PCIe link width matches what the GPU and slot support"),
    Check(REPLAY_ERRORS, replay_errors, "PCIe replay counter below threshold"),
    Check(AER, aer, "no uncorrectable AER errors, correctable below threshold"),
    Check(LINK_RECOVERY, link_recovery, "PCIe L0->Recovery and NAK counters below threshold (AMD)"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "pcie.link_generation": {F: ("drain", "GPUDIAG-PCIE-DOWNTRAINED"), W: ("watch", "GPUDIAG-PCIE-DOWNTRAINED")},
    "pcie.link_width": {F: ("drain", "GPUDIAG-PCIE-WIDTH-DEGRADED")},
    "pcie.replay_errors": {W: ("watch", "GPUDIAG-PCIE-REPLAYS")},
    "pcie.aer": {F: ("drain", "GPUDIAG-PCIE-AER-UNCORRECTABLE"), W: ("watch", "GPUDIAG-PCIE-AER-CORRECTABLE")},
    "pcie.link_recovery": {F: ("drain", "GPUDIAG-PCIE-LINK-RECOVERY"), W: ("watch", "GPUDIAG-PCIE-LINK-RECOVERY")},
}
_REFERENCE = {
    "pcie.link_generation": (
        "current and maximum link speed of the GPU and its slot (library, sysfs current/max_link_speed), the "
        "P-state and pp_dpm_pcie, and at --level 2 the link under load",
        "Reseat the GPU and its riser or cable, set the slot's BIOS link speed to Auto/the GPU's generation, check "
        "riser and retimer ratings and firmware; confirm under load (`gpudiag check --level 2`)."),
    "pcie.link_width": (
        "current and maximum link width of the GPU and its slot",
        "A link with fewer lanes than it trained for: reseat the GPU and riser or cable, check the slot's "
        "bifurcation setting in the BIOS; swap slots to tell a bad slot from a bad GPU."),
    "pcie.replay_errors": (
        "the PCIe replay counter (NVML) since the driver loaded",
        "A marginal link (riser, retimer, connector): watch the rate, reseat or replace the riser or cable."),
    "pcie.aer": (
        "the AER counters of the GPU's function in sysfs (aer_dev_fatal, aer_dev_nonfatal, aer_dev_correctable)",
        "Uncorrectable errors: drain, reseat the GPU and riser, update BIOS and retimer firmware; a stream of "
        "correctable errors marks a marginal link to watch."),
    "pcie.link_recovery": (
        "AMD gpu_metrics PCIe L0-to-Recovery and NAK counters since the driver loaded",
        "A link that keeps dropping into Recovery has a signal-integrity fault: reseat or replace the riser, "
        "retimer or cable, update the retimer firmware."),
}
_SETTINGS = {
    "pcie.link_generation": ("expected_pcie_generation",),
    "pcie.link_width": ("expected_pcie_width",),
    "pcie.replay_errors": ("pcie_replay_warn_count",),
    "pcie.aer": ("aer_correctable_warn_count",),
    "pcie.link_recovery": ("pcie_recovery_warn_count", "pcie_recovery_fail_count_per_day", "pcie_replay_warn_count"),
}
FAMILY = Family(
    "pcie", order=30, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
    settings=_SETTINGS,
)
