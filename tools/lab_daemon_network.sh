#!/usr/bin/env bash
# Record on a lab node what the network family reads (issue 26) and what `gpudiag serve` tells its journal while
# real faults happen (issue 27, item 2). Run as root from the repository root: tools/lab_daemon_network.sh OUTDIR
# The faults are tools/lab_faults.sh's (an unmapped read, a misaligned load, ...: Xid 31/13/43); the GPU's settings
# are never changed and it is never reset.
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=.
err="$out/stderr.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
{ uname -r; cat /proc/driver/nvidia/version; echo "--- /sys/class/infiniband"; ls -la /sys/class/infiniband;
  echo "--- /sys/class/net"; ls /sys/class/net; echo "--- peer memory / dma-buf modules";
  grep -E '^(nvidia_peermem|nv_peer_mem|ib_core|mlx5_core) ' /proc/modules; echo "--- nvidia module license";
  cat /sys/module/nvidia/version 2>&1; modinfo -F license nvidia 2>&1; } > "$out/host-network.txt" 2>&1
python3 -m gpudiag check --verbose --no-color > "$out/check-verbose.txt" 2>> "$err"; echo "check exit $?" >> "$err"
python3 -m gpudiag check --json > "$out/check.json" 2>> "$err"; echo "json exit $?" >> "$err"
python3 -m gpudiag check -i 0 --json > "$out/check-gpu0.json" 2>> "$err"; echo "-i 0 exit $?" >> "$err"
python3 -m gpudiag profiles > "$out/profiles.txt" 2>> "$err"
# With the node's profile, and with 8 NICs expected: on a VM without them the network family must fail, not skip.
python3 -m gpudiag check --json --profile h200-8x -p expected_gpu_count="$gpus" > "$out/check-profile.json" \
  2>> "$err"; echo "profile exit $?" >> "$err"
python3 -m gpudiag check --only network,topology --verbose --no-color --profile h200-8x \
  -p expected_gpu_count="$gpus" -p expected_nics=8 > "$out/check-network-expected.txt" 2>> "$err"
echo "network expected exit $?" >> "$err"
# serve beside the faults: its stderr is what journald would keep.
python3 -m gpudiag serve --listen 127.0.0.1:19858 --interval 2 --state-dir "$out/state" \
  --socket "$out/gpudiag.sock" > "$out/serve-stdout.txt" 2> "$out/serve-log.txt" &
serve=$!
sleep 8
python3 - "$out/metrics-before.prom" <<'EOF'
import sys, urllib.request
open(sys.argv[1], "wb").write(urllib.request.urlopen("http://127.0.0.1:19858/metrics", timeout=10).read())
EOF
bash tools/lab_faults.sh "$out/faults" > "$out/faults-run.txt" 2>&1
sleep 6
python3 - "$out/metrics-after.prom" <<'EOF'
import sys, urllib.request
open(sys.argv[1], "wb").write(urllib.request.urlopen("http://127.0.0.1:19858/metrics", timeout=10).read())
EOF
kill -TERM "$serve"; wait "$serve"; echo "serve exit $?" >> "$err"
python3 -m gpudiag check --only kernel_log --json > "$out/check-kernel-log-after.json" 2>> "$err"
echo "kernel_log exit $?" >> "$err"
