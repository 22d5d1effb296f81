"""Plain data shared by every layer: what the probes saw and what the checks concluded.

Conventions:
- Units live in field names (`_celsius`, `_watts`, `_bytes`, `_mhz`) and are converted once, in the probe.
- `None` means "not supported or not read"; it is never a stand-in for zero. Why a value is missing is in
  `errors` (a probe error) or simply absent (the device does not support it).
- PCI bus IDs are lowercase with a 4-digit domain and a function: `0000:3b:00.0`.
- Everything here round-trips through JSON (`to_dict` / `from_dict`), which is how snapshots are recorded and
  replayed.

One module per concern (common vocabulary, one GPU, the node, load-test results, check results, JSON); import
from `gpudiag.model` itself. The load tests' types (active.py) are imported when first asked for: a level-1
`gpudiag check` has none to define (issue 36, item 9).
"""

from gpudiag.model.common import (
    REPORT_SCHEMA_VERSION,
    SNAPSHOT_SCHEMA_VERSION,
    STATUS_SEVERITY,
    ErrorKind,
    ProbeError,
    Status,
    Vendor,
    normalize_pci_bus_id,
)
from gpudiag.model.device import (
    THROTTLE_REASONS,
    THROTTLE_TIME_REASONS,
    ClockInfo,
    DeviceSnapshot,
    DriverHealth,
    EccInfo,
    FabricInfo,
    GpuLink,
    GpuProcess,
    MemoryHealth,
    MemoryUsage,
    PcieInfo,
    PeerLink,
    PowerInfo,
    TemperatureSensor,
    Utilization,
)
from gpudiag.model.node import (
    BackendInfo,
    BootFault,
    BootHistory,
    CollectorRun,
    HostInfo,
    KernelEvent,
    KernelLogInfo,
    NodeSnapshot,
    PciGpu,
    PcieDpmLevel,
)
from gpudiag.model.network import (
    AcsControl,
    GpuDirectInputs,
    NetDev,
    NetworkInfo,
    PciBridge,
    RdmaDevice,
    RdmaPort,
)
from gpudiag.model.results import CheckResult, DeviceRef
from gpudiag.model.serialize import SchemaError, from_dict, to_dict

# The load tests' types, from gpudiag/model/active.py on first use (module __getattr__, PEP 562).
LOAD_TEST_TYPES = ("ActiveDevice", "ActiveResults", "CopyBandwidth", "ComputeVerification", "HbmBandwidth",
                   "MemtestResult", "PeerBandwidth", "SmMismatch", "StressResult", "TelemetrySample")


def __getattr__(name: str):
    if name in LOAD_TEST_TYPES:
        from gpudiag.model import active

        return getattr(active, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ActiveDevice", "ActiveResults", "CopyBandwidth", "MemtestResult", "PeerBandwidth", "StressResult",
    "HbmBandwidth", "TelemetrySample", "ComputeVerification", "SmMismatch", "REPORT_SCHEMA_VERSION",
    "SNAPSHOT_SCHEMA_VERSION", "STATUS_SEVERITY", "ErrorKind",
    "ProbeError", "Status", "Vendor", "normalize_pci_bus_id", "THROTTLE_REASONS", "THROTTLE_TIME_REASONS",
    "ClockInfo", "DeviceSnapshot", "EccInfo", "GpuLink", "GpuProcess", "MemoryHealth", "MemoryUsage", "PcieInfo",
    "PeerLink", "PowerInfo", "TemperatureSensor", "Utilization", "DriverHealth", "FabricInfo", "BackendInfo",
    "BootFault", "BootHistory", "CollectorRun", "HostInfo", "KernelEvent", "KernelLogInfo", "NodeSnapshot", "PciGpu",
    "PcieDpmLevel",
    "AcsControl", "GpuDirectInputs", "NetDev", "NetworkInfo", "PciBridge", "RdmaDevice", "RdmaPort",
    "CheckResult", "DeviceRef", "SchemaError", "from_dict", "to_dict",
]
