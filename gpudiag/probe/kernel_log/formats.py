"""The line formats a kernel log comes in, reduced to `LogLine`s: vendor-neutral (the driver records are read from
the message by events.py and its vendor modules). Issue 21: every form an operator can hand over.

Prefixes are peeled off in the order the tools write them; each is optional:
1. a whole-line frame: a /dev/kmsg record `<prio>,<seq>,<usec>,<flags>[,caller=T1];` (its ` KEY=value` dictionary
   lines are skipped), `talosctl dmesg`'s `<node>: <facility>: <level>: [<RFC 3339>]: `, an RFC 5424 header
   `<pri>1 <time> <host> <app> <procid> <msgid> <SD> `, or a syslog/journal prefix `<time> [<host> ]<ident>[<pid>]: `
   (RFC 3164 and rsyslog's files, `journalctl -o short|short-iso|short-precise|short-full`, `--no-hostname`), or a
   serial console log's `[2024-01-07 00:05:45] ` (xenconsoled), read only where the kernel's since-boot stamp follows;
2. `dmesg -x`'s `kern  :err   : `, `dmesg -r`'s `<3>`;
3. up to three stamps: `[   12.345678]` (dmesg, journalctl -o short-monotonic), `[Tue Dec  1 22:49:29 2026]` (-T),
   `2026-12-01T22:49:29,238898+00:00` (--time-format iso), `[Dec 1 22:49]` / `[  +0.000001]` (reltime),
   `[<    0.000001>]` (delta); then a printk caller id `[T1946]` / `[    C3]`;
4. after a monotonic stamp, journalctl -o short-monotonic's `host kernel: ` (or `kernel: `).
A line that starts with two or more spaces continues the record above it (dmesg and journalctl indent the later
lines of a multi-line record; a console repeats the record's stamps: framing.py). Multi-line records also arrive as
one line: kmsg escapes the newline as `\\x0a`, rsyslog as `#012`; the message then holds `\\n` and the reader splits
it.

Structured forms are read by their own readers: `journalctl -o export` on bytes (export.py),
`journalctl -o json|json-seq|json-pretty` and `dmesg --json`.

Where a line came from: a record counts as the kernel's (`LogLine.kernel`) unless the line says otherwise — a kmsg
or syslog priority with a non-zero facility (kernel/printk/printk.c devkmsg_write() gives every user-space write
LOG_USER unless it names another non-zero facility), `dmesg -x`/talosctl naming a facility other than `kern`, a
syslog/journal identifier other than `kernel`, a journal _TRANSPORT other than `kernel`. Plain dmesg text carries
none of that: there only the driver-prefix rule holds (events.py).

Every pattern is anchored (re.match) and bounded, digits ASCII only: matching is linear in the line.
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Iterator, NamedTuple, Optional

from gpudiag.probe.kernel_log.clocks import MONTH as _MONTH
from gpudiag.probe.kernel_log.clocks import ctime_seconds as _ctime_seconds
from gpudiag.probe.kernel_log.clocks import iso_seconds, syslog_seconds
from gpudiag.probe.kernel_log.clocks import month_number, wall_seconds  # noqa: F401 - where the scanners take them
from gpudiag.probe.kernel_log.text import MAX_RECORD_CHARS, bounded_int
from gpudiag.probe.patterns import lazy_compile

_A = re.ASCII


class LogLine(NamedTuple):
    seconds: Optional[float]  # since boot, when the line says
    message: str  # may hold "\n" where one record spans lines (kmsg \x0a, rsyslog #012, journal MESSAGE)
    kernel: bool = True  # False: a record the log says came from user space
    fmt: Optional[str] = None  # the format the line was read in; None: a bare message (dmesg -t, journalctl -o cat)
    # The line's wall clock (see KernelEvent.wall_time): seconds, or (converter, stamp) to be worked out only for a
    # line that turns out to hold an event (wall_seconds); a calendar conversion per line costs more than the rest.
    wall_time: object = None
    boot: Optional[str] = None  # the boot the record belongs to, where the format says (journal _BOOT_ID)
    seq: Optional[int] = None  # the kmsg sequence number, where the format carries it (kmsg records)
    # The record's own level (syslog severity 0 emerg … 7 debug), where its format carries one: kmsg's and syslog's
    # priority, dmesg -x's and talosctl's level word, dmesg -r's <N>, journal PRIORITY, dmesg --json's pri. Never read
    # from the text (issue 32, item 7); None in plain dmesg.
    level: Optional[int] = None


# -- whole-line frames -------------------------------------------------------------------------------------------

# Numbers unbounded here (anchored, so still linear) so that a record with an absurd one is counted as malformed.
_KMSG_RECORD = lazy_compile(r"([0-9]+),([0-9]+),([0-9]+),[^;]{0,64};", _A)
_KMSG_PROPERTY = lazy_compile(r" [A-Z0-9_]{1,64}=", _A)  # e.g. " SUBSYSTEM=pci", " DEVICE=+pci:0000:3b:00.0"
_KMSG_ESCAPE = lazy_compile(r"\\x([0-9a-fA-F]{2})", _A)
_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})?"
# Syslog and journal stamps: `Nov 30 11:08:44` (RFC 3164, journalctl -o short; `.123456` with short-precise), ISO 8601
# with a point (rsyslog's RSYSLOG_FileFormat, short-iso, short-iso-precise) — dmesg --time-format iso writes a comma,
# and no host or identifier follows it — and `Tue 2026-11-30 11:08:44 UTC` (short-full).
_SYSLOG_STAMP = (rf"{_MONTH} [ 0-9]?[0-9] [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}(?:\.[0-9]{{1,9}})?"
                 r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})?"
                 r"|[A-Z][a-z]{2} [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})? [A-Z]{1,5}")
# talosctl dmesg (siderolabs/talos cmd/talosctl/cmd/talos/dmesg.go): "%s: %7s: [%s]: %s", facility, level, RFC 3339
# with nanoseconds, message; `-n NODE` puts "NODE: " in front.
_TALOS = lazy_compile(rf"(?:([^ ]{{1,255}}): )?([a-z0-9]{{1,8}}): {{0,8}}([a-z]{{1,8}}): \[({_ISO})\]: ", _A)
# RFC 5424: PRI VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP STRUCTURED-DATA [SP MSG]
_RFC5424 = lazy_compile(rf"<([0-9]{{1,3}})>1 ({_ISO}|-) [^ ]{{1,255}} ([^ ]{{1,48}}) [^ ]{{1,128}} [^ ]{{1,32}} "
                        r"(?:-|(?:\[[^\]]{0,512}\]){1,8}) ?(?:\ufeff)?", _A)
# RFC 3164 / rsyslog / journalctl short modes: [<pri>]TIME [HOST ]IDENT[PID]: — the host may be left out
# (journalctl --no-hostname); it never ends in ":", so "Feb 17 19:00:16 kernel: " reads as no host, ident kernel.
# A host name left blank (an empty `_HOSTNAME`) leaves two spaces: `Jan 02 21:35:19  kernel: `.
_SYSLOG = lazy_compile(rf"(?:<([0-9]{{1,3}})>)?({_SYSLOG_STAMP}) (?:[^ ]{{0,254}}[^ :] | )?([^ :\[]{{1,64}})"
                       r"(?:\[[0-9]{1,10}\])?: ", _A)

# -- level prefixes and stamps -----------------------------------------------------------------------------------

_DMESG_LEVEL = lazy_compile(r"([a-z0-9]{1,8}) {0,8}:([a-z]{1,8}) {0,8}: ", _A)
_DMESG_RAW_PRIO = lazy_compile(r"<([0-9]{1,4})>", _A)
_MONOTONIC = lazy_compile(r"\[ {0,16}([0-9]{1,12}(?:\.[0-9]{1,9})?)\] ?", _A)  # "[123]" too: NVSentinel's test lines
_CTIME = lazy_compile(r"\[[A-Z][a-z]{2} ([A-Z][a-z]{2}) ([ 0-9][0-9]) "
                      r"([0-9]{2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})\] ?", _A)
_ISO_STAMP = lazy_compile(rf"({_ISO}) ", _A)
_RELTIME = lazy_compile(rf"\[(?:{_MONTH} ?[ 0-9]?[0-9] [0-9]{{2}}:[0-9]{{2}}"
                        r"| {0,12}\+[0-9]{1,12}\.[0-9]{1,9})\] ?", _A)
_DELTA = lazy_compile(r"\[< {0,16}[0-9]{1,12}\.[0-9]{1,9}>\] ?", _A)
# A serial console's log as xenconsoled writes a guest's (tools/console/daemon/io.c write_with_timestamp(), strftime
# "[%Y-%m-%d %H:%M:%S] " before each line: Qubes' /var/log/xen/console/guest-*.log), read only where the kernel's own
# since-boot stamp follows it (printk.time=1, as every line of the kernel's console output then carries).
CONSOLE_STAMPS = lazy_compile(r"\[([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})\] "
                              r"(\[ {0,16}[0-9]{1,12}\.[0-9]{1,9}\] ?)", _A)
_CALLER = lazy_compile(r"\[ {0,8}[TC][0-9]{1,10}\] ?", _A)
_HOST_KERNEL_TAG = lazy_compile(r"(?:[^ ]{1,255} )?kernel: ", _A)
# "kernel: [16450076.435595] NVRM: ..." and "kernel: NVRM: Xid ...": journal or syslog lines whose date and host were
# cut when they were pasted (open-gpu-kernel-modules#1150). Only at the very start: "evil kernel: " is text.
_BARE_KERNEL_TAG = lazy_compile(r"kernel: ", _A)

_SGR = lazy_compile(r"\x1b\[[0-9;]{0,32}m", _A)  # `dmesg -H` (and --color=always) colours on a terminal
_SYSLOG_FIRST = frozenset("<0123456789ADFJMNOSTW")  # a PRI, a year, a month or (short-full) a weekday
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "warning": 4, "notice": 5, "info": 6, "debug": 7}
_LEVEL_WORDS = frozenset(_LEVELS)
_PRIORITIES = frozenset("01234567")  # a journal entry's PRIORITY


def split_line(line: str) -> Optional[LogLine]:
    """One log line → `LogLine`; None for a kmsg dictionary line. Raises MalformedRecord for a kmsg record whose
    header holds a number the kernel cannot have written. Each pattern is tried only where the line's first
    character allows it: this runs on every driver line of a log (bench/kernel_log_scan.py)."""
    line = line[:MAX_RECORD_CHARS].rstrip("\r\n")
    if "\x1b" in line:  # dmesg's colours; dmesg itself escapes control bytes in a record (\x1b), so these are its own
        line = _SGR.sub("", line)
    first = line[:1]
    if first == "[":  # plain dmesg, short-monotonic, -T, reltime, delta: the common case, no frame
        console = CONSOLE_STAMPS.match(line) if line[5:6] == "-" else None
        if console:  # a serial console's log: the console's wall clock, then the kernel's own since-boot stamp
            return _after_frame(line[console.start(2):], True, "console", (iso_seconds, console[1]), True)
        return _after_frame(line, True, None, None, False)
    if first == " " and _KMSG_PROPERTY.match(line):
        return None
    if first.isdigit():
        record = _KMSG_RECORD.match(line)
        if record:
            facility = bounded_int(record[1], "kmsg priority", 10) >> 3  # syslog priority = facility * 8 + level
            seq = bounded_int(record[2], "kmsg sequence number")
            microseconds = bounded_int(record[3], "kmsg timestamp")
            return LogLine(microseconds / 1e6, _unescape_kmsg(line[record.end():]), facility == 0, "kmsg", seq=seq,
                           level=int(record[1]) & 7)
    if first == "<":
        frame = _RFC5424.match(line)
        if frame:
            kernel = (int(frame[1]) >> 3) == 0 and frame[3] == "kernel"
            return _after_frame(line[frame.end():], kernel, "rfc5424", (iso_seconds, frame[2]), True,
                                int(frame[1]) & 7)
    if first in _SYSLOG_FIRST or first.isalpha():  # or a month of another locale (`april`, `jan.`, `фев`)
        frame = _SYSLOG.match(line)
        if frame:
            kernel = frame[3] == "kernel" and (frame[1] is None or int(frame[1]) >> 3 == 0)
            message = line[frame.end():]
            message = message.replace("#012", "\n") if "#012" in message else message
            return _after_frame(message, kernel, "syslog", (syslog_seconds, frame[2]), True,
                                int(frame[1]) & 7 if frame[1] is not None else None)
    if ": [" in line[:300]:
        frame = _TALOS.match(line)
        if frame and frame[3] in _LEVEL_WORDS:
            return _after_frame(line[frame.end():], frame[2] == "kern", "talosctl", (iso_seconds, frame[4]), True,
                                _LEVELS.get(frame[3]))
    message, kernel, fmt, severity = line, True, None, None
    if first.islower():
        level = _DMESG_LEVEL.match(message)
        if level and level[2] in _LEVEL_WORDS:
            message, kernel, fmt, severity = message[level.end():], level[1] == "kern", "dmesg-x", _LEVELS[level[2]]
        elif message.startswith("kernel: "):
            tag = _BARE_KERNEL_TAG.match(message)
            if tag:
                message, fmt = message[tag.end():], "kernel-tag"
    elif first == "<":
        raw = _DMESG_RAW_PRIO.match(message)
        if raw:
            priority = bounded_int(raw[1], "dmesg -r priority", 4)
            # dmesg -r prints the level alone for kernel records; a facility shows only when one was stored.
            message, kernel, fmt, severity = message[raw.end():], priority >> 3 == 0, "dmesg-raw", priority & 7
    return _after_frame(message, kernel, fmt, None, False, severity)


def _after_frame(message: str, kernel: bool, fmt: Optional[str], wall: object, framed: bool,
                 level: Optional[int] = None) -> LogLine:
    """Up to three stamps, a caller id and short-monotonic's `host kernel: ` tag, after any frame or level."""
    seconds, stamped = None, False
    for _ in range(3):
        first = message[:1]
        if first == "[":
            # One since-boot stamp: the kernel's. A second "[0] " is the message's text (a program named "[0] NVRM"
            # must not turn the clock back and make a reboot of it: issue 32, item 4).
            stamp = _MONOTONIC.match(message) if seconds is None else None
            if stamp:
                seconds, message, stamped = float(stamp[1]), message[stamp.end():], True
                fmt = fmt or "dmesg"
                continue
            stamp = _CTIME.match(message)
            if stamp:
                wall = wall if wall is not None else (_ctime_seconds, stamp)
                message, fmt = message[stamp.end():], fmt or "dmesg-ctime"
                continue
            stamp = _DELTA.match(message) or _RELTIME.match(message)
            if stamp:
                message, fmt = message[stamp.end():], fmt or ("dmesg-delta" if stamp.re is _DELTA else "dmesg-reltime")
                continue
        elif first.isdigit() and message[4:5] == "-":
            stamp = _ISO_STAMP.match(message)
            if stamp:
                wall = wall if wall is not None else (iso_seconds, stamp[1])
                message, fmt = message[stamp.end():], fmt or "dmesg-iso"
                continue
        break
    if message[:1] == "[":
        caller = _CALLER.match(message)
        if caller:
            message = message[caller.end():]
    if stamped and not framed and "kernel: " in message[:264]:
        tag = _HOST_KERNEL_TAG.match(message)
        if tag:
            message, fmt = message[tag.end():], "journal-monotonic"
    return LogLine(seconds, message, kernel, fmt, wall, level=level)


def _unescape_kmsg(message: str) -> str:
    if "\\x" not in message or not message.isascii():
        return message
    raw = _KMSG_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), message)
    return raw.encode("latin-1").decode("utf-8", errors="replace")  # escaped bytes may be UTF-8 sequences


# -- structured forms --------------------------------------------------------------------------------------------

MAX_STRUCTURED_RECORD = 64 * 1024  # one journal entry (export block, json-pretty object): bigger is not one
_JSON_FIELD = lazy_compile(r' {0,16}"(pri|fac|time|caller|msg)": {0,8}(.{0,8192}?),?$', _A)


# A journal cursor as sd_journal_get_cursor() writes it (src/libsystemd/sd-journal/sd-journal.c): seqnum ID, seqnum,
# boot ID, monotonic, realtime, xor hash, each in hex.
_CURSOR = lazy_compile(r"__CURSOR=s=[0-9a-f]{32};i=[0-9a-f]{1,16};b=[0-9a-f]{32};m=[0-9a-f]{1,16};t=[0-9a-f]{1,16};"
                       r"x=[0-9a-f]{1,16}\r?\n?$", _A)
_TIMESTAMP_FIELD = lazy_compile(r"__(?:REALTIME|MONOTONIC)_TIMESTAMP=[0-9]{1,20}\r?\n?$", _A)


def structured_kind(first: str) -> Optional[str]:
    """The structured form a log is in, from its first non-empty line, or None for line formats. The line must
    truly be structured (issue 32, item 3): a cursor of the journal's shape, a JSON object that parses. A segfault
    report of a program named `__CURSOR=x` or `{"MESSAGE"` (the oldest record of a ring buffer) is a line of text:
    the kernel prints "[pid]: segfault at …" right after the name."""
    if first.startswith("__") and (_CURSOR.match(first) or _TIMESTAMP_FIELD.match(first)):
        return "journal-export"
    stripped = first.strip().lstrip("\x1e")
    if stripped.startswith("{") and ('"__CURSOR"' in stripped or '"MESSAGE"' in stripped or '"_BOOT_ID"' in stripped):
        return "journal-json" if isinstance(_json_loads(stripped), dict) else None
    if stripped == "{":
        return "json-document"  # json-pretty (journal) or dmesg --json: told apart by their first field
    return None


def _json_loads(text: str) -> object:
    """JSON text → its value, or None where it is no JSON, too long, or nested deeper than the parser's stack."""
    if len(text) > MAX_STRUCTURED_RECORD:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: "[[[[…" a few thousand deep
        return None


def journal_entry(fields: dict) -> Optional[LogLine]:
    """A journal entry (export or JSON fields) → `LogLine`, or None when it has no text MESSAGE. Kernel only when
    the journal says so: _TRANSPORT kernel, or with no _TRANSPORT, the identifier kernel and facility 0."""
    message = fields.get("MESSAGE")
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message[:MAX_RECORD_CHARS]):
        message = bytes(message[:MAX_RECORD_CHARS]).decode("utf-8", errors="replace")
    if not isinstance(message, str):
        return None
    transport = fields.get("_TRANSPORT")
    if transport is not None:
        kernel = transport == "kernel"
    else:
        kernel = (
            fields.get("SYSLOG_IDENTIFIER", "kernel") == "kernel" and str(fields.get("SYSLOG_FACILITY", "0")) == "0"
        )
    seconds = _journal_number(fields.get("_SOURCE_MONOTONIC_TIMESTAMP") or fields.get("__MONOTONIC_TIMESTAMP"))
    wall = _journal_number(fields.get("_SOURCE_REALTIME_TIMESTAMP") or fields.get("__REALTIME_TIMESTAMP"))
    boot = fields.get("_BOOT_ID") if isinstance(fields.get("_BOOT_ID"), str) else None
    priority = fields.get("PRIORITY")
    level = int(priority) if isinstance(priority, str) and priority in _PRIORITIES else None
    return LogLine(seconds, message[:MAX_RECORD_CHARS], kernel, "journal", wall, boot, level)


def _journal_number(value: object) -> Optional[float]:
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        return int(value) / 1e6
    return None


def json_records(lines: Iterable[str], bad: list[str]) -> Iterator[LogLine]:
    """`journalctl -o json|json-seq` (one object a line), `-o json-pretty` (objects over lines), `dmesg --json`
    (one document; its items read field by field)."""
    block: list[str] = []
    dmesg: dict[str, str] = {}
    for line in lines:
        text = line.strip().lstrip("\x1e")
        if not text:
            continue
        if block or text == "{" and not dmesg:
            block.append(text)
            if text == "}" or sum(len(b) for b in block) > MAX_STRUCTURED_RECORD:
                yield from _json_object(" ".join(block), bad)
                block = []
            elif len(block) == 2 and text.startswith('"dmesg"'):
                block, dmesg = [], {"": ""}  # dmesg --json: read its items field by field
            continue
        if dmesg:
            field = _JSON_FIELD.match(line)
            if field:
                dmesg[field[1]] = field[2]
                if field[1] == "msg":
                    entry = _dmesg_json_item(dmesg)
                    if entry is not None:
                        yield entry
                    dmesg = {"": ""}
            continue
        if text.startswith("{"):
            yield from _json_object(text, bad)
        else:
            bad.append(line)


def _json_object(text: str, bad: list[str]) -> Iterator[LogLine]:
    fields = _json_loads(text)
    entry = journal_entry(fields) if isinstance(fields, dict) else None
    if entry is None:
        bad.append(text[:200])
    else:
        yield entry


def _dmesg_json_item(item: dict[str, str]) -> Optional[LogLine]:
    try:
        message = json.loads(item["msg"])
        seconds = float(item["time"]) if "time" in item else None
        priority = json.loads(item.get("pri", "0"))
        facility = json.loads(item.get("fac", '"kern"'))
    except (ValueError, KeyError, RecursionError):  # RecursionError: a field nested thousands deep
        return None
    if not isinstance(message, str):
        return None
    kernel = facility == "kern" and not (isinstance(priority, int) and priority >> 3)
    level = priority & 7 if isinstance(priority, int) and not isinstance(priority, bool) and priority >= 0 else None
    if isinstance(priority, str):  # dmesg --json writes the level by name unless --raw
        level = _LEVELS.get(priority)
    return LogLine(seconds, message[:MAX_RECORD_CHARS], kernel, "dmesg-json", level=level)
