"""kernel_log.amdgpu_errors, the amdgpu half: what each amdgpu event means, the GPUs an XGMI hive reset took down
told apart from the GPU whose fatal error caused it, and firmware-first (APEI/GHES) PCIe errors placed on the GPUs
below the port they name. The event kinds are those gpudiag/probe/kernel_log/amdgpu.py gives.

An XGMI hive is reset as one: after a fatal RAS error on one GPU, amdgpu resets every GPU of the hive
(amdgpu_ras_do_recovery → amdgpu_device_gpu_recover over the hive's device list; ROCm/legacy-rocm-build#4021 shows
"MODE1 reset" on all eight MI300X of a node after "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT)" on one).
Each of them lost its jobs and the contents of its memory, so each is judged (warn); the one that had the fatal
error fails on its own event, and the others' results name it and carry their own fault code
(GPUDIAG-AMDGPU-HIVE-RESET), so that automation drains the cause, not the bystanders.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from gpudiag.checks.common import device_for_bus_id
from gpudiag.checks.kernel_log.common import (
    AER_EVENT_KINDS,
    AER_FINDINGS,
    UNRECOGNISED,
    UNRECOGNISED_KIND,
    Finding,
    aer_finding,
)
from gpudiag.checks.verdicts import strongest
from gpudiag.expect import Expectations
from gpudiag.model import KernelEvent, NodeSnapshot, Status, Vendor

# The kinds gpudiag/probe/kernel_log/ghes.py gives firmware-first PCIe errors (the checks import no probe module;
# a test keeps the two in step).
GHES_EVENT_KINDS = ("ghes_pcie_fatal", "ghes_pcie_uncorrected")

_AMDGPU_RESET_FAILED = Finding(Status.FAIL, "GPU reset failed",
                               "The GPU is unusable until the node is power-cycled: drain it and cold-boot; if the "
                               "reset fails again, RMA the GPU.", "reboot")
_RING_TIMEOUT = ("A job hung on the GPU: check the job; timeouts across different jobs on this GPU point at the "
                 "hardware: run AGFHC/RVS on it.")
_HANG = ("amdgpu resets the GPU after this and kills its jobs; if no \"GPU reset(N) succeeded\" follows, reset it "
         "(`amd-smi reset --gpureset -g <gpu>`) or cold-boot the node. A GPU that hangs again under different jobs: "
         "drain it and run AGFHC/RVS.")
AMDGPU_EVENTS = {
    "gpu_reset_failed": _AMDGPU_RESET_FAILED,
    "ras_uncorrectable": Finding(Status.FAIL, "uncorrectable RAS (ECC) errors",
                                 "Drain the GPU; check ecc.* and memory.bad_pages (`amd-smi metric --ecc`, `amd-smi "
                                 "bad-pages`); reset it (`amd-smi reset --gpureset -g <gpu>`) to retire the pages; "
                                 "RMA if bad pages approach the threshold.", "reset"),
    "init_failed": Finding(Status.FAIL, "GPU initialisation failed",
                           "amdgpu could not bring the GPU up: check for missing firmware (/lib/firmware/amdgpu) and "
                           "\"Above 4G Decoding\" in the BIOS; cold-boot; RMA if it persists.", "reboot"),
    "ras_deferred": Finding(Status.WARN, "deferred (poisoned) RAS errors",
                            "Poisoned data was consumed: see ecc.deferred and memory.bad_pages, and reset the GPU "
                            "(`amd-smi reset --gpureset -g <gpu>`) to retire the pages.", "reset"),
    "gpu_reset": Finding(Status.WARN, "GPU reset by the driver",
                         "The driver reset the GPU after a hang and killed its jobs: find the ring timeout or RAS "
                         "error before it; repeated resets mean drain and run AGFHC/RVS on the GPU."),
    "gpu_reset_succeeded": Finding(Status.WARN, "GPU reset by the driver (succeeded)",
                                   "The GPU recovered, but its jobs were killed: find the ring timeout or RAS error "
                                   "before the reset; repeated resets mean drain and run AGFHC/RVS on the GPU."),
    "gpu_mode1_reset": Finding(Status.WARN, "GPU mode-1 (whole-ASIC) reset: its jobs and VRAM contents were lost",
                               "The driver reset the whole GPU: every job on it was killed and its memory is gone. "
                               "Find the hang or RAS error before it (ring timeout, MES, fatal error); repeated "
                               "resets mean drain and run AGFHC/RVS on the GPU."),
    "vram_lost": Finding(Status.WARN, "VRAM contents lost in a GPU reset",
                         "The reset wiped the GPU's memory: every job that used it must be restarted. Find the fault "
                         "that caused the reset above this line."),
    "cp_unrecoverable": Finding(Status.WARN, "queue preemption failed: the command processor may be unrecoverable",
                                _HANG, "reset"),
    "qcm_fence_timeout": Finding(Status.WARN, "queue preemption fence timed out (HWS hang)", _HANG, "reset"),
    "mes_unresponsive": Finding(Status.WARN, "MES scheduler firmware stopped responding", _HANG, "reset"),
    "ip_block_hung": Finding(Status.WARN, "an IP block was found hung during recovery", _HANG, "reset"),
    "ring_reset_failed": Finding(Status.WARN, "per-queue ring reset failed (escalated to a GPU reset)", _HANG,
                                 "reset"),
    "ring_test_failed": Finding(Status.FAIL, "a GPU engine failed its ring test",
                                "The engine did not run a test packet, so amdgpu's init or resume of the GPU failed: "
                                "drain the node and cold-boot it; check firmware (/lib/firmware/amdgpu) matches the "
                                "driver; a GPU that fails again is an RMA candidate.", "reboot"),
    "ring_test_failed_multimedia": Finding(Status.WARN, "a video/JPEG engine failed its ring test",
                                           "The video or JPEG engine did not start; compute and graphics are not "
                                           "affected. Check the VCN firmware and reload amdgpu if media decode is "
                                           "needed."),
    "umc_error_address": Finding(Status.WARN, "HBM error located (the page is retired)",
                                 "amdgpu located an uncorrectable or deferred HBM error and retires the page: see "
                                 "memory.bad_pages and ecc.*; reset the GPU (`amd-smi reset --gpureset -g <gpu>`) "
                                 "so that pending pages are reserved.", "reset"),
    "ring_timeout": Finding(Status.WARN, "GPU ring (job queue) timeout", _RING_TIMEOUT),
    "ring_timeout_soft_recovered": Finding(Status.WARN, "GPU ring timeout (soft recovered)", _RING_TIMEOUT),
    # Fatal RAS (issue 15). amdgpu's own flow after each of these is a GPU reset (the whole XGMI hive for a fatal
    # interrupt, amdgpu_ras.c amdgpu_ras_global_ras_isr → amdgpu_ras_reset_gpu); "GPU reset failed" escalates above.
    "ras_fatal_error": Finding(Status.FAIL, "uncorrectable hardware error (fatal RAS interrupt)",
                               "amdgpu reset the GPU (with its XGMI hive) after a fatal uncorrectable error and killed "
                               "its jobs: drain it; check ecc.* and memory.bad_pages (`amd-smi metric --ecc`, `amd-smi "
                               "bad-pages`); if the reset failed, cold-boot; a GPU that repeats this is an RMA "
                               "candidate.", "reset"),
    "ras_poison_consumed": Finding(Status.FAIL, "poisoned data consumed (GPU reset flow started)",
                                   "A job read data the GPU had marked poisoned; amdgpu resets the GPU and retires "
                                   "the page. Drain the GPU, check memory.bad_pages and ecc.*, and reset it "
                                   "(`amd-smi reset --gpureset -g <gpu>`) if the driver's reset did not run.",
                                   "reset"),
    "aca_uncorrectable": Finding(Status.FAIL, "uncorrectable error in an ACA/MCA bank",
                                 "The GPU logged an uncorrected hardware error (ACA bank STATUS UC bit). On an XGMI "
                                 "hive the dump appears on every GPU of the hive: find the GPU with the fatal error "
                                 "line; drain, check ecc.* and reset (`amd-smi reset --gpureset -g <gpu>`); repeated "
                                 "banks on one GPU → run AGFHC and RMA.", "reset"),
    "bad_pages_threshold": Finding(Status.FAIL, "retired (bad) pages reached the RMA threshold",
                                   "amdgpu marked the GPU for replacement (bad pages reached the threshold, the "
                                   "RAS table is flagged bad): drain it and RMA it (AMD Service Action Guide).",
                                   "rma"),
    "ras_records_exceed_threshold": Finding(Status.FAIL, "RAS bad-page records exceed the threshold",
                                            "The bad-page table on the GPU's EEPROM holds more records than the "
                                            "threshold: amdgpu flags the GPU for RMA (unless amdgpu.bad_page_"
                                            "threshold=-1/-2). Drain it and RMA it.", "rma"),
    # amdgpu counts a bank with Poison or Deferred set as a deferred error (amdgpu_aca.h ACA_BANK_ERR_IS_DEFFERED).
    "aca_deferred": Finding(Status.WARN, "deferred (poisoned) error in an ACA/MCA bank",
                            "Poisoned (deferred) data was logged: see ecc.deferred and memory.bad_pages, and reset "
                            "the GPU (`amd-smi reset --gpureset -g <gpu>`) to retire the pages.", "reset"),
    "ras_poison_created": Finding(Status.WARN, "poison created (uncorrectable error contained)",
                                  "An uncorrectable memory error was contained by poisoning (amdgpu: \"no user action "
                                  "is needed\"); the page is retired. Watch memory.bad_pages; a job that reads it "
                                  "triggers a reset."),
    "bad_pages_near_threshold": Finding(Status.WARN, "RAS bad-page records at 90% of the threshold",
                                        "The GPU is close to its bad-page RMA threshold: plan its replacement; see "
                                        "memory.bad_pages."),
    "ras_table_checksum": Finding(Status.WARN, "RAS bad-page table failed its checksum",
                                  "The bad-page table in the GPU's EEPROM could not be verified, so retired pages may "
                                  "not be reserved: check memory.bad_pages; reload amdgpu or reboot (newer kernels "
                                  "try to recover the table); if it persists, contact AMD support."),
    "page_fault": Finding(Status.WARN, "GPU page fault",
                          "Usually a job that used an invalid address (the log names the process): check the job."),
    "throttled": Finding(Status.WARN, "GPU throttled", "See thermal.* and power.* for the cause."),
    # The SMU (power-management firmware) stopped answering the driver (probe/kernel_log/amdgpu.py names its records):
    # amdgpu does not recover it by itself, clocks and power are no longer managed, and a reset that goes through it
    # may fail; the reporter of ishitatsuyuki/acominer#9 needed a hard power-off. A reset first, as for a hung GPU.
    "smu_unresponsive": Finding(Status.FAIL, "the SMU (power-management firmware) stopped responding",
                                "Drain the GPU and reset it (`amd-smi reset --gpureset -g <gpu>`); if the reset fails "
                                "or the SMU still does not answer, power-cycle the node (a hung SMU often needs a cold "
                                "boot); a GPU whose SMU hangs again is an RMA candidate.", "reset"),
    # APEI/GHES (firmware-first) PCIe errors on the GPU's link (gpudiag/probe/kernel_log/ghes.py).
    "ghes_pcie_fatal": Finding(Status.FAIL, "fatal PCIe error on the GPU's link, reported by firmware (APEI)",
                               "The platform firmware reported a fatal PCIe error on the link above the GPU: the GPU "
                               "is likely gone until a power cycle. Drain the node and cold-boot it; read the BMC's "
                               "SEL, check pcie.aer and reseat the GPU, its riser/retimer; RMA what fails again.",
                               "reboot"),
    "ghes_pcie_uncorrected": Finding(Status.WARN, "uncorrected PCIe error on the GPU's link, reported by firmware "
                                                  "(APEI)",
                                     "The platform firmware reported an uncorrectable (recoverable) PCIe error on the "
                                     "link above the GPU: check pcie.aer and the BMC's SEL; if it recurs, reseat the "
                                     "GPU and its riser/retimer and swap slots to tell the GPU from the slot."),
    # drivers/base/dd.c: the driver core could not bind amdgpu to the GPU (probe of … failed with error -22), with or
    # without amdgpu's own "Fatal error during GPU init" (issue 32, item 6).
    "probe_failed": Finding(Status.FAIL, "amdgpu could not take the GPU (probe failed)",
                            "amdgpu did not bind to the GPU: the lines above it in `dmesg` say why (firmware, VBIOS, "
                            "BAR space). Check /lib/firmware/amdgpu and \"Above 4G Decoding\" in the BIOS; cold-boot; "
                            "RMA if it persists.", "reboot"),
    **AER_FINDINGS,
}

# What an XGMI hive's reset does to the GPUs that did not cause it, and what causes one.
_HIVE_CONSEQUENCES = {"gpu_mode1_reset", "gpu_reset", "gpu_reset_succeeded", "vram_lost", "cp_unrecoverable",
                      "qcm_fence_timeout", "mes_unresponsive"}
_HIVE_CAUSES = {"ras_fatal_error", "ras_poison_consumed", "aca_uncorrectable", "ras_uncorrectable"}
# A reset follows its cause within seconds (4021: 0.09 s from the fatal interrupt to "MODE1 reset"); a cause this
# much older is not taken for the reason of a reset.
HIVE_WINDOW_SECONDS = 300.0
_OWN = ""


def hive_causes(snapshot: NodeSnapshot, events: list[KernelEvent]) -> dict[int, str]:
    """For every reset-kind event that followed a fatal error on another GPU: id(event) → who had the error
    ("GPU 0 (0000:dd:00.0)"). Events after a fatal error of their own GPU map to "" (judged as they are)."""
    causes: list[KernelEvent] = []
    found: dict[int, str] = {}
    for event in events:
        if event.kind in _HIVE_CAUSES:
            causes.append(event)
            continue
        if event.kind not in _HIVE_CONSEQUENCES or not event.pci_bus_id:
            continue  # a line that names no GPU (a bare "[drm] VRAM is lost") cannot be told a bystander's
        recent = [c for c in causes if _within(c, event)]
        if any(c.pci_bus_id == event.pci_bus_id for c in recent):
            found[id(event)] = _OWN
        elif recent:
            names = dict.fromkeys(_name(snapshot, c.pci_bus_id) for c in recent)
            found[id(event)] = ", ".join(names)
    return found


def _within(cause: KernelEvent, event: KernelEvent) -> bool:
    if cause.timestamp_seconds is None or event.timestamp_seconds is None:
        return True
    return 0 <= event.timestamp_seconds - cause.timestamp_seconds <= HIVE_WINDOW_SECONDS


def _name(snapshot: NodeSnapshot, bus_id: Optional[str]) -> str:
    device = device_for_bus_id(snapshot, bus_id)
    return device.label if device is not None else f"the GPU at {bus_id or '(unnamed)'}"


def port_events(snapshot: NodeSnapshot, vendor: Vendor) -> list[KernelEvent]:
    """Firmware-first (GHES, AMD's check only) and native AER PCIe errors on a port (or on the GPU itself), one per
    `vendor` GPU at or below that port in the PCI tree. An error on a port no GPU sits below is another device's (a
    NIC, an NVMe drive): not judged."""
    picked = []
    kinds = AER_EVENT_KINDS + (GHES_EVENT_KINDS if vendor == Vendor.AMD else ())
    for event in snapshot.kernel_log.events:
        if event.kind not in kinds:
            continue
        for gpu in snapshot.pci_gpus:
            below = (
                event.pci_bus_id in (gpu.pci_bus_id, gpu.upstream_pci_bus_id) or event.pci_bus_id in gpu.upstream_ports
            )
            if gpu.vendor == vendor and below:
                picked.append(dataclasses.replace(event, vendor=vendor, pci_bus_id=gpu.pci_bus_id))
    return picked


def amdgpu_finding(event: KernelEvent, expect: Expectations, causes: dict[int, str]) -> Optional[Finding]:
    """The event's finding, with the profile's verdict for its kind (ignore > fail > warn > the table above); a
    reset that an XGMI hive's fatal error on another GPU brought about says so (`causes`: hive_causes)."""
    if event.kind in expect.amdgpu_ignore_kinds:
        return None
    if event.kind in AER_EVENT_KINDS:
        return aer_finding(event)
    if event.kind == UNRECOGNISED_KIND:
        return UNRECOGNISED
    finding = AMDGPU_EVENTS.get(event.kind) or Finding(
        Status.WARN, f"amdgpu {event.kind}", f"Unrecognised amdgpu event {event.kind!r}: read it with "
                                            f"`dmesg -T | grep -i amdgpu`.")
    finding = finding._replace(fault_code=f"GPUDIAG-AMDGPU-{event.kind.upper().replace('_', '-')}")
    if event.decoded:
        finding = finding._replace(description=f"{finding.description} ({event.decoded})")
    cause = causes.get(id(event))
    if cause:
        finding = Finding(Status.WARN, f"{finding.description}, with its XGMI hive after a fatal error on {cause}",
                          f"This GPU was reset because {cause} had a fatal error (an XGMI hive is reset as one): "
                          f"its jobs were killed and its memory lost, but the fault is not its own. Restart its jobs; "
                          f"drain and repair {cause}.", "watch", "GPUDIAG-AMDGPU-HIVE-RESET")
    if event.kind in expect.amdgpu_fail_kinds:
        return finding._replace(severity=Status.FAIL, verdict=strongest([finding.verdict, "drain"]))
    if event.kind in expect.amdgpu_warn_kinds:
        return finding._replace(severity=Status.WARN)
    return finding
