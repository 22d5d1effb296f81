#!/usr/bin/env bash
# Node acceptance on a lab node: record it as a golden baseline, then show the check passing against that baseline
# and the shipped H200 profile (with this node's GPU count), and failing on a changed profile.
# Run from the repository root on the node: tools/lab_accept.sh OUTDIR NAME GPU_COUNT
set -u
out=$1; name=$2; count=$3
d="$out/$name"; mkdir -p "$d"
export PYTHONPATH=.
run() {  # run a gpudiag command, keep its output and exit code
  local label=$1; shift
  { echo "\$ gpudiag $*"; python3 -m gpudiag "$@"; echo "exit $?"; } > "$d/$label.txt" 2>&1
}
run baseline baseline --output "$d/golden.json"
run accept-pass check --no-color --profile h200-8x -p "expected_gpu_count=$count" --baseline "$d/golden.json"
run accept-8x check --no-color --profile h200-8x --baseline "$d/golden.json"
run accept-power check --json --profile h200-8x -p "expected_gpu_count=$count" -p expected_power_limit_watts=600
python3 -m gpudiag check --format junit --profile h200-8x -p "expected_gpu_count=$count" > "$d/accept.junit.xml" 2>/dev/null
run bad-profile check --profile /nonexistent.toml
