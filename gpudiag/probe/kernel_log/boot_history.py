"""The driver events of earlier boots, from the records the node keeps (issue 21, item 7): a fault that comes back
on the same GPU after the reboots that should have cleared it is the hardware's (GPUd escalates after two reboots,
NVSentinel has a repeated-Xid analyzer). Two sources, each bounded in time and size, neither fatal:

- the journal of `gpudiag serve` in its state directory (journal.jsonl, journal.1.jsonl: gpudiag/service/journal.py):
  its kernel-log event entries carry the `boot_id` of the boot they were logged in (gpudiag/service/keeper.py);
  older entries without one count as one earlier boot when they were written before this boot began;
- the systemd journal, where `journalctl` is on the node (never under --root: a test tree has no journal of its own):
  `journalctl --list-boots` names the earlier boots, and `journalctl -k -b <id> -o json` gives each one's kernel
  records, read by the same scanner as the live log (formats.json_records, events.EventReader).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import time
from pathlib import Path
from typing import Iterator, Optional

from gpudiag.fileio import DocumentError, read_text
from gpudiag.model import BootFault, BootHistory
from gpudiag.probe.kernel_log.events import EventReader
from gpudiag.probe.kernel_log.formats import json_records
from gpudiag.probe.patterns import lazy_compile
from gpudiag.probe.root_facts import record as root_facts

JOURNAL_FILES = ("journal.1.jsonl", "journal.jsonl")  # oldest first (gpudiag/service/journal.py)
JOURNAL_MAX_BYTES = 4 * 2**20  # the service keeps two generations of 512 KiB by default
EARLIER_BOOTS = 10  # the systemd journal's earlier boots read, newest first
BOOT_MAX_BYTES = 16 * 2**20  # one boot's kernel records as JSON; a larger boot is read in part and said so
MAX_FAULTS = 5_000
# The kinds a repeat can be of: the driver records the checks fail on (events.py: NVIDIA_EVENT_KINDS,
# AMDGPU_EVENT_KINDS); the rest of a boot's records are not kept.
_KINDS = frozenset({"xid", "sxid", "fallen_off_bus", "nvlink_training_failed", "rm_init_failed", "gpu_reset_failed",
                    "ras_uncorrectable", "ras_fatal_error", "init_failed", "bad_pages_threshold",
                    "ras_records_exceed_threshold", "aca_uncorrectable", "slot_link_down", "slot_card_not_present"})
_BOOT_LINE = lazy_compile(r"\s*(-?[0-9]{1,6})\s+([0-9a-f]{32})\s", re.ASCII)
_EARLIER_UNNAMED = "an earlier boot (gpudiag journal entries without a boot ID)"


def read_boot_history(root: Path, state_dir: Optional[Path], current_boot: Optional[str],
                      boot_time: Optional[float], until: float, journalctl: Optional[str] = None) -> BootHistory:
    """Earlier boots' faults. `journalctl` is the program to run (None: look for it on PATH, at root / only)."""
    history = BootHistory(current_boot=current_boot)
    boots: set[tuple] = set()  # the faults kept, by (boot, kind, bus, code, detail)
    if state_dir is not None:
        _from_gpudiag_journal(history, Path(state_dir), boot_time, boots)
    import shutil  # here, as subprocess below: a check's start-up does not pay for them (issue 36, item 9)

    program = journalctl or (shutil.which("journalctl") if Path(root) == Path("/") else None)
    if program is None:
        history.problems.append("journalctl: not on this node (or under --root): the systemd journal was not read")
    elif not root_facts.may_read_system_journal():
        _from_root_record(history, program, state_dir, current_boot, until, boots)
    else:
        _from_systemd_journal(history, program, until, boots)
    history.boots = len({fault.boot for fault in history.faults})
    # A history the deadline cut short is read again at the next collection (probe/collector.py); any other is kept
    # for the boot. The checks say what it may have missed (checks/kernel_log/common.py Repeats).
    history.cut_short = stopped_by_deadline(history.problems)
    return history


def stopped_by_deadline(problems: list[str]) -> bool:
    """Whether these problems of a read of earlier boots say the collection's deadline stopped it (as this module
    words them): what was read may lack faults, so it is read again rather than kept."""
    return any("deadline" in problem for problem in problems)


def _add(history: BootHistory, boots: set[tuple], fault: BootFault) -> None:
    """Keep a fault once per (boot, kind, bus, code, detail): a fault's repeats are counted in boots, not lines."""
    if fault.kind not in _KINDS or fault.boot == history.current_boot or len(history.faults) >= MAX_FAULTS:
        return
    key = (fault.boot, fault.kind, fault.pci_bus_id, fault.code, fault.detail)
    if key not in boots:
        boots.add(key)
        history.faults.append(fault)


def _from_gpudiag_journal(history: BootHistory, directory: Path, boot_time: Optional[float], boots: set) -> None:
    read = []
    for name in JOURNAL_FILES:
        path = directory / name
        if not path.exists():
            continue
        try:
            text = read_text(path, JOURNAL_MAX_BYTES)
        except (DocumentError, OSError) as exc:
            history.problems.append(f"{path}: {exc}")
            continue
        read.append(str(path))
        for entry in _entries(text):
            boot = entry.get("boot_id")
            if not isinstance(boot, str) or not boot:
                boot = _EARLIER_UNNAMED if _before(entry.get("time"), boot_time) else None
            code = entry.get("code")
            if boot is not None and isinstance(entry.get("kind"), str):
                detail = entry.get("detail") if isinstance(entry.get("detail"), str) else None
                _add(history, boots, BootFault(boot, entry["kind"], entry.get("pci_bus_id") or None,
                                               code if isinstance(code, int) else None, "gpudiag journal", detail))
    if read:
        history.sources.append("gpudiag journal: " + ", ".join(read))


def _entries(text: str) -> Iterator[dict]:
    for line in text.splitlines():
        if '"event":"event"' not in line:  # the keeper writes compact JSON: only event entries matter
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            yield entry


def _before(moment: object, boot_time: Optional[float]) -> bool:
    if not isinstance(moment, str) or boot_time is None:
        return False
    try:
        parsed = datetime.datetime.fromisoformat(moment)
    except ValueError:
        return False
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp() < boot_time


def _run(argv: list[str], until: float, max_bytes: int) -> tuple[Optional[bytes], Optional[str]]:
    """stdout of a command, cut at `max_bytes`, killed at `until`: (output, why it is partial or missing)."""
    import subprocess

    left = until - time.monotonic()
    if left <= 0.05:
        return None, "not read: no time left before the collection's deadline"
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                   env={**os.environ, "SYSTEMD_PAGER": "", "LC_ALL": "C"})
    except OSError as exc:
        return None, f"{argv[0]}: {exc.strerror or exc}"
    chunks, size, problem = [], 0, None
    try:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        os.set_blocking(fd, False)
        while True:
            if time.monotonic() > until:
                problem = "stopped at the collection's deadline"
                break
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                if process.poll() is not None:
                    break
                time.sleep(0.005)
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size >= max_bytes:
                problem = f"stopped after {max_bytes // 2**20} MiB"
                break
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
    return b"".join(chunks), problem


def earlier_boots(listing: str) -> list[str]:
    """`journalctl --list-boots` (JSON on systemd 251+, text before) → the IDs of the boots before the current one,
    newest first."""
    try:
        parsed = json.loads(listing)
    except ValueError:
        parsed = None
    found: list[tuple[int, str]] = []
    if isinstance(parsed, list):
        for boot in parsed:
            if isinstance(boot, dict) and isinstance(boot.get("index"), int) and isinstance(boot.get("boot_id"), str):
                found.append((boot["index"], boot["boot_id"]))
    else:
        for line in listing.splitlines():
            match = _BOOT_LINE.match(line)
            if match:
                found.append((int(match[1]), match[2]))
    return [boot for index, boot in sorted(found, reverse=True) if index < 0]


def _from_root_record(history: BootHistory, program: str, state_dir: Optional[Path], current_boot: Optional[str],
                      until: float, boots: set) -> None:
    """An unprivileged reader (the service's user): journalctl would show it none of the system journal and say
    nothing of it (journalctl(1)), so the earlier boots come from what root recorded in this boot
    (probe/root_facts/)."""
    facts, why = root_facts.load(state_dir, current_boot)
    if facts is None or facts.journal is None:
        _from_systemd_journal(history, program, until, boots)  # in case the site granted access some other way
        history.problems.append(f"journalctl: this user may read only its own journal (not root, not in "
                                f"{'/'.join(root_facts.JOURNAL_GROUPS)}), and {why or 'the record has no journal part'}"
                                f": earlier boots in the systemd journal may not have been seen")
        return
    for fault in facts.journal.faults:
        _add(history, boots, fault)
    history.sources += [f"{source} (as root recorded it at {facts.written_at})" for source in facts.journal.sources]
    history.problems += facts.journal.problems


def _from_systemd_journal(history: BootHistory, program: str, until: float, boots: set) -> None:
    listing, problem = _run([program, "--list-boots", "--no-pager", "-q", "-o", "json"], until, 2**20)
    if listing is None or problem:
        history.problems.append(f"journalctl --list-boots: {problem or 'no answer'}")
        return
    earlier = earlier_boots(listing.decode("utf-8", errors="replace"))
    read = 0
    for boot in earlier[:EARLIER_BOOTS]:
        output, problem = _run([program, "-k", "-b", boot, "-o", "json", "--no-pager", "-q"], until, BOOT_MAX_BYTES)
        if output is None:
            history.problems.append(f"journalctl -k -b {boot}: {problem}")
            break
        if problem:
            history.problems.append(f"journalctl -k -b {boot}: {problem}")
        read += 1
        reader = EventReader()
        for record in json_records(output.decode("utf-8", errors="replace").splitlines(), []):
            if not record.kernel:
                continue
            for event in reader.feed(record):
                _add(history, boots, BootFault(record.boot or boot, event.kind, event.pci_bus_id, event.code,
                                               "journalctl", event.detail))
        if time.monotonic() > until:
            break
    history.sources.append(f"journalctl: {read} of {len(earlier)} earlier boot(s) read")
