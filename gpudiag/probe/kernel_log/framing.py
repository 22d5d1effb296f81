"""Record framing of a saved text log: which lines are the later lines of the record above them (issue 32, item 1).
Such a line is that record's text, whoever wrote it: read only as the rest of a multi-line driver record the record
opened (events.EventReader.continue_record), never as a record of its own.

- dmesg and journalctl's short modes print a record's later lines indented to its message column (util-linux
  print_record's indent; journalctl's continuation lines), then the line's own text, which may begin with spaces of
  its own (amdgpu's "\\n failed to send message …", ishitatsuyuki/acominer#9).
- A serial console prints every line of a record behind the record's own prefix (kernel/printk/printk.c
  record_print_text: "Add prefix for each line"), so in a console log (the `console` form, formats.py) a later line
  carries the since-boot stamp of the line above it. Two records are stamped in microseconds; the lines of one
  record share theirs.
"""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.probe.kernel_log.formats import CONSOLE_STAMPS, split_line
from gpudiag.probe.kernel_log.text import MAX_RECORD_CHARS


def continues(head: str, line: str) -> bool:
    """Whether an indented `line` is a later line of the record `head` began: indented at least to its message column,
    as dmesg and journalctl print one."""
    indent = len(line) - len(line.lstrip(" "))
    try:
        split = split_line(head)
    except Exception:  # noqa: BLE001 - hostile input: a head that cannot be split opens no column
        return False
    if split is None:
        return False
    column = len(head.rstrip("\r\n")[:MAX_RECORD_CHARS]) - len(split.message)
    return indent >= column >= 2


def console_stamps(line: str) -> Optional[re.Match]:
    """A console-form line's stamps (group 2: the kernel's since-boot stamp), or None for a line of another form."""
    if line[:1] != "[" or line[5:6] != "-":
        return None
    return CONSOLE_STAMPS.match(line)
