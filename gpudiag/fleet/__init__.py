"""Many nodes at once: which fail, which are silent, which drift from their peers and which lag behind them.

Two sources feed one normalised per-node model (fleet.model.NodeFacts): the `gpudiag check --format json` reports
of an acceptance run (fleet.reports) and a Prometheus server that scrapes `gpudiag serve` everywhere
(fleet.prometheus). The judgement (fleet.judge) is a pure function of that model; fleet.render shows it as text,
JSON or JUnit. Nothing here probes the local node.
"""

from gpudiag.fleet.judge import judge
from gpudiag.fleet.model import FLEET_SCHEMA_VERSION, Failure, FleetVerdict, NodeFacts, NothingToJudge, SourceError

__all__ = ["judge", "FLEET_SCHEMA_VERSION", "Failure", "FleetVerdict", "NodeFacts", "NothingToJudge", "SourceError"]
