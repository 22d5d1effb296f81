"""RDMA NIC driver records → `KernelEvent`s (kept in KernelLogInfo.nic_events). Parsing only; what a record means is
for the checks. The hostile-input rules of kernel_log/events.py hold: a record is read only when its message STARTS
with a NIC driver's own device prefix, every pattern is anchored and bounded, digits are ASCII, numbers are bounded.

The prefix is the kernel's (drivers/base/core.c dev_printk: "<driver> <device>: "; netdev_printk adds the netdev,
drivers/infiniband/core/device.c __ibdev_printk the RDMA device: "<driver> <device> <name>: "); mlx5's
mlx5_core_err/warn and mlx5_log add "<function>:<line>:(pid <n>): " (include/linux/mlx5/driver.h). Sources of each
message (Linux 6.x unless said; real lines in tests/fixtures/rdma/kernel-log-*.json):
- "Port: %d Link %s": ib_cache_update (drivers/infiniband/core/cache.c), for every RDMA driver, on each port state
  change (ib_port_state_to_str: NOP DOWN INIT ARMED ACTIVE ACTIVE_DEFER). Seen: GPUd PR 1209.
- netdev carrier: mlx5e_update_carrier "Link up" / "Link down" (mlx5/core/en_main.c); bnxt_report_link "NIC Link is
  Up, %u Mbps %s%s duplex, Flow control: %s" / "NIC Link is Down" (broadcom/bnxt/bnxt.c); ionic_link_status_check
  "Link up - %d Gbps" / "Link down" (pensando/ionic/ionic_lif.c).
- mlx5 port module events (mlx5/core/events.c port_module_event): "Port module event: module %u, %s" (Cable plugged
  | unplugged | disabled) and "Port module event[error]: module %u, %s, %s" (the error: High Temperature, Bad or
  shorted cable/module, Power budget exceeded, …).
- mlx5 health (mlx5/core/health.c): poll_health "device's health compromised - reached miss count";
  print_health_info "Health issue observed, %s, severity(%d) %s:" and "PCI slot is unavailable".
- mlx5 commands (mlx5/core/cmd.c): wait_func / cb_timeout_handler "[cmd[%d]: ]%s(0x%x) [Async, ]timeout. Will cause a
  leak of a command resource", wait_func_handle_exec_timeout "cmd[%d]: %s(0x%x) No done completion", mlx5_cmd_out_err
  "%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome (0x%x), err(%d)".
- mlx5_pcie_event (mlx5/core/events.c) "Detected insufficient power on the PCIe slot (%uW)."; the PCI core's
  pcie_print_link_status (drivers/pci/pci.c) "%u.%03u Gb/s available PCIe bandwidth, limited by %s x%d link at %s
  (capable of …)", printed under the NIC driver's prefix.
- bnxt_en: bnxt_qplib_rcfw "QPLIB: cmdq[%#x]=%#x status %#x" (a RoCE firmware command failed); firmware reset
  notifications "Firmware fatal|non-fatal reset event received…" (≤ 5.9), "Firmware %s reset event, …" (5.10-6.0),
  "Fatal|Non-fatal firmware reset event, …" (6.1+).
- Probe failures (issue 32, item 6): the driver could not take the NIC, which is then left without a driver (no
  netdev, no RDMA device). mlx5 (mlx5/core/main.c, torvalds/linux@00679b631edd): init_one, the PCI probe, logs
  mlx5_core_err "mlx5_load_one failed with error code %d" and unwinds everything it set up (err_load_one:
  mlx5_pci_close, mlx5_mdev_uninit) — 6.1+'s probe_one says "mlx5_init_one failed with error code %d" — and
  mlx5_pci_resume, after a PCI error recovery, "%s: mlx5_load_one failed with error code: %d"; set_hca_cap, on the way
  through mlx5_load_one, "handle_hca_cap failed" (and _atomic, _odp, _2), after which the load is abandoned. The driver
  core then logs "<driver>: probe of <device> failed with error %d" (drivers/base/dd.c really_probe, pr_warn; 6.10+
  call_driver_probe: dev_err "probe with driver <driver> failed with error %d" under the device's own prefix).
- What no rule above names (issue 32, item 7): `unrecognised` gives any other record of these drivers, when events.py
  finds it at the error level or worse by the record's own level, as one "nic_driver_error" event.
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.model import KernelEvent, normalize_pci_bus_id
from gpudiag.probe.kernel_log.text import BUS_ID, bounded_int
from gpudiag.probe.patterns import lazy_compile

NIC_DRIVERS = ("mlx5_core", "bnxt_en", "bnxt_re", "ionic", "ionic_rdma")
# "<driver> <device>: " (dev_printk), and "<driver>: " (pr_* under KBUILD_MODNAME, the driver core's probe failure)
NIC_PREFIXES = tuple(f"{driver} " for driver in NIC_DRIVERS) + tuple(f"{driver}: " for driver in NIC_DRIVERS)
NIC_EVENT_KINDS = ("nic_port_state", "nic_link_down", "nic_link_up", "nic_module_plugged", "nic_module_unplugged",
                   "nic_module_disabled", "nic_module_error", "nic_health_compromised", "nic_health_syndrome",
                   "nic_pci_unavailable", "nic_command_timeout", "nic_command_failed", "nic_pcie_power_insufficient",
                   "nic_pcie_bandwidth_limited", "nic_firmware_reset", "nic_probe_failed", "nic_driver_error")

_PREFIX = lazy_compile(
    rf"({'|'.join(NIC_DRIVERS)}) "
    # the PCI function, or an auxiliary device ("mlx5_core.rdma.0", "bnxt_en.rdma.0") that an RDMA device hangs off
    rf"((?i:{BUS_ID})|[a-z0-9_]{{1,32}}\.[a-z0-9_]{{1,32}}\.[0-9]{{1,4}})"
    r"(?: ([A-Za-z0-9_.:@-]{1,64}))?: "  # the netdev or RDMA device
    r"(?:[a-z0-9_]{1,64}:[0-9]{1,6}:(?:\(pid [0-9]{1,10}\):)? )?",  # mlx5's "<function>:<line>:(pid <n>): "
    re.ASCII)


def _p(pattern: str) -> re.Pattern:
    return lazy_compile(pattern, re.ASCII)


_PORT_STATE = _p(r"Port: ([0-9]{1,3}) Link (NOP|DOWN|INIT|ARMED|ACTIVE|ACTIVE_DEFER)\s*$")
_LINK_DOWN = _p(r"(?:NIC )?Link (?:is )?[Dd]own\s*$")
_LINK_UP = _p(r"(?:Link up|NIC Link is Up)(?: - ([0-9]{1,6}) Gbps\s*$|, ([0-9]{1,9}) Mbps |\s*$)")
_MODULE = _p(r"Port module event: module ([0-9]{1,3}), Cable (plugged|unplugged|disabled)\s*$")
_MODULE_ERROR = _p(r"Port module event\[error\]: module ([0-9]{1,3}), [A-Za-z ]{1,24}, ([^\n]{1,160}?)\s*$")
_HEALTH_MISS = _p(r"device's health compromised - reached miss count")
_HEALTH_SYNDROME = _p(r"Health issue observed, ([^,]{1,64}), severity\(([0-9]{1,2})\) [A-Z]{1,16}:?\s*$")
_PCI_UNAVAILABLE = _p(r"PCI slot is unavailable\s*$")
_CMD_TIMEOUT = _p(r"(?:cmd\[[0-9]{1,3}\]: )?([A-Z0-9_]{1,48})\(0x[0-9a-f]{1,4}\)(?: Async,)? "
                  r"(?:timeout\. Will cause a leak of a command resource|No done completion)")
_CMD_FAILED = _p(r"([A-Z0-9_]{1,48})\(0x[0-9a-f]{1,4}\) op_mod\(0x[0-9a-f]{1,4}\) failed")
_QPLIB = _p(r"QPLIB: cmdq\[0x[0-9a-f]{1,8}\]=0x([0-9a-f]{1,4}) status 0x([0-9a-f]{1,4})\s*$")
_POWER = _p(r"Detected insufficient power on the PCIe slot \(([0-9]{1,4})W\)")
_BANDWIDTH = lazy_compile(rf"[0-9]{{1,5}}\.[0-9]{{3}} Gb/s available PCIe bandwidth, limited by ([0-9.]{{1,5}} GT/s"
                          rf"(?: PCIe)?) x([0-9]{{1,2}}) link at ({BUS_ID}) ", re.ASCII | re.IGNORECASE)
# The driver core's "<driver>: probe of <device> failed with error <n>" (the device: a PCI function, or an auxiliary
# device such as "mlx5_core.rdma.0", which names no PCI function), and 6.10+'s body "probe with driver <driver> failed"
_CORE_PROBE = lazy_compile(rf"({'|'.join(NIC_DRIVERS)}): probe of ((?i:{BUS_ID})|[a-z0-9_]{{1,32}}\.[a-z0-9_]{{1,32}}"
                           r"\.[0-9]{1,4}) failed with error (-?[0-9]{1,6})\s*$", re.ASCII)
_PROBE_WITH = _p(rf"probe with driver (?:{'|'.join(NIC_DRIVERS)}) failed with error (-?[0-9]{{1,6}})\s*$")
# mlx5's own: a load that failed (at probe, or the reload after a PCI error recovery: "mlx5_pci_resume: …"), or the
# capability step that made it fail
_MLX5_LOAD = _p(r"(?:[a-z0-9_]{1,48}: )?(mlx5_(?:load_one|init_one)) failed with error code:? (-?[0-9]{1,6})\s*$")
_MLX5_CAPS = _p(r"(handle_hca_cap(?:_[a-z0-9]{1,16})?) failed\s*$")
_FW_RESET = _p(r"(?:Firmware (fatal|non-fatal) reset event(?: received|, )|(Fatal|Non-fatal) firmware reset event, )")


def _errno(digits: str) -> int:
    return bounded_int(digits.lstrip("-"), "errno", 6)


def nic_event(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """The NIC event one kernel message reports, or None. `message` starts with one of NIC_PREFIXES (checked here
    again); raises MalformedRecord for a number no driver prints."""
    prefix = _PREFIX.match(message)
    if prefix is None:
        core = _CORE_PROBE.match(message)
        if core is None:
            return None
        device = core[2]
        return KernelEvent(vendor=None, kind="nic_probe_failed", message=message, timestamp_seconds=seconds,
                           pci_bus_id=normalize_pci_bus_id(device) if ":" in device else None,
                           decoded=None if ":" in device else device, detail="probe", code=_errno(core[3]))
    device, name = prefix[2], prefix[3]
    bus_id = normalize_pci_bus_id(device) if ":" in device else None
    body = message[prefix.end():]

    def event(kind: str, **fields) -> KernelEvent:
        return KernelEvent(vendor=None, kind=kind, message=message, pci_bus_id=bus_id, timestamp_seconds=seconds,
                           decoded=name, **fields)

    if match := _PORT_STATE.match(body):
        return event("nic_port_state", code=bounded_int(match[1], "port", 3), detail=match[2])
    if _LINK_DOWN.match(body):
        return event("nic_link_down")
    if match := _LINK_UP.match(body):
        speed = (bounded_int(match[1], "Gbps", 6) * 1000 if match[1]
                 else bounded_int(match[2], "Mbps", 9) if match[2] else None)
        return event("nic_link_up", count=speed)
    if match := _MODULE.match(body):
        return event(f"nic_module_{match[2]}", code=bounded_int(match[1], "module", 3))
    if match := _MODULE_ERROR.match(body):
        return event("nic_module_error", code=bounded_int(match[1], "module", 3), detail=match[2])
    if _HEALTH_MISS.match(body):
        return event("nic_health_compromised")
    if match := _HEALTH_SYNDROME.match(body):
        return event("nic_health_syndrome", code=bounded_int(match[2], "severity", 2), detail=match[1])
    if _PCI_UNAVAILABLE.match(body):
        return event("nic_pci_unavailable")
    if match := _CMD_TIMEOUT.match(body):
        return event("nic_command_timeout", detail=match[1])
    if match := _CMD_FAILED.match(body):
        return event("nic_command_failed", detail=match[1])
    if match := _QPLIB.match(body):
        return event("nic_command_failed", detail=f"QPLIB opcode 0x{match[1]} status 0x{match[2]}")
    if match := _POWER.match(body):
        return event("nic_pcie_power_insufficient", count=bounded_int(match[1], "watts", 4))
    if match := _BANDWIDTH.match(body):
        return event("nic_pcie_bandwidth_limited", detail=f"{match[1]} x{match[2]} at {normalize_pci_bus_id(match[3])}")
    if match := _FW_RESET.match(body):
        word = (match[1] or match[2]).lower()
        return event("nic_firmware_reset", detail="fatal" if word == "fatal" else "nonfatal")
    if match := _PROBE_WITH.match(body):
        return event("nic_probe_failed", detail="probe", code=_errno(match[1]))
    if prefix[1] == "mlx5_core":
        if match := _MLX5_LOAD.match(body):
            return event("nic_probe_failed", detail=match[1], code=_errno(match[2]))
        if match := _MLX5_CAPS.match(body):
            return event("nic_probe_failed", detail=match[1])
    return None


def unrecognised(message: str, seconds: Optional[float]) -> Optional[KernelEvent]:
    """A NIC driver's record that no rule of nic_event names, as a "nic_driver_error" event; events.py calls it only
    for a record at the error level or worse by its own level (issue 32, item 7), and bounds how many it keeps."""
    prefix = _PREFIX.match(message)
    if prefix is None and not message.startswith(tuple(f"{driver}: " for driver in NIC_DRIVERS)):
        return None
    device = prefix[2] if prefix is not None else None
    return KernelEvent(vendor=None, kind="nic_driver_error", message=message, timestamp_seconds=seconds,
                       pci_bus_id=normalize_pci_bus_id(device) if device and ":" in device else None,
                       decoded=prefix[3] if prefix is not None else None)


# The record kind's registration (gpudiag/probe/kernel_log/index.py lists this module; events.py reads these names):
# the prefixes a record must start with, the kinds it yields, the parser, and the KernelLogInfo list they are kept in
# (apart from the GPU events, which the GPU checks read), and the reader of an error-level record no rule names.
PREFIXES = NIC_PREFIXES
EVENT_KINDS = NIC_EVENT_KINDS
parse = nic_event
KEPT_IN = "nic_events"
UNRECOGNISED = unrecognised
