"""firmware.*: GPUs of one model on one node should run one VBIOS and one set of firmware versions. A mismatch is a
GPU that was swapped in (RMA replacement) or missed an update; it behaves differently from its peers."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Optional

from gpudiag.checks.common import (
    Check,
    errors_about,
    passed,
    physical_devices,
    skipped,
    unknown,
    unreachable,
    warned,
)
from gpudiag.checks.family import Family
from gpudiag.expect import Expectations
from gpudiag.model import CheckResult, DeviceSnapshot, NodeSnapshot, Status, Vendor


def _models(snapshot: NodeSnapshot) -> dict[tuple[Vendor, str], list[DeviceSnapshot]]:
    groups: dict[tuple[Vendor, str], list[DeviceSnapshot]] = defaultdict(list)
    for device in physical_devices(snapshot):
        if device.reachable:
            groups[(device.vendor, device.name or "unknown model")].append(device)
    return groups


def _update_advice(vendor: Vendor) -> str:
    if vendor == Vendor.NVIDIA:
        return ("Update the odd GPU(s) with the firmware package from the system vendor (HGX firmware bundle / "
                "nvfwupd) so that all GPUs match. Confirm with `nvidia-smi -q | grep -i -e 'VBIOS Version' -e "
                "'Image Version' -e 'OEM Object'`.")
    return ("Update the odd GPU(s) with the system vendor's firmware bundle (PLDM / amdfwflash) so that all GPUs "
            "match. Confirm with `amd-smi static --vbios` and `amd-smi firmware`.")


def _compare(check_id: str, what: str, vendor: Vendor, model: str, devices: list[DeviceSnapshot],
             version_of: Callable[[DeviceSnapshot], Optional[str]]) -> Optional[CheckResult]:
    """One result for one model's GPUs: warn listing which GPU has which version when they differ."""
    by_version: dict[str, list[int]] = defaultdict(list)
    for device in devices:
        version = version_of(device)
        if version is not None:
            by_version[version].append(device.index)
    if not by_version:
        return None
    observed = {version: sorted(indices) for version, indices in by_version.items()}
    if len(by_version) == 1:
        ((version, indices),) = by_version.items()
        return passed(check_id, None, f"{model}: {what} {version} on all {len(indices)} GPU(s) that report it",
                      observed=observed, expected=f"one {what} per model")
    listing = "; ".join(f"{v} on GPU {', '.join(map(str, i))}" for v, i in sorted(observed.items()))
    return warned(check_id, None, f"{model}: GPUs run different {what}s: {listing}",
                  observed=observed, expected=f"one {what} per model", remediation=_update_advice(vendor))


def _per_model(snapshot: NodeSnapshot, check_id: str, what: str,
               compare: Callable[[Vendor, str, list[DeviceSnapshot]], list[CheckResult]]) -> list[CheckResult]:
    # A GPU that does not answer cannot be compared: say so rather than leave it out silently.
    lost = [unreachable(check_id, d) for d in physical_devices(snapshot) if not d.reachable]
    groups = {key: devices for key, devices in _models(snapshot).items() if len(devices) > 1}
    if not groups:
        return lost + [skipped(check_id, None, f"fewer than two reachable GPUs of one model: no {what} to compare")]
    results = [r for (vendor, model), devices in groups.items() for r in compare(vendor, model, devices)]
    return lost + (results or [skipped(check_id, None, f"no {what} reported")])


def vbios_consistent(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "firmware.vbios_consistent"

    def compare(vendor: Vendor, model: str, devices: list[DeviceSnapshot]) -> list[CheckResult]:
        result = _compare(check_id, "VBIOS version", vendor, model, devices, lambda d: d.vbios_version or None)
        if result is None:  # none reported: say why when the probe knows (amdsmi without libdrm, for one)
            errors = [e for d in devices for e in errors_about(d, ("vbios",))]
            if errors:
                return [unknown(check_id, None, f"{model}: the VBIOS versions could not be read: {errors[0].message}",
                                observed={"errors": sorted({f"{e.source}: {e.message}" for e in errors})},
                                expected="one VBIOS version per model", remediation=errors[0].message)]
        return [result] if result else []

    return _per_model(snapshot, check_id, "VBIOS version", compare)


def versions_consistent(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    check_id = "firmware.versions_consistent"

    def compare(vendor: Vendor, model: str, devices: list[DeviceSnapshot]) -> list[CheckResult]:
        components = sorted({name for d in devices for name in d.firmware_versions})
        results = [_compare(check_id, f"{name} firmware version", vendor, model, devices,
                            lambda d, name=name: d.firmware_versions.get(name)) for name in components]
        mismatches = [r for r in results if r is not None and r.status == Status.WARN]
        if mismatches or not components:
            return mismatches
        # One line for a consistent model rather than one per firmware component (AMD reports twenty).
        return [passed(check_id, None, f"{model}: {len(components)} firmware component(s) match on all "
                                       f"{len(devices)} GPU(s)",
                       observed={name: next(d.firmware_versions[name] for d in devices if name in d.firmware_versions)
                                 for name in components},
                       expected="one version per component per model")]

    return _per_model(snapshot, check_id, "firmware version", compare)


CHECKS = (
    Check("firmware.vbios_consistent", vbios_consistent, "GPUs of one model run the same VBIOS"),
    Check("firmware.versions_consistent", versions_consistent,
          "GPUs of one model run the same InfoROM / firmware component versions"),
)


# ---------------------------------------------------------------------------------------------------------------
# The family's declaration (gpudiag/checks/family.py): verdict rows, reference text, settings.

F, W, U = Status.FAIL, Status.WARN, Status.UNKNOWN

_VERDICTS = {
    "firmware.vbios_consistent": {W: ("watch", "GPUDIAG-FIRMWARE-VBIOS-MISMATCH")},
    "firmware.versions_consistent": {W: ("watch", "GPUDIAG-FIRMWARE-MISMATCH")},
}
_REFERENCE = {
    "firmware.vbios_consistent": (
        "each GPU's VBIOS version, grouped by model",
        "Flash the GPUs of one model to the same VBIOS (the vendor's or OEM's firmware update)."),
    "firmware.versions_consistent": (
        "each GPU's InfoROM / firmware component versions, grouped by model",
        "Bring the firmware components to one version with the OEM's firmware update."),
}
FAMILY = Family(
    "firmware", order=80, checks=CHECKS,
    verdicts=_VERDICTS, reference=_REFERENCE,
)
