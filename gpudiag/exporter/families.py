"""A set of metric families under construction: one family per catalog entry, created on its first sample.

A value of None adds nothing: an unsupported reading has no series, never a 0 (DESIGN.md). A family with no
samples is not emitted at all.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpudiag.exporter.catalog import MetricSpec
from gpudiag.model import DeviceSnapshot

Number = Union[int, float, bool]


class FamilySet:
    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(self, spec: MetricSpec, labels: Sequence[str], value: Optional[Number]) -> None:
        if value is None:
            return
        if len(labels) != len(spec.labels):
            raise ValueError(f"{spec.name}: {len(labels)} label values for labels {spec.labels}")
        family = self._families.get(spec.name)
        if family is None:
            maker = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
            family = self._families[spec.name] = maker(spec.name, spec.help, labels=spec.labels)
        family.add_metric(list(labels), float(value))

    def families(self) -> Iterable[Metric]:
        return self._families.values()


def gpu_labels(device: DeviceSnapshot) -> tuple[str, str, str]:
    return (str(device.index), device.uuid or "", device.pci_bus_id or "")


NO_GPU = ("", "", "")


def flag(value: Optional[bool]) -> Optional[int]:
    """True/False → 1/0; None (not supported) stays None so that it produces no series."""
    return None if value is None else int(value)


class _Families:
    """The one-method "registry" generate_latest needs."""

    def __init__(self, fs: FamilySet):
        self._fs = fs

    def collect(self) -> Iterable[Metric]:
        return self._fs.families()


def exposition(fs: FamilySet) -> bytes:
    """The Prometheus text format (0.0.4) of the set."""
    return generate_latest(_Families(fs))  # type: ignore[arg-type] - any object with collect() will do
