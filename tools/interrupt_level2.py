"""Ctrl-C during `gpudiag check --level 2` on a real node: the load tests must stop and free the GPUs.

Starts gpudiag with SIGINT at its default (a shell's background job would inherit it ignored), sends SIGINT after
N seconds, then reports the exit code, how long gpudiag took to exit, and what nvidia-smi sees on the GPUs before
and after. Usage: PYTHONPATH=. python3 tools/interrupt_level2.py [SECONDS]
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time


def smi(query: str) -> str:
    return subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip() or "(none)"


def main() -> int:
    wait = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    child = subprocess.Popen([sys.executable, "-m", "gpudiag", "check", "--level", "2", "--no-color"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(wait)
    print("GPU processes while loaded:", smi("compute-apps=pid,used_memory"))
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    print(f"gpudiag exit {child.returncode}, {time.monotonic() - sent:.2f} s after SIGINT")
    print("GPU processes after:", smi("compute-apps=pid,used_memory"))
    print("GPU memory used after:", smi("gpu=memory.used"))
    print("stderr tail:\n" + "\n".join(err.strip().splitlines()[-4:]))
    print(f"stdout: {len(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
