#!/usr/bin/env bash
# Record a lab node for the test fixtures and the README: the checklist in every format, the snapshot (what
# `check --replay` reads), the raw sysfs/procfs the host probe reads, and the check-vs-nvidia-smi benchmark.
# Run from the repository root on the node: tools/lab_record.sh OUTDIR NAME
set -u
out=$1; name=$2
mkdir -p "$out/$name"
d="$out/$name"
export PYTHONPATH=.
python3 -m gpudiag check > "$d/check.txt" 2> "$d/check.stderr"; echo "exit $?" >> "$d/check.stderr"
python3 -m gpudiag check --verbose --no-color > "$d/check-verbose.txt" 2>> "$d/check.stderr"
python3 -m gpudiag check --json > "$d/check.json" 2>> "$d/check.stderr"; echo "json exit $?" >> "$d/check.stderr"
python3 -m gpudiag check --format junit > "$d/check.junit.xml" 2>> "$d/check.stderr"
python3 -m gpudiag snapshot --output "$d/snapshot.json" 2>> "$d/check.stderr"
python3 -X importtime -m gpudiag check --json > /dev/null 2> "$d/importtime.txt"
python3 tools/nvml_survey.py "$d/nvml-survey.json" 2>> "$d/check.stderr"
bash tools/capture_sysfs.sh "$d/sysfs.tar.gz"
{ cat /proc/driver/nvidia/version; echo ---; cat /proc/version; echo ---; cat /proc/modules; } > "$d/proc.txt" 2>&1
nvidia-smi -q > "$d/nvidia-smi-q.txt" 2>&1
# The NVSwitch fabric as the fabric manager left it (topology.fabric): its service state and the fabric section.
{ systemctl status nvidia-fabricmanager --no-pager; echo ---; nvidia-smi -q | grep -A12 '^    Fabric'; } > "$d/fabric.txt" 2>&1
python3 bench/check_vs_nvidia_smi.py --runs 15 --json "$d/bench.json" > "$d/bench.txt" 2>&1
# One NVML client per node (docs/service.md): check through a `gpudiag serve` of its own (temporary socket) and cold
# --direct, each against nvidia-smi -q, and scrape latency / exporter CPU under 10 checks a second.
python3 bench/check_via_service.py --runs 15 --json "$d/bench-service.json" > "$d/bench-service.txt" 2>&1
python3 -X importtime -m gpudiag check --direct --json > /dev/null 2> "$d/importtime-direct.txt"
python3 tools/kmsg_facility_probe.py "$d/kmsg-facility.json" > /dev/null 2>> "$d/check.stderr"
python3 bench/kernel_log_scan.py --json "$d/bench-kernel-log.json" > "$d/bench-kernel-log.txt" 2>&1
# The PCIe link read while the host copies run (pcie.link_* judge it: observed.under_load; active.devices[].h2d/d2h
# link_generation/link_width) and the throttle time counters (gpudiag_gpu_throttle_seconds_total, incl. the R580
# clock-event fields 269-271) as exported.
python3 -m gpudiag check --level 2 --only pcie,active --json > "$d/check-level2-pcie.json" 2>> "$d/check.stderr"; echo "level2 exit $?" >> "$d/check.stderr"
python3 -m gpudiag textfile --output "$d/metrics.prom" 2>> "$d/check.stderr"
nvidia-smi -q -d PCI,PERFORMANCE > "$d/nvidia-smi-q-pci-performance.txt" 2>&1
# The exporter judged against the node's profile (gpudiag_check_status, gpudiag_node_gpus), and the scheduler hook's
# wall time, which must stay inside NHC's 30 s watchdog (contrib/gpudiag-healthcheck.sh, GPUDIAG_TIMEOUT 20 s).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
python3 -m gpudiag textfile --profile h200-8x -p expected_gpu_count="$gpus" --output "$d/textfile-profile.prom" \
  2>> "$d/check.stderr"; echo "textfile exit $?" >> "$d/check.stderr"
printf '#!/bin/sh\nexec python3 -m gpudiag "$@"\n' > "$d/gpudiag-wrapper"; chmod +x "$d/gpudiag-wrapper"
started=$(date +%s.%N)
GPUDIAG="$d/gpudiag-wrapper" GPUDIAG_CONFIG=/dev/null GPUDIAG_STATE="$d/healthcheck.state" GPUDIAG_PROFILE=h200-8x \
  GPUDIAG_ARGS="--skip workload -p expected_gpu_count=$gpus" bash contrib/gpudiag-healthcheck.sh --report \
  > "$d/healthcheck.txt" 2>&1
echo "exit $? after $(python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$started") s" \
  >> "$d/healthcheck.txt"
rm -f "$d/gpudiag-wrapper" "$d/healthcheck.state"
# Full power (issue 11): gpudiag's tensor-core stress and HBM copy beside torch's BF16 matmul and copy_ on the same
# GPUs in one run (needs torch), and a level-2 run of the whole node as JSON and as a textfile.
python3 bench/power_stress_vs_torch.py --seconds 30 --json "$d/power-stress-bench.json" \
  > "$d/power-stress-bench.txt" 2>&1
python3 -m gpudiag check --level 2 --json > "$d/check-level2-power.json" 2> "$d/check-level2-power.progress.txt"
python3 -m gpudiag textfile --level 2 --output "$d/textfile-level2-power.prom" 2>> "$d/check.stderr"
