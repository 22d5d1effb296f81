"""NVLink and GPU-pair C functions of the fake libnvidia-ml (see fake_nvml_lib)."""

from __future__ import annotations

from typing import Any, Union

import pynvml

from tests.support.fakes.fake_nvml import FakeGpu, FakeNvLink
from tests.support.fakes.fake_nvml_lib import (INVALID_ARGUMENT, NOT_SUPPORTED, FakeNvmlLib, c_symbol, fill_pci, put,
                                               value_of)


def _link(gpu: FakeGpu, link: Any) -> Union[int, FakeNvLink]:
    """The link, or the code for an index the GPU lacks: NOT_SUPPORTED without NVLink, INVALID_ARGUMENT past the
    last link (docs/vendor-api.md §4 leaves which one real NVML gives UNVERIFIED; the backend treats both alike)."""
    if not gpu.nvlinks:
        return NOT_SUPPORTED
    index = value_of(link)
    return gpu.nvlinks[index] if 0 <= index < len(gpu.nvlinks) else INVALID_ARGUMENT


@c_symbol()
def nvmlDeviceGetNvLinkState(lib: FakeNvmlLib, gpu: FakeGpu, link: Any, out: Any) -> int:
    found = _link(gpu, link)
    return found if isinstance(found, int) else put(out, int(found.up))


@c_symbol()
def nvmlDeviceGetNvLinkVersion(lib: FakeNvmlLib, gpu: FakeGpu, link: Any, out: Any) -> int:
    found = _link(gpu, link)
    return found if isinstance(found, int) else put(out, found.version)


@c_symbol()
def nvmlDeviceGetNvLinkRemotePciInfo_v2(lib: FakeNvmlLib, gpu: FakeGpu, link: Any, out: Any) -> int:
    found = _link(gpu, link)
    return found if isinstance(found, int) else fill_pci(out, found.remote_bus_id)


@c_symbol()
def nvmlDeviceGetNvLinkRemoteDeviceType(lib: FakeNvmlLib, gpu: FakeGpu, link: Any, out: Any) -> int:
    found = _link(gpu, link)
    return found if isinstance(found, int) else put(out, found.remote_type)


_NVLINK_COUNTERS = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
    pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: "ecc_data",
}


@c_symbol()
def nvmlDeviceGetNvLinkErrorCounter(lib: FakeNvmlLib, gpu: FakeGpu, link: Any, counter: Any, out: Any) -> int:
    found = _link(gpu, link)
    name = _NVLINK_COUNTERS.get(value_of(counter))
    if isinstance(found, int) or name is None:
        return found if isinstance(found, int) else INVALID_ARGUMENT
    return put(out, found.errors.get(name, 0))


# -- GPU pairs ----------------------------------------------------------------------------------------------------


@c_symbol("pair")
def nvmlDeviceGetTopologyCommonAncestor(lib: FakeNvmlLib, a: FakeGpu, b: FakeGpu, out: Any) -> int:
    return put(out, lib.node.pair_topology(lib.index(a), lib.index(b)))


@c_symbol("pair")
def nvmlDeviceGetP2PStatus(lib: FakeNvmlLib, a: FakeGpu, b: FakeGpu, caps_index: Any, out: Any) -> int:
    index = value_of(caps_index)
    if not 0 <= index <= pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN:
        return INVALID_ARGUMENT
    return put(out, lib.node.p2p_status(lib.index(a), lib.index(b), index))
