"""The families' metric modules (gpudiag/exporter/metrics_<family>.py), imported by the names index.py lists
(written by tools/gen_registry_index.py). Apart from catalog.py, which they import: the catalog importing them back
was a circle the layering test could not see (issue 34, item 2)."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from gpudiag.exporter import catalog
from gpudiag.exporter.catalog import MetricSpec
from gpudiag.exporter.index import METRIC_MODULES


@functools.lru_cache(maxsize=None)
def family_modules() -> tuple[ModuleType, ...]:
    """The families' metric modules, imported (which defines their metrics), in name order."""
    return tuple(importlib.import_module(name) for name in METRIC_MODULES)


def all_metrics() -> dict[str, MetricSpec]:
    """Every metric gpudiag exports: the core catalog's and every family's."""
    family_modules()
    return catalog.defined()
