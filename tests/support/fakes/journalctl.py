"""A fake `journalctl` over a fake system journal: it answers `--list-boots` and `-k -b ID -o json` in the JSON shapes
systemd 252 writes, from a data file with journald's own access rule.

journald keeps the system journal root:systemd-journal 0640 (systemd-journald.service(8), "Access Control"), and
journalctl shows a user who may not read it none of it — no error, only "No journal files were found." on stderr
(journalctl(1): "all users are granted access to their private per-user journals"; only root and the groups
systemd-journal, adm and wheel read the system journal). The fake does the same: the data file gets that owner and
mode, and a reader the file refuses gets no boots.
"""

from __future__ import annotations

import grp
import json
import os
from pathlib import Path

SCRIPT = """#!/usr/bin/env python3
import json, sys
try:
    data = json.load(open({data!r}))
except PermissionError:
    print("No journal files were found.", file=sys.stderr)
    sys.exit(1)
if "--list-boots" in sys.argv:
    print(json.dumps(data["list"]))
else:
    for entry in data["boots"].get(sys.argv[sys.argv.index("-b") + 1], []):
        print(json.dumps(entry))
"""
_STAND_IN_JOURNAL_GID = 64107  # where this machine has no systemd-journal group: a number no account has


def write(script: Path, data: Path, boots: dict[str, list[str]], current: str, journald_modes: bool = False) -> str:
    """`script` answering from `data` with the kernel messages of each earlier boot in `boots` (ID → messages, newest
    first) and `current` as this boot; `journald_modes`: the data file root:systemd-journal 0640 (run as root)."""
    listing = [{"index": -i - 1, "boot_id": boot, "first_entry": 1, "last_entry": 2} for i, boot in enumerate(boots)]
    listing.append({"index": 0, "boot_id": current, "first_entry": 3, "last_entry": 4})
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps({"list": listing, "boots": {
        boot: [{"MESSAGE": m, "_TRANSPORT": "kernel", "_BOOT_ID": boot, "__MONOTONIC_TIMESTAMP": "9000000"}
               for m in messages] for boot, messages in boots.items()}}))
    if journald_modes:
        try:
            group = grp.getgrnam("systemd-journal").gr_gid
        except KeyError:
            group = _STAND_IN_JOURNAL_GID
        os.chown(data, 0, group)
        data.chmod(0o640)
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(SCRIPT.format(data=str(data)))
    script.chmod(0o755)
    return str(script)
