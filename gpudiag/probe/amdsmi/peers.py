"""How two AMD GPUs reach each other, from amdsmi's topology calls (docs/vendor-api.md §4)."""

from __future__ import annotations

from typing import Any, Optional

from gpudiag.model import DeviceSnapshot, PeerLink
from gpudiag.probe.amdsmi.calls import AmdsmiCaller, get, integer

# amdsmi_topo_get_link_type()["type"] is a raw int: PCIe=1, XGMI=2 in every wrapper since 6.2, whichever enum
# (io-link type before 7.0, amdsmi_link_type_t in 7.0) it comes from; the AmdSmiLinkType members themselves moved
# between versions, so they are not used here (docs/vendor-api.md §12).
LINK_TYPE_PCIE = 1
LINK_TYPE_XGMI = 2


def probe_pair(
    call: AmdsmiCaller, first: DeviceSnapshot, second: DeviceSnapshot, first_handle: Any, second_handle: Any
) -> PeerLink:
    link_type = integer(get(call("amdsmi_topo_get_link_type", first_handle, second_handle), "type"))
    accessible = call("amdsmi_is_P2P_accessible", first_handle, second_handle)
    p2p = None if not isinstance(accessible, bool) else ("ok" if accessible else "not_supported")
    capability = get(call("amdsmi_topo_get_p2p_status", first_handle, second_handle), "cap")
    atomics = get(capability, "is_iolink_atomics_64bit")
    return PeerLink(
        gpu_a=first.index,
        gpu_b=second.index,
        path=_path(link_type, first, second),
        p2p_read=p2p,
        p2p_write=p2p,
        p2p_atomics=None if atomics is None else ("ok" if atomics else "not_supported"),
    )


def _path(link_type: Optional[int], first: DeviceSnapshot, second: DeviceSnapshot) -> Optional[str]:
    if link_type == LINK_TYPE_XGMI:
        return "xgmi"
    if link_type == LINK_TYPE_PCIE and first.numa_node is not None and second.numa_node is not None:
        # amdsmi gives hops, not the bridge layout; the NUMA nodes tell NVML's "node" from "sys" apart.
        return "node" if first.numa_node == second.numa_node else "sys"
    return None
