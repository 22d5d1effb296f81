#!/usr/bin/env bash
# Slurm prolog and epilog for gpudiag's idle-time screening (docs/screening.md "Wiring it to Slurm").
#
#   prolog: before a job starts on this node, stop any screen of its GPUs and hold screens off them, so that the job
#           finds its GPUs free, all of their memory included. `gpudiag screen --stop` returns once the screen has
#           gone (its workers exited, their GPU memory freed), within about 5 s, killing it as a last resort.
#   epilog: when the job ends, mark its GPUs used as of now, so that no screen starts on them before
#           screen_idle_after (10 minutes) has passed: the next job of a queue or an array gets them first.
#
# Install it executable as /etc/slurm/gpudiag-screen.sh and link it from the prolog and epilog directories; in
# slurm.conf:
#
#   Prolog=/etc/slurm/prolog.d/*     # ln -s /etc/slurm/gpudiag-screen.sh /etc/slurm/prolog.d/gpudiag-screen.sh
#   Epilog=/etc/slurm/epilog.d/*     # ln -s /etc/slurm/gpudiag-screen.sh /etc/slurm/epilog.d/gpudiag-screen.sh
#   PrologFlags=Alloc                # run the prolog when the job is allocated, before its first step
#
# Which one runs: Slurm's SLURM_SCRIPT_CONTEXT (prolog_slurmd / epilog_slurmd, Slurm 20.11 and later), else the
# first argument (prolog | epilog). Without the prolog a job still gets its GPUs: a screen gives a GPU back within a
# second or two of the job's first CUDA call; the prolog makes it certain before the job begins.
#
# Every GPU of the node is held off by default: Slurm's GPU numbers (SLURM_JOB_GPUS) follow gres.conf, which need
# not be the order NVML numbers them. On nodes shared by several jobs, GPUDIAG_SCREEN_PER_GPU=1 passes them to
# --gpu (check that `nvidia-smi -L` and gres.conf agree first).
#
# A prolog or epilog that fails drains the node in Slurm: this one always exits 0, logs (syslog, tag gpudiag-screen)
# what went wrong, and is bounded to GPUDIAG_SCREEN_TIMEOUT seconds (default 10; SIGKILL 2 s later).
set -u
GPUDIAG=${GPUDIAG:-gpudiag}
timeout_s=${GPUDIAG_SCREEN_TIMEOUT:-10}
case "${SLURM_SCRIPT_CONTEXT:-${1:-}}" in
  prolog*) why="slurm job ${SLURM_JOB_ID:-?} (prolog)" ;;
  epilog*) why="slurm job ${SLURM_JOB_ID:-?} ended (epilog)" ;;
  *) logger -t gpudiag-screen -- "neither prolog nor epilog (SLURM_SCRIPT_CONTEXT unset, no argument): nothing done" \
         2>/dev/null
     exit 0 ;;
esac
args=(screen --stop --reason "$why")
if [ "${GPUDIAG_SCREEN_PER_GPU:-0}" = 1 ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
    args+=(--gpu "$SLURM_JOB_GPUS")
fi
if ! out=$(timeout -k 2 "$timeout_s" "$GPUDIAG" "${args[@]}" 2>&1); then
    logger -t gpudiag-screen -- "$why: gpudiag screen --stop failed: $out" 2>/dev/null
fi
exit 0
