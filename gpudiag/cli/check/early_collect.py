"""A direct check's collection, started on a thread of its own before the checks, the report and the expectations
are imported (gpudiag/cli/check/direct.py).

A cold `gpudiag check --direct` spent 43.7 ms importing and then 63.3 ms probing, one after the other, on the lab
H100 (tests/fixtures/h100/recorded/lab-2026-12-06/check_vs_nvidia_smi.txt). Most of the probe is waiting: NVML's
calls into the driver and the kernel log's reads are C calls that release the GIL, so they run while this thread
imports. The collection is the one the checks would ask for: a check with neither --only nor --skip judges every
optional probe part (tests/cli/check/test_direct.py holds the two equal), so nothing about the selection is needed
before it starts.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Optional

# While the collection runs beside the imports, a thread returning from a C call waits for the importing thread to
# give up the GIL, which it does only every switch interval (5 ms by default): at about 60 NVML calls per GPU that
# would be most of the probe again. A shorter interval while both run lets each call's answer be taken up at once;
# the default comes back when the collection is waited for.
SWITCH_INTERVAL_SECONDS = 0.0002


class EarlyCollection:
    """`collect()` of the whole node (level 1, every probe part) running on a daemon thread; `snapshot()` waits for
    it and returns the snapshot, or raises what the collection raised (a usage problem, a failure), in this thread."""

    def __init__(self, root: Path, timeout: Optional[float]):
        self._snapshot = None
        self._raised: Optional[BaseException] = None
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._interval, SWITCH_INTERVAL_SECONDS))
        # A daemon: an exit before it is waited for (a bad --profile, exit 2) does not wait for the probe; the probe
        # is bounded by its own deadline in any case (gpudiag/probe/deadline.py).
        self._thread = threading.Thread(target=self._collect, args=(root, timeout), name="gpudiag-collect",
                                        daemon=True)
        self._thread.start()

    def _collect(self, root: Path, timeout: Optional[float]) -> None:
        try:
            from gpudiag.cli.shared.node_collect import collect

            self._snapshot = collect(root, None, timeout, 1, None)
        except BaseException as exc:  # noqa: BLE001 - raised again in the waiting thread
            self._raised = exc

    def snapshot(self):
        try:
            self._thread.join()
        finally:
            sys.setswitchinterval(self._interval)
        if self._raised is not None:
            raise self._raised
        return self._snapshot
