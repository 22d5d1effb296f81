"""Golden baselines: what a known-good node looked like, for its siblings (and itself after a repair) to match.

A baseline holds only what should be identical across nodes of one SKU: the GPUs by PCI bus ID with their model,
PCIe capability (what the GPU and its slot support, never the idle-downshifted current speed), NUMA node, NVLink /
XGMI links, VBIOS and firmware, partition modes; the peer paths between GPUs; the driver versions. Serial numbers,
UUIDs, temperatures and counters are left out: they differ between healthy siblings.

The file is JSON (`gpudiag baseline --output FILE`), like the snapshot recordings: a value a node does not report
is `null`, which TOML cannot say, and `null` in a baseline means "not recorded, not compared". It is built from a
snapshot by gpudiag.checks.baseline.baseline_of and compared there (the `baseline.*` checks).
"""

from __future__ import annotations

import json
from dataclasses import field
from pathlib import Path
from typing import Optional

from gpudiag.fileio import BASELINE_MAX_BYTES, PRIVATE, DocumentError, read_json, write_atomically
from gpudiag.model import SchemaError, Vendor, from_dict, normalize_pci_bus_id, to_dict
from gpudiag.model.records import dataclass

BASELINE_KIND = "gpudiag-baseline"
BASELINE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GpuBaseline:
    """One physical GPU. `index` is informative (indexes may shift between boots); GPUs match by bus ID."""

    pci_bus_id: str
    vendor: Vendor
    index: Optional[int] = None
    model: Optional[str] = None
    pcie_max_generation: Optional[int] = None  # the GPU's own capability
    pcie_max_width: Optional[int] = None
    slot_max_generation: Optional[int] = None  # what its slot (upstream port) supports
    slot_max_width: Optional[int] = None
    numa_node: Optional[int] = None
    links_up: Optional[int] = None  # NVLink / XGMI links up; None: the GPU reports no links
    link_remotes: Optional[list[str]] = None  # bus IDs at the far end of the up links, sorted (switch or peer GPU)
    vbios_version: Optional[str] = None
    firmware_versions: dict[str, str] = field(default_factory=dict)
    compute_partition: Optional[str] = None
    memory_partition: Optional[str] = None
    partitions: Optional[int] = None  # logical GPUs it shows as (AMD CPX: 8)
    mig_enabled: Optional[bool] = None


@dataclass(frozen=True)
class PeerBaseline:
    """How two GPUs reach each other, by bus ID (a < b)."""

    pci_bus_id_a: str
    pci_bus_id_b: str
    path: Optional[str] = None  # "nvlink" | "xgmi" | "pix" | … (model.PeerLink.path)
    link_count: Optional[int] = None


@dataclass(frozen=True)
class NodeBaseline:
    """A golden baseline: the values recorded from a node known good, to judge drift against."""
    kind: str = BASELINE_KIND
    schema_version: int = BASELINE_SCHEMA_VERSION
    recorded_from: Optional[str] = None  # hostname, informative
    recorded_at: Optional[str] = None
    gpudiag_version: Optional[str] = None
    driver_versions: dict[str, str] = field(default_factory=dict)  # vendor library name → driver version it reports
    gpus: list[GpuBaseline] = field(default_factory=list)
    peers: list[PeerBaseline] = field(default_factory=list)

    @property
    def vendors(self) -> set[Vendor]:
        return {gpu.vendor for gpu in self.gpus}


class BaselineError(ValueError):
    """The file is not a usable baseline; the message is one line naming the file, the key and the problem."""


def baseline_json(baseline: NodeBaseline) -> str:
    return json.dumps(to_dict(baseline), indent=2) + "\n"


def save_baseline(baseline: NodeBaseline, path: Path) -> None:
    write_atomically(Path(path), baseline_json(baseline), PRIVATE)


def load_baseline(path: Path) -> NodeBaseline:
    path = Path(path)
    try:
        data = read_json(path, BASELINE_MAX_BYTES)
    except DocumentError as exc:
        raise BaselineError(f"baseline {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != BASELINE_KIND:
        raise BaselineError(f"baseline {path}: kind: not a gpudiag baseline (expected \"kind\": \"{BASELINE_KIND}\"; "
                            f"write one with `gpudiag baseline --output FILE`)")
    if data.get("schema_version") != BASELINE_SCHEMA_VERSION:
        raise BaselineError(f"baseline {path}: schema_version: {data.get('schema_version')!r} is not supported (this "
                            f"gpudiag reads {BASELINE_SCHEMA_VERSION})")
    try:
        baseline = from_dict(NodeBaseline, data)
    except (SchemaError, TypeError, ValueError) as exc:
        raise BaselineError(f"baseline {path}: {str(exc).removeprefix('$.')}") from None
    _check_bus_ids(path, baseline)
    return baseline


def _check_bus_ids(path: Path, baseline: NodeBaseline) -> None:
    """Bus IDs are how GPUs are matched: each must be a normalised, unique PCI address."""
    seen: set[str] = set()
    for i, gpu in enumerate(baseline.gpus):
        key = f"gpus[{i}].pci_bus_id"
        try:
            normalised = normalize_pci_bus_id(gpu.pci_bus_id)
        except ValueError:
            raise BaselineError(f"baseline {path}: {key}: {gpu.pci_bus_id!r} is not a PCI bus ID") from None
        if normalised != gpu.pci_bus_id:
            raise BaselineError(f"baseline {path}: {key}: {gpu.pci_bus_id!r} is not normalised (expected "
                                f"{normalised!r})")
        if gpu.pci_bus_id in seen:
            raise BaselineError(f"baseline {path}: {key}: {gpu.pci_bus_id} is listed twice")
        seen.add(gpu.pci_bus_id)
