"""Probing the node and reading what it should be, for every command that judges one: the typer CLI (gpudiag/cli/app.py)
and `gpudiag check` without typer (gpudiag/cli/check/direct.py), so that the two collect and judge alike. No typer
here."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator, Optional

from gpudiag import DEFAULT_DEADLINE_SECONDS
from gpudiag.exitcodes import ExitCode



class UsageProblem(Exception):
    """Bad input from the user (a flag, a file): one line on stderr, exit 2."""


def start_logging(debug: bool) -> None:
    """Warnings (with GPUDIAG_DEBUG, debug lines too) on stderr, prefixed like every gpudiag message."""
    import logging

    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, stream=sys.stderr,
                        format="gpudiag: %(levelname)s: %(message)s")


LONGEST_WORD = 256  # characters of one word of an error line (a long path fits); what the user typed can be any length


def error_line(message: str) -> str:
    """`message` as one line, every word longer than LONGEST_WORD shortened with its length: an error that quotes
    what the user typed (5,000 digits, a megabyte of argument) stays one line to read."""
    words = " ".join(message.split()).split(" ")
    return " ".join(w if len(w) <= LONGEST_WORD else f"{w[:64]}…({len(w)} characters)" for w in words)


def exit_for_failure(exc: Exception, debug: bool) -> int:
    """How a command ends on an exception it did not handle itself, for the typer CLI and gpudiag/cli/check/direct.py
    alike: bad input is one line and exit 2, a reader that left early (a broken pipe) exit 0, output that could not be
    written whole (gpudiag/stdout.py) one line and exit 4, anything else one line and exit 4 instead of a traceback
    (GPUDIAG_DEBUG=1 raises it again)."""
    from gpudiag.stdout import ReaderLeft, Unwritable

    if isinstance(exc, UsageProblem):
        print(f"gpudiag: error: {error_line(str(exc))}", file=sys.stderr)
        return ExitCode.USAGE
    if isinstance(exc, Unwritable):
        print(f"gpudiag: error: {exc}", file=sys.stderr)
        return ExitCode.INTERNAL
    if isinstance(exc, (BrokenPipeError, ReaderLeft)):
        return ExitCode.OK
    if debug:
        raise exc
    print(f"gpudiag: internal error: {type(exc).__name__}: {exc} (set GPUDIAG_DEBUG=1 for the traceback)",
          file=sys.stderr)
    return ExitCode.INTERNAL


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While vendor libraries run, point file descriptor 1 at stderr: whatever they print (amdsmi prints to stdout
    when libamd_smi.so is missing; C libraries may too) must not corrupt the JSON or JUnit on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):  # Python-level prints, whatever sys.stdout writes to
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def collect_options(root: Path, kernel_log: Optional[Path], timeout: Optional[float], parts=None,
                    state_dir: Optional[Path] = None, power_samples: bool = False):
    """What to collect; `parts` (default: all) names the optional probe parts the selected checks judge; `state_dir`
    is where the service keeps its journal (default /var/lib/gpudiag under the root), read for earlier boots;
    `power_samples`: ask for the mean power since the previous collection (a collector that collects repeatedly)."""
    from gpudiag.probe.collector import PROBE_PARTS, CollectOptions
    from gpudiag.service import state_dir as journal_dir

    timeout = DEFAULT_DEADLINE_SECONDS if timeout is None else timeout
    if not (root / "sys").is_dir() and root != Path("/"):
        raise UsageProblem(f"--root {root}: no sys/ directory under it")
    if kernel_log is not None:
        _saved_log(kernel_log)
    return CollectOptions(root=root, kernel_log_file=kernel_log, timeout_seconds=timeout,
                          parts=PROBE_PARTS if parts is None else parts, state_dir=journal_dir(root, state_dir),
                          power_samples=power_samples)


def _saved_log(path: Path) -> None:
    """--kernel-log names a saved log: a regular file. Anything else is refused as what it is (a FIFO or a pipe such
    as `<(dmesg)` would make the reader wait for a writer; the reader takes regular files only, gpudiag/fileio.py)."""
    import stat

    from gpudiag.fileio import file_kind

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UsageProblem(f"--kernel-log {path}: no such file") from None
    except OSError as exc:
        raise UsageProblem(f"--kernel-log {path}: cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise UsageProblem(f"--kernel-log {path}: is a directory; give the saved log file")
    if not stat.S_ISREG(mode):
        raise UsageProblem(f"--kernel-log {path}: not a regular file ({file_kind(mode)}); save the log to a file "
                           f"first (`dmesg > kernel.log`, `journalctl -k -b > kernel.log`) and give that")


def collect(root: Path, kernel_log: Optional[Path], timeout: Optional[float], level: int = 1, parts=None,
             stress_seconds: Optional[float] = None, state_dir: Optional[Path] = None):
    """Probe the node; at level 2 also run the load tests on its idle GPUs (progress on stderr), all within one
    deadline: --timeout, by default 10 s for the passive checks and 600 s with the load tests."""
    import time

    from gpudiag.probe.collector import Collector

    if timeout is None and level >= 2:  # gpudiag.active only where the load tests run (it costs a level-1 check)
        from gpudiag.active.options import default_deadline

        timeout = default_deadline(level, stress_seconds)
    timeout = DEFAULT_DEADLINE_SECONDS if timeout is None else timeout
    started = time.monotonic()
    # The passive probe keeps its usual deadline; the load tests get the rest.
    options = collect_options(root, kernel_log, min(timeout, DEFAULT_DEADLINE_SECONDS) if level >= 2 else timeout,
                               parts, state_dir)
    with stdout_to_stderr(), Collector(options) as collector:
        snapshot = collector.collect()
        if level >= 2:
            from gpudiag.active import ActiveOptions, run_active

            left = max(1.0, timeout - (time.monotonic() - started))
            try:
                options = ActiveOptions.for_level(level, stress_seconds, deadline_seconds=left, progress=sys.stderr,
                                                  reader=collector.reprobe, kernel_events=collector.kernel_events)
            except ValueError as exc:  # a GPUDIAG_VALIDATION_ONLY_* variable that does not parse
                raise UsageProblem(str(exc)) from None
            snapshot.active = run_active(snapshot, options)
        return snapshot


def expectations(profile: Optional[str], params: list[str], baseline_file: Optional[Path]):
    """Defaults, then the profile, the -p overrides and the golden baseline; bad input is one line, exit 2."""
    if profile is None and not params and baseline_file is None:
        return None  # the defaults: no TOML parser or baseline reader to import on the common path
    import dataclasses

    from gpudiag.expect.baseline import BaselineError, load_baseline
    from gpudiag.expect.profile import ProfileError, load_expectations

    try:
        expectations = load_expectations(profile, params)
        if baseline_file is not None:
            expectations = dataclasses.replace(expectations, baseline=load_baseline(baseline_file))
    except (ProfileError, BaselineError) as exc:
        raise UsageProblem(str(exc)) from None
    return expectations
