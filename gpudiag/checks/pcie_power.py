"""Whether power management explains a PCIe link below its maximum, and what the link did under load.

The evidence, per vendor:
- NVIDIA: data-centre GPUs in P0 keep their trained link even when idle. The lab's H200s, idle (`gpu_idle`
  clock-event reason, 0 % utilisation) in P0, hold Gen5 x16 (tests/fixtures/h200/nvml-health-survey.json,
  tests/fixtures/h200x2/). Only lower P-states (P8 on a node without persistence mode) drop the link, to Gen1, to
  save power; NVIDIA's nvidia-smi documentation says of the current link generation and width that they "may be
  reduced when the GPU is not in use" (https://docs.nvidia.com/deploy/nvidia-smi/index.html, PCI section). So a
  link below its maximum in P0 is a fault; in a lower P-state it cannot be judged until the GPU is loaded.
- amdgpu: the driver's link DPM (`pp_dpm_pcie`, one line per level, `*` on the level in use; docs/vendor-api.md §2)
  says it outright. Only a current level below the top level is power saving; with the top level in use, or without the
  file, a lower link is what the link trained at.
- Under load (`gpudiag check --level 2`): the link generation and width read while the host copies ran. That reading
  settles the question either way, for both vendors.
"""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import PhysicalGpu, generation_width
from gpudiag.model import NodeSnapshot, Vendor
from gpudiag.model.records import dataclass


@dataclass
class PowerState:
    """Whether the power state a link was read in excuses a low link, and the evidence."""
    excused: Optional[bool]  # True: power saving explains a lower link; False: it does not; None: cannot tell
    why: str  # the evidence, as a clause for the message
    observed: dict  # what the verdict rests on, for the JSON `observed`


def vendor_of(gpu: PhysicalGpu) -> Optional[Vendor]:
    return gpu.device.vendor if gpu.device is not None else (gpu.pci.vendor if gpu.pci else None)


def power_state(gpu: PhysicalGpu) -> PowerState:
    if vendor_of(gpu) == Vendor.AMD:
        return _amdgpu_dpm(gpu)
    return _nvidia_pstate(gpu)


def _nvidia_pstate(gpu: PhysicalGpu) -> PowerState:
    pstate = gpu.device.clocks.performance_state if gpu.device is not None else None
    observed = {"performance_state": None if pstate is None else f"P{pstate}"}
    if pstate is None:
        # Unknown is not excused silently: the GPU may be in a low P-state (then the link is lowered on purpose) or
        # in P0 (then it is a fault). Neither pass nor fail can be said: warn and say how to find out.
        return PowerState(None, "its P-state could not be read", observed)
    if pstate == 0:
        return PowerState(False, "in P0, where data-centre GPUs hold their trained link even when idle", observed)
    return PowerState(True, f"in P{pstate}: NVIDIA GPUs lower the link in low P-states to save power", observed)


def _amdgpu_dpm(gpu: PhysicalGpu) -> PowerState:
    levels = gpu.pci.pcie_dpm_levels if gpu.pci else []
    current = gpu.pci.pcie_dpm_current if gpu.pci else None
    if not levels or current is None:
        return PowerState(False, "no amdgpu link DPM level (pp_dpm_pcie) says the link is power-managed", {})
    top = len(levels) - 1
    shown = {"pcie_dpm_level": f"{current} of 0-{top}",
             "pcie_dpm_current": generation_width(levels[current].generation, levels[current].width),
             "pcie_dpm_top": generation_width(levels[top].generation, levels[top].width)}
    if current < top:
        return PowerState(True, f"amdgpu's link DPM is at level {current} ({shown['pcie_dpm_current']}) below its top "
                                f"level {top} ({shown['pcie_dpm_top']}): power saving", shown)
    return PowerState(False, f"amdgpu's link DPM is at its top level {top} ({shown['pcie_dpm_top']})", shown)


@dataclass
class LoadedLink:
    """The link read while the load tests ran, if it was."""
    generation: Optional[int]
    width: Optional[int]

    @property
    def text(self) -> str:
        return generation_width(self.generation, self.width)


def under_load(snapshot: NodeSnapshot, gpu: PhysicalGpu) -> Optional[LoadedLink]:
    """The best link read while this GPU's host copies ran (`--level 2`), or None when none was read."""
    if snapshot.active is None or gpu.device is None:
        return None
    entry = next((d for d in snapshot.active.devices if d.index == gpu.device.index
                  and d.pci_bus_id == gpu.device.pci_bus_id), None)
    copies = [c for c in (entry.h2d, entry.d2h) if c is not None] if entry else []
    generations = [c.link_generation for c in copies if c.link_generation is not None]
    widths = [c.link_width for c in copies if c.link_width is not None]
    if not generations and not widths:
        return None
    return LoadedLink(max(generations, default=None), max(widths, default=None))


def confirm_under_load(gpu: PhysicalGpu) -> str:
    """How an operator confirms the link while the GPU works."""
    vendor_line = (f"`nvidia-smi -q -i {gpu.pci_bus_id} -d PCI` (Link Info, Current)" if vendor_of(gpu) == Vendor.NVIDIA
                   else f"`cat /sys/bus/pci/devices/{gpu.pci_bus_id}/pp_dpm_pcie`")
    return (f"Confirm under load: `gpudiag check --level 2` reads the link while it copies over it; or run a job and "
            f"read {vendor_line} or `lspci -vv -s {gpu.pci_bus_id} | grep LnkSta` meanwhile.")

