"""services.*: the host services a GPU node depends on, as systemd reports each unit (probe/services/part.py), judged
against the profile (expect/services_settings.py). nvidia-fabricmanager is shown beside the fabric state NVML reports
for the GPUs (topology.fabric judges that state itself); the AMD device nodes are what ROCm opens (/dev/kfd, the HSA
kernel driver's node, and one /dev/dri/renderD* per GPU: ROCm's "Installation prerequisites")."""

from __future__ import annotations

from typing import Optional

from gpudiag.checks.common import Check, failed, passed, skipped, unknown, warned
from gpudiag.checks.family import DriftFact, Family
from gpudiag.expect import Expectations
from gpudiag.expect.services_settings import ServicesSettings
from gpudiag.model import CheckResult, NodeSnapshot, Status, Vendor

NOT_READ = "the node's services were not read (a snapshot recorded before gpudiag read them)"
FM, PD, IMEX = "nvidia-fabricmanager.service", "nvidia-persistenced.service", "nvidia-imex.service"
RDC = "rdc.service"


def _reading(snapshot: NodeSnapshot) -> Optional[dict]:
    return snapshot.parts.get("services")


def _fabric_states(snapshot: NodeSnapshot) -> dict[str, str]:
    return {str(d.index): d.driver_health.fabric.state for d in snapshot.devices
            if d.driver_health is not None and d.driver_health.fabric is not None and d.driver_health.fabric.state}


def _unit(check_id: str, snapshot: NodeSnapshot, settings: ServicesSettings, unit: str, expected: bool, why: str,
          extra: Optional[dict] = None) -> list[CheckResult]:
    reading = _reading(snapshot)
    if reading is None:
        return [skipped(check_id, None, NOT_READ)]
    state = reading["units"].get(unit)
    if state is None and reading.get("systemd") is False:
        return [skipped(check_id, None, f"{unit} not read: no systemctl on this node (a container?)")]
    if state is None:
        if not expected:
            return [skipped(check_id, None, f"{unit} is not expected here ({why})")]
        return [unknown(check_id, None, f"{unit} could not be read: {reading.get('error') or 'not reported'}",
                        observed=reading.get("error"), expected="active",
                        remediation="Run `systemctl show " + unit + "` on the node and see why gpudiag could not.")]
    observed = {"unit": unit, **state, **(extra or {})}
    if state["active"] != "active":
        if not expected:
            return [passed(check_id, None, f"{unit} is {state['active']} (not expected here: {why})",
                           observed=observed)]
        return [failed(check_id, None, f"{unit} is {state['active']}/{state['sub']} ({why})", observed=observed,
                       expected="active", remediation=f"`systemctl status {unit}` and `journalctl -u {unit}`: start "
                                                      f"it (`systemctl enable --now {unit}`) and fix what stops it.")]
    restarts = state.get("restarts")
    if restarts is not None and restarts >= settings.service_restarts_warn:
        return [warned(check_id, None, f"{unit} is active but systemd restarted it {restarts} times", observed=observed,
                       expected=f"fewer than {settings.service_restarts_warn} restarts",
                       remediation=f"`journalctl -u {unit}`: find why it keeps exiting.")]
    return [passed(check_id, None, f"{unit} is active", observed=observed)]


def _nvidia(snapshot: NodeSnapshot) -> bool:
    return any(d.vendor == Vendor.NVIDIA for d in snapshot.devices)


def fabricmanager(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    settings = expect.of(ServicesSettings)
    fabric = _fabric_states(snapshot)
    in_fabric = any(state != "not_supported" for state in fabric.values())
    expected = settings.fabricmanager_expected == "yes" or (settings.fabricmanager_expected == "auto" and in_fabric)
    why = ("the profile expects it" if settings.fabricmanager_expected == "yes" else
           "the GPUs are in an NVSwitch fabric" if expected else "no GPU reports an NVSwitch fabric")
    return _unit("services.fabricmanager", snapshot, settings, FM, expected, why, {"fabric_state": fabric})


def persistenced(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    settings = expect.of(ServicesSettings)
    choice = settings.persistenced_expected
    expected = choice == "yes" or (choice == "auto" and _nvidia(snapshot))
    return _unit("services.persistenced", snapshot, settings, PD, expected,
                 "an NVIDIA node" if expected else "not an NVIDIA node or the profile says no")


def imex(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    settings = expect.of(ServicesSettings)
    return _unit("services.imex", snapshot, settings, IMEX, settings.imex_expected,
                 "the profile expects it" if settings.imex_expected else "the profile does not expect IMEX")


def rdc(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    reading = _reading(snapshot)
    state = (reading or {}).get("units", {}).get(RDC)
    present = state is not None and state.get("load") == "loaded"  # installed: it should run; absent: nothing to say
    return _unit("services.rdc", snapshot, expect.of(ServicesSettings), RDC, present,
                 "installed on this node" if present else "ROCm's RDC is not installed")


def peermem(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    reading = _reading(snapshot)
    if reading is None:
        return [skipped("services.peermem", None, NOT_READ)]
    if not expect.of(ServicesSettings).peermem_expected:
        return [skipped("services.peermem", None, "the profile does not expect GPUDirect RDMA through nvidia_peermem")]
    modules = reading.get("modules")
    if modules is None:
        return [unknown("services.peermem", None, "/proc/modules could not be read", observed=None,
                        expected="nvidia_peermem loaded", remediation="Run `lsmod | grep nvidia_peermem` on the node.")]
    if "nvidia_peermem" not in modules:
        return [failed("services.peermem", None, "nvidia_peermem is not loaded", observed=False,
                       expected="nvidia_peermem loaded",
                       remediation="`modprobe nvidia_peermem`, and load it at boot (/etc/modules-load.d/ or the "
                                   "driver package's nvidia-peermem unit); GPUDirect RDMA falls back to host copies.")]
    return [passed("services.peermem", None, "nvidia_peermem is loaded", observed=True)]


def amd_devices(snapshot: NodeSnapshot, expect: Expectations) -> list[CheckResult]:
    reading = _reading(snapshot)
    if reading is None:
        return [skipped("services.amd_devices", None, NOT_READ)]
    amd = [d for d in snapshot.devices if d.vendor == Vendor.AMD]
    if not amd:
        return [skipped("services.amd_devices", None, "no AMD GPU")]
    if reading.get("kfd") is None:
        return [skipped("services.amd_devices", None, "/dev was not visible under the root: the device nodes not read")]
    observed = {"kfd": reading.get("kfd"), "render_nodes": len(reading.get("render_nodes") or ())}
    if not reading.get("kfd") or observed["render_nodes"] < len(amd):
        return [failed("services.amd_devices", None, f"/dev/kfd {'present' if reading.get('kfd') else 'missing'}, "
                       f"{observed['render_nodes']} render node(s) for {len(amd)} GPU(s)", observed=observed,
                       expected={"kfd": True, "render_nodes": len(amd)},
                       remediation="amdgpu did not create its device nodes: `dmesg | grep -i kfd`, check the amdgpu "
                                   "module loaded with KFD (`modinfo amdgpu`) and the udev rules of the ROCm install.")]
    return [passed("services.amd_devices", None, f"/dev/kfd and {observed['render_nodes']} render nodes",
                   observed=observed)]


def _units_active(observed: dict) -> Optional[str]:
    """The fleet fact: the unit and whether it was active ("nvidia-fabricmanager.service=active")."""
    unit, active = observed.get("unit"), observed.get("active")
    return f"{unit}={active}" if isinstance(unit, str) and isinstance(active, str) else None


CHECKS = (
    Check("services.fabricmanager", fabricmanager, "nvidia-fabricmanager active where the GPUs are in a fabric"),
    Check("services.persistenced", persistenced, "nvidia-persistenced active on NVIDIA nodes"),
    Check("services.imex", imex, "nvidia-imex active where the profile expects it"),
    Check("services.peermem", peermem, "nvidia_peermem loaded where the profile expects it"),
    Check("services.amd_devices", amd_devices, "/dev/kfd and a render node per AMD GPU"),
    Check("services.rdc", rdc, "ROCm's RDC daemon active where it is installed"),
)

_DOWN = {Status.FAIL: ("drain", "GPUDIAG-SERVICES-UNIT-DOWN"), Status.WARN: ("watch", "GPUDIAG-SERVICES-RESTARTING")}
FAMILY = Family(
    "services", order=85, checks=CHECKS,
    verdicts={"services.fabricmanager": _DOWN, "services.persistenced": {Status.FAIL: (
        "watch", "GPUDIAG-SERVICES-PERSISTENCED-DOWN"), Status.WARN: ("watch", "GPUDIAG-SERVICES-RESTARTING")},
              "services.imex": _DOWN, "services.rdc": {Status.FAIL: ("watch", "GPUDIAG-SERVICES-RDC-DOWN"),
                                                       Status.WARN: ("watch", "GPUDIAG-SERVICES-RESTARTING")},
              "services.peermem": {Status.FAIL: ("drain", "GPUDIAG-SERVICES-PEERMEM-MISSING")},
              "services.amd_devices": {Status.FAIL: ("drain", "GPUDIAG-SERVICES-KFD-MISSING")}},
    reference={
        "services.fabricmanager": ("systemd's state of nvidia-fabricmanager.service, beside each GPU's NVML fabric "
                                   "state", "Start the fabric manager; until it runs CUDA cannot use the GPUs."),
        "services.persistenced": ("systemd's state of nvidia-persistenced.service",
                                  "Enable it: without it the driver tears the GPUs' state down when idle."),
        "services.imex": ("systemd's state of nvidia-imex.service", "Start IMEX; multi-node NVLink jobs fail without."),
        "services.peermem": ("/proc/modules", "Load nvidia_peermem at boot for GPUDirect RDMA."),
        "services.amd_devices": ("/dev/kfd and /dev/dri/renderD*", "Fix the amdgpu driver's KFD and udev set-up."),
        "services.rdc": ("systemd's state of rdc.service where installed", "Start rdc or uninstall it."),
    },
    settings={"services.fabricmanager": ("fabricmanager_expected", "service_restarts_warn"),
              "services.persistenced": ("persistenced_expected", "service_restarts_warn"),
              "services.imex": ("imex_expected", "service_restarts_warn"), "services.peermem": ("peermem_expected",),
              "services.rdc": ("service_restarts_warn",)},
    probe_parts={"services": ("services.",)},
    drift={"services.fabricmanager": DriftFact("fabricmanager_active", "nvidia-fabricmanager state", _units_active,
                                               "Start nvidia-fabricmanager as on its peers: `systemctl enable --now "
                                               "nvidia-fabricmanager`.", action="drain")},
)
