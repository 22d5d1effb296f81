"""The node_exporter textfile form: the same metrics as `/metrics`, written by a one-shot run (a systemd timer) to a
file node_exporter's textfile collector reads (`--collector.textfile.directory`).

The file is replaced atomically (gpudiag.fileio: a temporary file in the same directory, fsync, rename): the
collector would otherwise now and then read half a file. The temporary name does not end in `.prom`, so the
collector never picks it up. Event counters are the daemon's alone (it follows NVML's event stream and the log
between collections); the checks (`kernel_log.*`) report what the log holds, and the alerts on them work here too.
"""

from __future__ import annotations

import time
from pathlib import Path

from gpudiag.exporter import catalog as m
from gpudiag.exporter.metric_set import MetricSet
from gpudiag.exporter.node_metrics import add_build_info, add_checks, add_snapshot
from gpudiag.fileio import write_output
from gpudiag.model import CheckResult, NodeSnapshot


def render_textfile(snapshot: NodeSnapshot, results: list[CheckResult], finished_at: float | None = None) -> str:
    fs = MetricSet()
    add_build_info(fs)
    add_snapshot(fs, snapshot)
    add_checks(fs, results)
    fs.add(m.LAST_COLLECTION, (), time.time() if finished_at is None else finished_at)
    return fs.exposition().decode("utf-8")


def write_textfile(path: Path, snapshot: NodeSnapshot, results: list[CheckResult]) -> None:
    write_output(path, render_textfile(snapshot, results))  # `-`: standard output
