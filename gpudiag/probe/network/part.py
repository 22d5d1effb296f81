"""The network family's probe part: the node's RDMA NICs (probe/network/rdma.py), found by name (probe/collector.py).

A Collector that reads the NICs again every collection (`gpudiag serve`) carries two things from one reading to the
next, in its CollectOptions' part_state: the sysfs paths that refused a read (EINVAL: a restricted PF's counters;
mlx5 logs every try, so they are not asked again) and the last counters, for the rates since then (history.py).
A one-shot `gpudiag check` starts with neither and judges the counts since the counters were cleared.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from gpudiag.model import ErrorKind, NodeSnapshot, ProbeError
from gpudiag.model.network import NetworkInfo


class _Carried:
    """One Collector's skip set and counter history. A reading that outlived its deadline may still be running when
    the next one starts: the lock keeps the two from interleaving their updates."""

    def __init__(self) -> None:
        from gpudiag.probe.network.history import CounterHistory

        self.lock = threading.Lock()
        self.skip: set[str] = set()
        self.history = CounterHistory()


def collect(snapshot: NodeSnapshot, options, until: float) -> NetworkInfo:
    from gpudiag.probe.network import rdma  # here: a process that only stores the part does not read NICs

    carried = options.part_state.setdefault("network", _Carried())
    if not carried.lock.acquire(timeout=max(0.0, until - time.monotonic())):
        raise TimeoutError("an earlier reading of the RDMA NICs is still running")
    try:
        return carried.history.carry(rdma.read_network(options.root, until, snapshot.pci_gpus, carried.skip,
                                                      options.state_dir))
    finally:
        carried.lock.release()


def store(snapshot: NodeSnapshot, value: Optional[NetworkInfo], error: Optional[ProbeError]) -> None:
    """Fail closed: a part that raised or missed its deadline leaves an unreadable NetworkInfo naming why, so that the
    checks say unknown, never "no NICs"."""
    if value is not None:
        snapshot.network = value
        return
    error = error or ProbeError(source="network", kind=ErrorKind.ERROR, message="the RDMA NICs were not read")
    snapshot.network = NetworkInfo(readable=False, errors=[error])
