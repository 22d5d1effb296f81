"""Record, on a real node, what the kernel-log scanner's facility rule rests on (docs/checks.md, "Kernel log").

As root it writes one marker record to /dev/kmsg the way any user-space program would, reads the ring buffer back
and reports: the priority the kernel stored the marker with (kernel/printk/printk.c devkmsg_write() should give it
facility LOG_USER = 1, so prio 8..15, even for "<0>"), the facilities of every other record (the kernel's own must be
facility 0), and what gpudiag's scanner made of the marker (counted in records_not_kernel, never an event).
The marker starts with "NVRM: " so that the scanner looks at it, but it is no Xid and no driver message.

Usage (root): python3 tools/kmsg_facility_probe.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudiag.probe.kernel_log.reader import KMSG_READ_SIZE, drain_kmsg, read_kernel_log  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    marker = f"NVRM: gpudiag facility probe {uuid.uuid4()}"
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(f"<0>{marker}\n")  # level 0 asked for, facility left 0: the kernel must still say user
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        lines, stopped = drain_kmsg(lambda: os.read(fd, KMSG_READ_SIZE))
    finally:
        os.close(fd)
    records = [line for line in lines if line[:1].isdigit() and ";" in line]
    facilities = Counter(int(line.split(",", 1)[0]) >> 3 for line in records)
    mine = [line.split(";", 1)[0] for line in records if line.endswith(marker)]
    info = read_kernel_log()
    result = {
        "marker_record_header": mine[0] if mine else None,
        "marker_facility": int(mine[0].split(",", 1)[0]) >> 3 if mine else None,
        "record_facilities": {str(k): v for k, v in sorted(facilities.items())},
        "scanner_records_not_kernel": info.records_not_kernel,
        "scanner_events_from_marker": sum(marker in e.message for e in info.events),
        "scanner_lines_scanned": info.lines_scanned,
        "drain_stopped": stopped,
    }
    text = json.dumps(result, indent=2) + "\n"
    if out:
        out.write_text(text)
    print(text, end="")
    return 0 if result["marker_facility"] == 1 and not result["scanner_events_from_marker"] else 1


if __name__ == "__main__":
    sys.exit(main())
