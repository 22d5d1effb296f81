"""The settings of the `network` family (its profile keys): which RDMA NICs serve the GPUs, how many, at what rate, the
error-counter and flap thresholds, and the GPU–NIC pairing. Each default is a figure a public source gives (cited
beside it) or says why it was chosen.

A family's own settings module (gpudiag/expect/__init__.py finds it by its name, <family>_settings.py, as SETTINGS):
`NetworkSettings` is flat and typed as Expectations is, so that a profile or `-p KEY=VALUE` sets any of them by name,
and Expectations carries it (`expect.of(NetworkSettings)`); `settings_of(expect)` is how the checks get them.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any, Optional

from gpudiag.expect.errors import ExpectationError
from gpudiag.model.records import dataclass

LINK_LAYERS = ("InfiniBand", "Ethernet")
# How a GPU must sit relative to its NIC: below the same PCIe switch (nvidia-smi topo -m: PIX or PXB), or at least
# on the same NUMA node (PIX, PXB, PHB or NODE; not SYS).
AFFINITIES = ("switch", "numa")
# Which GPUDirect RDMA path the node must offer on NVIDIA: any of them, the peer-memory module (nvidia_peermem, or
# the legacy nv_peer_mem), or dma-buf (open kernel modules, Linux >= 5.12).
GPUDIRECT_PATHS = ("any", "peermem", "dmabuf")
_PCI_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
_PAIR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]=[A-Za-z0-9_.-]{1,64}$")
_FIRMWARE = re.compile(r"^[A-Za-z0-9_.-]{1,64}=[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class NetworkSettings:
    """What the node's GPU fabric NICs should be."""

    # --- which NICs, how many --------------------------------------------------------------------------------
    # The PCI IDs ("15b3:1021", vendor:device, lowercase hex) of the NICs that carry the GPUs' traffic; the node's
    # other RDMA devices (a front-end BlueField, a management NIC) are listed but not judged. Empty: every RDMA
    # device is a fabric NIC.
    nic_pci_ids: tuple[str, ...] = ()
    # At least this many fabric NICs must be present (a node with fewer fails, and a node without RDMA devices fails
    # instead of skipping). None: the count is not judged. GPUd expects 8 ports at 400 Gb/s on H100, H200, B200 and
    # GB200 nodes (components/accelerator/nvidia/infiniband threshold_default.go); Azure's health checks expect
    # `check_hw_ib 400 mlx5_ibN:1` for N = 0…7 on ND H100 v5 and ND MI300X v5 (tests/fixtures/rdma/azure-nd-v5-nics).
    expected_nics: Optional[int] = None
    # The ports of each fabric NIC that must be ACTIVE / LinkUp. Empty: every port the NIC has.
    expected_nic_ports: tuple[int, ...] = ()
    # The link layer every fabric port must run. None: not judged.
    expected_nic_link_layer: Optional[str] = None
    # The rate every ACTIVE fabric port must train at, Gb/s. None: the fastest port of the same NIC model on this
    # node (a 400G port beside seven at 400G that trained at 200G still fails).
    expected_nic_rate_gbps: Optional[float] = None
    # Firmware a NIC model must run, as "BOARD=VERSION" entries: the board is the PSID (board_id, "MT_0000000838")
    # or, where the driver has none, the PCI ID ("14e4:1760"). Empty: only consistency across the node is judged.
    expected_nic_firmware: tuple[str, ...] = ()

    # --- error counters ----------------------------------------------------------------------------------------
    # symbol_error (IBTA PortCounters SymbolErrorCounter: bit errors on the wire before FEC): the InfiniBand
    # specification's BER bound of 1e-12 is "120 errors per hour" (NVSentinel's NIC health monitor design,
    # docs/nic-health-monitor/link-counter-detection.md §2.4.2, citing the IBTA specification and Oracle's
    # InfiniBand documentation): above it warns. NVSentinel's default degradation threshold is "> 10/sec" (same
    # document, Appendix A): above it fails.
    nic_symbol_error_warn_per_hour: float = 120.0
    nic_symbol_error_fail_per_second: float = 10.0
    # link_error_recovery (the link retrained without going down): NVSentinel's default "> 5/min" (Appendix A).
    nic_link_error_recovery_warn_per_minute: float = 5.0
    # port_rcv_errors (malformed packets received): NVSentinel's default "> 10/sec" (Appendix A).
    nic_port_rcv_errors_warn_per_second: float = 10.0
    # port_xmit_discards (packets dropped for congestion or a port going down): NVSentinel's default "> 100/sec".
    nic_port_xmit_discards_warn_per_second: float = 100.0
    # link_downed, excessive_buffer_overrun_errors, local_link_integrity_errors and the retry-exhausted hw_counters
    # have no threshold: NVSentinel treats any increase as fatal ("Delta > 0", Appendix A), and so does gpudiag when
    # it sees one between two collections; counted since the counters were cleared, a non-zero one warns.

    # --- flaps (the kernel log's link-down records) ------------------------------------------------------------
    # Judge the link-down records of this many seconds before the snapshot. GPUd calls a port flapping after "at
    # least 3 flap events (in the last 12 hours)" (components/accelerator/nvidia/infiniband/store/scan_flaps.go);
    # Azure's check_ib_link_flapping looks back 24 hours for 5 (docs/network.md).
    nic_flap_window_seconds: float = 12 * 3600.0
    # Link-downs of one NIC within the window that fail (GPUd's 3); a single one warns.
    nic_flap_fail_count: int = 3

    # --- GPU and NIC ----------------------------------------------------------------------------------------
    # How each GPU must sit relative to a fabric NIC: "switch" (below the same PCIe switch, as on HGX boards: one
    # ConnectX-7 per GPU, nccl-tests issue 256), "numa" (same NUMA node). None: the best any GPU of the node has.
    gpu_nic_affinity: Optional[str] = None
    # Explicit pairs, "GPU_BUS_ID=NIC" ("0000:18:00.0=mlx5_0"), where a site knows them (the DGX H100 user guide's
    # Table 6 names them for that system). A paired GPU must have its NIC below its PCIe switch.
    gpu_nic_pairs: tuple[str, ...] = ()
    # The GPUDirect RDMA path NVIDIA GPUs must have: "any", "peermem" (nvidia_peermem / nv_peer_mem) or "dmabuf".
    gpudirect_path: str = "any"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ExpectationError(f.name, f"must not be negative, got {value!r}")
        for name in ("expected_nic_rate_gbps", "nic_flap_window_seconds", "nic_flap_fail_count"):
            if getattr(self, name) == 0:
                raise ExpectationError(name, "must be above 0")
        for pci_id in self.nic_pci_ids:
            if not _PCI_ID.match(pci_id):
                raise ExpectationError("nic_pci_ids", f"{pci_id!r} is not a PCI ID (vendor:device, e.g. 15b3:1021)")
        for port in self.expected_nic_ports:
            if not 1 <= port <= 255:
                raise ExpectationError("expected_nic_ports", f"{port} is not a port number (1-255)")
        for name, value, choices in (("expected_nic_link_layer", self.expected_nic_link_layer, LINK_LAYERS),
                                     ("gpu_nic_affinity", self.gpu_nic_affinity, AFFINITIES),
                                     ("gpudirect_path", self.gpudirect_path, GPUDIRECT_PATHS)):
            if value is not None and value not in choices:
                raise ExpectationError(name, f"{value!r} is not one of {', '.join(choices)}")
        for pair in self.gpu_nic_pairs:
            if not _PAIR.match(pair):
                raise ExpectationError("gpu_nic_pairs", f"{pair!r} is not GPU_BUS_ID=NIC (0000:18:00.0=mlx5_0)")
        for entry in self.expected_nic_firmware:
            if not _FIRMWARE.match(entry):
                raise ExpectationError("expected_nic_firmware", f"{entry!r} is not BOARD=VERSION "
                                                                f"(MT_0000000838=28.41.1000)")

    def pairs(self) -> dict[str, str]:
        """GPU bus ID → NIC name."""
        return dict(pair.split("=", 1) for pair in self.gpu_nic_pairs)

    def firmware(self) -> dict[str, str]:
        """Board (PSID or PCI ID) → the firmware version it must run."""
        return dict(entry.split("=", 1) for entry in self.expected_nic_firmware)


SETTINGS = NetworkSettings  # what gpudiag/expect/__init__.py looks for
# A valid value of each key whose type alone gives none (TOML text, the value read), for tests/expect/test_profile.py,
# which reads every key from a profile and from -p.
SAMPLES = {
    "nic_pci_ids": ('["15b3:1021"]', ("15b3:1021",)),
    "expected_nic_link_layer": ('"InfiniBand"', "InfiniBand"),
    "expected_nic_firmware": ('["MT_0000000838=28.41.1000"]', ("MT_0000000838=28.41.1000",)),
    "gpu_nic_affinity": ('"switch"', "switch"),
    "gpu_nic_pairs": ('["0000:18:00.0=mlx5_0"]', ("0000:18:00.0=mlx5_0",)),
    "gpudirect_path": ('"peermem"', "peermem"),
    "nic_flap_fail_count": ("5", 5),
}


def settings_of(expect: Any) -> NetworkSettings:
    """The family's settings as an Expectations carries them (a NetworkSettings given as it is: the tests' way)."""
    return expect if isinstance(expect, NetworkSettings) else expect.of(NetworkSettings)
