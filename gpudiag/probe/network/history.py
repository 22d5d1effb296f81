"""The previous collection's NIC counters, carried into the next reading so that the checks judge rates since then.

A collector that reads the NICs again (`gpudiag serve`, the exporter) keeps a `CounterHistory`; each fresh
NetworkInfo passes through `carry`, which attaches the last reading (and how long ago it was taken) as
`NetworkInfo.previous` and remembers the new one. A one-shot `gpudiag check` has no previous reading: its checks
judge the counts since the counters were cleared.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from gpudiag.model.network import CounterReading, NetworkInfo, port_key

MAX_PORTS = 2048  # the probe's caps: 128 devices x 16 ports


def counters_of(info: NetworkInfo) -> dict[str, dict[str, int]]:
    """Every port's counters/ and hw_counters/ values (hw_counters prefixed "hw:"; a RoCE port's netdev
    carrier_changes as "netdev:carrier_changes"), by "<device>/<port>"."""
    ports: dict[str, dict[str, int]] = {}
    for device in info.devices:
        for port in device.ports:
            if len(ports) >= MAX_PORTS:
                return ports
            values = dict(port.counters)
            values.update({f"hw:{name}": value for name, value in port.hw_counters.items()})
            if port.netdev is not None and port.netdev.carrier_changes is not None:
                values["netdev:carrier_changes"] = port.netdev.carrier_changes
            ports[port_key(device.name, port.number)] = values
    return ports


class CounterHistory:
    """The last reading of one collector. `clock` is time.monotonic (a wall clock that steps would make rates lie)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: Optional[tuple[float, dict[str, dict[str, int]]]] = None

    def carry(self, info: NetworkInfo) -> NetworkInfo:
        """Attach the previous reading to `info` (unreadable readings are neither given one nor remembered)."""
        if not info.readable:
            return info
        now = self._clock()
        if self._last is not None and now > self._last[0]:
            info.previous = CounterReading(seconds_before=now - self._last[0], ports=self._last[1])
        self._last = (now, counters_of(info))
        return info
