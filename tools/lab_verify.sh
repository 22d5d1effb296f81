#!/usr/bin/env bash
# Record the stress verification on a lab NVIDIA GPU (issue 22; docs/acceptance.md "Verified results"): the sm_90a
# kernel's assembly (HGMMA in its SASS), determinism over 100 launches and its cost (bench/verified_stress.py), the
# stress against torch (bench/power_stress_vs_torch.py), a clean `check --level 2`, runs with each validation-only
# fault injected (short stress: the fault goes into the second launch), and `--level 3 --stress-seconds 60`.
# Run from the repository root: tools/lab_verify.sh OUTDIR PHASE [RUNS] [COPY_WARPS]
#   PHASE 1: evidence and tuning (a copy-warps sweep, RUNS injections of each kind, level 3);
#   PHASE 2: the figures (determinism, bench with COPY_WARPS, clean level 2, RUNS injections of each kind, level 3).
# Writes OUTDIR/verify-PHASE.tar.gz (one file: the lab machine returns few files).
set -u
out=$1; phase=$2; runs=${3:-2}; warps=${4:-2}
d="$out/verify-$phase"
mkdir -p "$d"
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv > "$d/gpu.txt" 2>&1
python3 -c "from gpudiag.active.wgmma_ptx import PTX; open('/tmp/gpudiag_wgmma.ptx', 'w').write(PTX)"
{ ptxas -arch=sm_90a -v /tmp/gpudiag_wgmma.ptx -o /tmp/gpudiag_wgmma.cubin 2>&1
  echo "HGMMA instructions: $(cuobjdump --dump-sass /tmp/gpudiag_wgmma.cubin | grep -c HGMMA)"; } > "$d/ptxas.txt" 2>&1

pack() {  # after every step: a call cut off at its limit still brings back what was done
  for f in "$d"/check-level*.json; do [ -e "$f" ] && { echo "$f"; summary "$f"; }; done > "$d/verdicts.txt" 2>&1
  tar czf "$out/verify-$phase.tar.gz" -C "$out" "verify-$phase"
}

summary() {  # the active.compute and active.stress verdicts of one check --json output, one line each
  python3 - "$1" <<'EOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as exc:
    print(f"unreadable: {exc}")
    sys.exit()
for r in report["results"]:
    if r["check"] in ("active.compute", "active.stress", "active.memtest", "active.hbm_bandwidth"):
        print(f"  {r['check']} {r['status']} {r.get('action')} {r.get('fault_code')}: {r['message']}")
EOF
}

check_level() {  # check_level LEVEL [ARGS...]: a clean run, its JSON and progress lines kept
  local level=$1; shift
  timeout 200 python3 -m gpudiag check --level "$level" "$@" --json > "$d/check-level$level.json" \
    2> "$d/check-level$level.progress.txt"
  echo "exit $?" >> "$d/check-level$level.progress.txt"
  pack
}

inject() {  # RUNS runs of each validation-only fault, a short stress each
  local sms=(17 42 5 99 131 0 64 77 120 33)
  for i in $(seq 1 "$runs"); do
    sm=${sms[$(( (i - 1) % 10 ))]}
    GPUDIAG_VALIDATION_ONLY_FLIP_SM=$sm timeout 120 python3 -m gpudiag check --level 2 --stress-seconds 3 --json \
      > "$d/inject-sm-$i.json" 2> "$d/inject-sm-$i.progress.txt"
    echo "run $i: flip on SM $sm: exit $?"; summary "$d/inject-sm-$i.json" | grep active.compute
    GPUDIAG_VALIDATION_ONLY_FLIP_STREAM=1 timeout 120 python3 -m gpudiag check --level 2 --stress-seconds 3 --json \
      > "$d/inject-stream-$i.json" 2> "$d/inject-stream-$i.progress.txt"
    echo "run $i: flip in the streamed buffer: exit $?"; summary "$d/inject-stream-$i.json" | grep active.compute
    pack
  done >> "$d/injections.txt" 2>&1
}

if [ "$phase" = 1 ]; then
  timeout 150 python3 bench/verified_stress.py --json "$d/determinism.json" > "$d/determinism.txt" 2>&1
  pack
  timeout 240 python3 bench/power_stress_vs_torch.py --seconds 20 --copy-warps 4,2,0 --json "$d/sweep.json" \
    > "$d/sweep.txt" 2>&1
  pack
  check_level 2
  inject
  check_level 3 --stress-seconds 60
else
  timeout 100 python3 bench/verified_stress.py --json "$d/determinism.json" > "$d/determinism.txt" 2>&1
  pack
  timeout 200 python3 bench/power_stress_vs_torch.py --seconds 30 --copy-warps "$warps" --json "$d/bench.json" \
    > "$d/bench.txt" 2>&1
  pack
  check_level 2
  inject
  check_level 3 --stress-seconds 60
fi
pack
cat "$d/ptxas.txt" "$d"/determinism.txt "$d"/sweep.txt "$d"/bench.txt "$d/verdicts.txt" "$d/injections.txt" 2>/dev/null \
  | grep -v "^gpudiag: active" | cut -c1-400
