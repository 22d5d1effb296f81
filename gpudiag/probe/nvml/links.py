"""NVLink links of one GPU, and how two GPUs reach each other (PCIe topology, NVLink, P2P support)."""

from __future__ import annotations

from typing import Any, Optional

from gpudiag.model import DeviceSnapshot, GpuLink, PeerLink, normalize_pci_bus_id
from gpudiag.probe.nvml.call import NvmlCall
from gpudiag.probe.nvml.codes import NO_SUCH_LINK

# nvmlIntNvLinkDeviceType_t
REMOTE_DEVICE_TYPES = {0x00: "gpu", 0x01: "npu", 0x02: "switch", 0xFF: "unknown"}

# nvmlNvLinkErrorCounter_t constants → GpuLink.error_counters keys. Read with nvmlDeviceGetNvLinkErrorCounter: the
# field-ID alternatives are split (per-link IDs stop at link 11, Hopper has 18 links) or ambiguous
# (NVML_FI_DEV_NVLINK_ERROR_DL_CRC does not say flit or data).
ERROR_COUNTERS = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
)
# Not read: NVML_NVLINK_ERROR_DL_ECC_DATA counts errors the link's ECC corrected (healthy H200 links in the lab
# showed 11-12 each), it is not among the counters DCGM's NVLink health watch judges (replay, recovery, CRC flit,
# CRC data), and each counter is a ~1 ms driver round trip per link: 18 ms per Hopper GPU.

# nvmlGpuTopologyLevel_t → PeerLink.path (the names `nvidia-smi topo -m` prints in lower case).
TOPOLOGY_PATHS = {0: "internal", 10: "pix", 20: "pxb", 30: "phb", 40: "node", 50: "sys"}

# nvmlGpuP2PStatus_t
P2P_STATUSES = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}
# nvmlGpuP2PCapsIndex_t values, spelled as numbers: pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,) (a trailing
# comma in pynvml.py, docs/vendor-api.md §4), which ctypes refuses to pass.
P2P_CAPS = (("p2p_read", 0), ("p2p_write", 1), ("p2p_nvlink", 2), ("p2p_atomics", 3))



# The far end of an NVLink that NVML cannot name: on the lab's HGX H200s every link ends at an NVSwitch that
# the VM does not see, and nvmlDeviceGetNvLinkRemotePciInfo answers domain/bus/device all ones
# ("FFFFFFFF:FF:FF.0", tests/fixtures/h200x2/nvml-survey.json).
_UNNAMED_REMOTE = "ffffffff:ff:ff.0"


def pci_bus_id(raw: Optional[str]) -> Optional[str]:
    """NVML's `00000000:3B:00.0` → `0000:3b:00.0`; None for an empty, malformed or all-ones ID."""
    try:
        normalized = normalize_pci_bus_id(raw) if raw else None
    except ValueError:
        return None
    return None if normalized == _UNNAMED_REMOTE else normalized


def read_nvlinks(call: NvmlCall, handle: Any, link_count: Optional[int], error_counters: bool = True) -> list[GpuLink]:
    """Every NVLink of the GPU. `link_count` (field NVML_FI_DEV_NVLINK_LINK_COUNT) bounds the walk when the driver
    reports it; otherwise the walk runs up to NVML_NVLINK_MAX_LINKS (36 in pynvml 13, 18 in 12) and stops at the
    first index the device rejects, so a GPU without NVLink costs one call and yields no links. The error counters
    are most of the cost (about 1 ms a counter and link on the H200) and are skipped when nothing will judge them."""
    limit = call.nvml.NVML_NVLINK_MAX_LINKS if link_count is None else min(link_count, call.nvml.NVML_NVLINK_MAX_LINKS)
    links: list[GpuLink] = []
    for index in range(limit):
        state, code, message = call.attempt("nvmlDeviceGetNvLinkState", handle, index)
        if code in NO_SUCH_LINK:
            if link_count is None:
                break
            continue  # counted by the driver but not described: nothing to report for it
        link = GpuLink(index=index, kind="nvlink")
        if code is not None:
            call.record(f"nvml.nvmlDeviceGetNvLinkState[link {index}]", code, message)
        else:
            link.up = state == call.nvml.NVML_FEATURE_ENABLED
        if link.up:  # a link that is down has no far end to describe
            _read_far_end(call, handle, link)
        if error_counters:
            _read_error_counters(call, handle, link)
        links.append(link)
    return links


def _read_far_end(call: NvmlCall, handle: Any, link: GpuLink) -> None:
    link.version = call("nvmlDeviceGetNvLinkVersion", handle, link.index)
    remote = call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link.index)  # calls the _v2 symbol
    if remote is not None:
        link.remote_pci_bus_id = pci_bus_id(remote.busId)
    remote_type = call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link.index)
    if remote_type is not None:
        link.remote_device_type = REMOTE_DEVICE_TYPES.get(remote_type, "unknown")


def _read_error_counters(call: NvmlCall, handle: Any, link: GpuLink) -> None:
    for name, constant in ERROR_COUNTERS:
        value = call("nvmlDeviceGetNvLinkErrorCounter", handle, link.index, getattr(call.nvml, constant))
        if value is not None:
            link.error_counters[name] = int(value)


def probe_pair(call: NvmlCall, handle_a: Any, handle_b: Any, a: DeviceSnapshot, b: DeviceSnapshot) -> PeerLink:
    peer = PeerLink(gpu_a=a.index, gpu_b=b.index)
    level = call("nvmlDeviceGetTopologyCommonAncestor", handle_a, handle_b)
    if level is not None:
        peer.path = TOPOLOGY_PATHS.get(level)
    for attr, index in P2P_CAPS:
        status = call("nvmlDeviceGetP2PStatus", handle_a, handle_b, index)
        if status is not None:
            setattr(peer, attr, P2P_STATUSES.get(status, "unknown"))
    count = nvlinks_between(a, b)
    if count:
        peer.path = "nvlink"
        peer.link_count = count
    return peer


def nvlinks_between(a: DeviceSnapshot, b: DeviceSnapshot) -> int:
    """Active NVLinks joining two GPUs, from the links already probed (no NVML call).

    Bridged GPUs (H100/H200 NVL) have links whose far end is the other GPU. On NVSwitch systems (HGX) every link
    ends on a switch and any two GPUs reach each other through the fabric over all their active links, which
    `nvidia-smi topo -m` shows as NV<n>; the lesser of the two GPUs' active switch links is what the pair can use.
    """
    direct = sum(1 for link in a.links if link.up and link.remote_pci_bus_id is not None
                 and link.remote_pci_bus_id == b.pci_bus_id)
    if direct:
        return direct
    return min(_active_switch_links(a), _active_switch_links(b))


def _active_switch_links(device: DeviceSnapshot) -> int:
    return sum(1 for link in device.links if link.up and link.remote_device_type == "switch")
