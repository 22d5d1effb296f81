"""driver.recovery_action: the driver's own verdict on a GPU (NVIDIA R550+).

After an uncorrectable fault the driver publishes what it takes to use the GPU again (field
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; Xid 154 announces each change). The state stays set after the log line has
rotated away, so a node whose kernel log no longer shows the Xid still reads it. It is a `driver.*` check because
it is the driver's verdict about the GPU, whatever the fault behind it (memory, NVLink, GSP, PCIe): the family says
who judged, the result names the GPU.

The NVIDIA action maps to gpudiag's `action` (checks/verdicts.py) as the driver asks for it, per NVIDIA "GPU Memory
Error Management", Error Recovery and Response Flags
(https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html) and nvml.h:
  gpu_reset → reset · drain_and_reset → reset (drain P2P, then reset) · bus_reset → reset (a PCIe bus reset of the
  GPU) · node_reboot → reboot · system_reboot → reboot · drain_p2p → drain (quiesce peer-to-peer traffic, then the
  driver names the next action) · recover_imex_domain → drain (the multi-node IMEX domain must be recovered).
"""

from __future__ import annotations

from gpudiag.checks.common import FIELD_BATCH, device_check, driver_health_missing, failed, passed, reset_command
from gpudiag.checks.verdicts import with_verdict
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, Vendor

RECOVERY_ACTION = "driver.recovery_action"
_TOPICS = ("recovery_action", FIELD_BATCH)


def _steps(device: DeviceSnapshot) -> dict[str, tuple[str, str, str]]:
    """NVIDIA action → (gpudiag action, what the driver asks, what to do)."""
    reset = (f"Stop every process on the GPU and reset it (`{reset_command(device)}`); the GPU can then take new "
             f"work.")
    reboot = "Drain the node and reboot it: the fault may have left the OS in an inconsistent state."
    return {
        "gpu_reset": ("reset", "a GPU reset", reset),
        "drain_and_reset": ("reset", "draining peer-to-peer traffic, then a GPU reset",
                            f"Stop the processes that use peer-to-peer (NVLink/PCIe P2P) traffic with this GPU, then "
                            f"{reset[0].lower()}{reset[1:]}"),
        "bus_reset": ("reset", "a reset of the GPU's PCIe bus",
                      f"Stop every process on the GPU and reset it (`{reset_command(device)}`); if the reset is "
                      f"refused, reboot the node."),
        "node_reboot": ("reboot", "a node reboot", reboot),
        "system_reboot": ("reboot", "a system reboot", f"{reboot} Power-cycle it if a warm reboot does not clear it."),
        "drain_p2p": ("drain", "draining peer-to-peer traffic",
                      "Terminate the processes that use peer-to-peer traffic with this GPU and disable UVM persistence "
                      "mode; the driver then names the next action (re-run gpudiag)."),
        "recover_imex_domain": ("drain", "recovering its IMEX domain",
                                "Recover the multi-node NVLink (IMEX) domain: restart the nvidia-imex service on the "
                                "domain's nodes (`systemctl restart nvidia-imex`) and check its log."),
    }


def _recovery_action(device: DeviceSnapshot, expect: Expectations) -> CheckResult:
    missing = driver_health_missing(RECOVERY_ACTION, device, "recovery_action", "the driver's GPU recovery action",
                                    _TOPICS)
    if missing is not None:
        return missing
    action = device.driver_health.recovery_action
    observed = {"recovery_action": action}
    expected = "recovery action none"
    if action == "none":
        return passed(RECOVERY_ACTION, device, f"{device.label}: the driver asks for no recovery action",
                      observed=observed, expected=expected)
    confirm = (f"Confirm with `nvidia-smi -q -i {device.index} | grep -i 'Recovery Action'` and look for Xid 154 and "
               f"the Xid before it in the kernel log (`dmesg -T | grep -i xid`).")
    steps = _steps(device)
    ours, asks, todo = steps.get(action, ("drain", f"an action gpudiag does not know ({action})",
                                          "Read the action with nvidia-smi and follow NVIDIA's guidance."))
    code = action.upper().replace("_", "-") if action in steps else "UNKNOWN"
    return with_verdict(failed(
        RECOVERY_ACTION, device, f"{device.label}: the driver requires {asks} before the GPU can be used again",
        observed=observed, expected=expected, remediation=f"{todo} {confirm}"), ours, f"GPUDIAG-DRIVER-RECOVERY-{code}")


CHECKS = (
    device_check(RECOVERY_ACTION, "the driver asks for no recovery action on any GPU (NVIDIA R550+, Xid 154)",
                 _recovery_action, vendor=Vendor.NVIDIA),
)
