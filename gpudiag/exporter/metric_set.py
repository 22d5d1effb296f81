"""A set of metrics under construction, written straight to the Prometheus text format (0.0.4).

A value of None adds nothing: an unsupported reading has no series, never a 0 (docs/architecture.md). A family with no
samples is not emitted at all.

Why not prometheus_client's metric families: they hold a dict of labels per sample and render by sorting each
one. At 64 GPUs (12,000+ series) that cost ~65 ms of CPU and ~10 MiB of short-lived objects per collection,
which kept the exporter's RSS above its 60 MiB budget (bench/exporter_fake.py). Each sample here is formatted
once, as it is added, into the line that will be sent; labels keep the catalog's order (gpu, uuid, pci_bus_id
first). The output is checked by prometheus_client's parser and by `promtool check metrics` in the tests.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

from gpudiag.exporter.catalog import MetricSpec
from gpudiag.model import DeviceSnapshot

Number = Union[int, float, bool]


class MetricSet:
    def __init__(self) -> None:
        self._lines: dict[str, list[str]] = {}  # metric name → its sample lines, in the order added
        self._specs: dict[str, MetricSpec] = {}

    def add(self, spec: MetricSpec, labels: Sequence[str], value: Optional[Number]) -> None:
        if value is None:
            return
        if len(labels) != len(spec.labels):
            raise ValueError(f"{spec.name}: {len(labels)} label values for labels {spec.labels}")
        lines = self._lines.get(spec.name)
        if lines is None:
            lines = self._lines[spec.name] = []
            self._specs[spec.name] = spec
        if labels:
            pairs = ",".join(f'{name}="{_escape(text)}"' for name, text in zip(spec.labels, labels))
            lines.append(f"{spec.name}{{{pairs}}} {_number(value)}\n")
        else:
            lines.append(f"{spec.name} {_number(value)}\n")

    def names(self) -> list[str]:
        return list(self._lines)

    def exposition(self) -> bytes:
        out: list[str] = []
        for name, lines in self._lines.items():
            spec = self._specs[name]
            out.append(f"# HELP {name} {spec.help.replace(chr(92), chr(92) * 2)}\n# TYPE {name} {spec.kind}\n")
            out.extend(lines)
        return "".join(out).encode("utf-8")


def _escape(text: str) -> str:
    if "\\" in text or '"' in text or "\n" in text:
        return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return text


def _number(value: Number) -> str:
    if isinstance(value, (bool, int)):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def gpu_labels(device: DeviceSnapshot) -> tuple[str, str, str]:
    return (str(device.index), device.uuid or "", device.pci_bus_id or "")


NO_GPU = ("", "", "")


def flag(value: Optional[bool]) -> Optional[int]:
    """True/False → 1/0; None (not supported) stays None so that it produces no series."""
    return None if value is None else int(value)
