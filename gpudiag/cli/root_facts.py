"""`gpudiag root-facts`: as root, record what the unprivileged service and textfile timer cannot read (the PCIe bridges'
ACS control, AMD GPUs' CPER records, earlier boots in the systemd journal) in their state directory. The shipped units
run it as `ExecStartPre=-+` (root, outside their sandbox; a failure does not stop the service, whose checks then say
what is missing). gpudiag/probe/root_facts/record.py says what is recorded and how the record is used;
docs/service.md why."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Optional

import typer

from gpudiag import DEFAULT_DEADLINE_SECONDS, stdout
from gpudiag.cli.shared.node_collect import UsageProblem
from gpudiag.cli.shared.options import RootOption, TimeoutOption


def root_facts(
    state_dir: Optional[Path] = typer.Option(
        None, "--state-dir", help="The service's state directory (default /var/lib/gpudiag; under --root DIR, "
                                  "DIR/var/lib/gpudiag)."
    ),
    timeout: Optional[float] = TimeoutOption,
    root: Path = RootOption,
) -> None:
    """As root: record the bridges' ACS control and earlier boots' driver faults for the unprivileged service."""
    from gpudiag.fileio import write_atomically
    from gpudiag.probe.host import read_boot_id
    from gpudiag.probe.root_facts import record as facts_of
    from gpudiag.probe.root_facts.gather import gather
    from gpudiag.service import state_dir as default_state_dir

    if os.geteuid() != 0:
        raise UsageProblem("root-facts records what only root can read: run it as root (the units' ExecStartPre=+)")
    directory = default_state_dir(root, state_dir)
    try:
        mode = os.lstat(directory).st_mode
    except OSError as exc:
        raise UsageProblem(f"--state-dir {directory}: {exc.strerror or exc} (the units' StateDirectory= makes it)") \
            from None
    if not stat.S_ISDIR(mode):  # never follow a link: root writes into a directory the service's user owns
        raise UsageProblem(f"--state-dir {directory}: not a directory (a symbolic link is refused)")
    until = time.monotonic() + (DEFAULT_DEADLINE_SECONDS if timeout is None else timeout)
    previous, _ = facts_of.load(directory, read_boot_id(root))
    facts = gather(root, until, previous)
    path = facts_of.path_in(directory)
    try:
        write_atomically(path, json.dumps(facts_of.to_json(facts), sort_keys=True) + "\n", 0o644, exact=True)
    except OSError as exc:
        raise UsageProblem(f"{path}: cannot write: {exc.strerror or exc}") from None
    boots = len({fault.boot for fault in facts.journal.faults}) if facts.journal else 0
    cper = f", the CPER records of {len(facts.cper)} AMD GPU(s)" if facts.cper else ""
    stdout.write(f"gpudiag: recorded the ACS control of {len(facts.bridges)} bridge(s){cper} and the driver faults of "
                 f"{boots} earlier boot(s) in {path}\n", "the account")  # whole, or exit 4 (gpudiag/stdout.py)
