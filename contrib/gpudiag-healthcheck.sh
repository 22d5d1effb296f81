#!/usr/bin/env bash
# gpudiag-healthcheck: run `gpudiag check` with the node's profile and baseline, and tell the scheduler.
#
#   gpudiag-healthcheck            Slurm HealthCheckProgram: drain this node with a reason when a check fails
#                                  (slurmd ignores a health check's exit status: draining is the program's job).
#   gpudiag-healthcheck --report   Print one line and exit 0 OK / 1 not OK / 2 unknown: the exit-code protocol of
#                                  node-problem-detector custom plugins, also used by the NHC check (gpudiag.nhc).
#
# gpudiag's exit codes (docs/acceptance.md) and what they become:
#   0 no check failed, and the report's status is pass or warn -> 0 OK (with GPUDIAG_RESUME=1, resume a node this
#                                     script drained)
#   0 no check failed but some could not decide (status "unknown": an unreadable /dev/kmsg hides every Xid, a GPU
#     call failed) -> 2 unknown, never OK: reported and logged, the node is not drained and not resumed (one
#     undecided check is no evidence of a sick GPU, and no evidence of a healthy one). GPUDIAG_UNKNOWN=drain makes it
#     1 not OK for sites that drain whatever cannot be shown healthy.
#   1 a check failed               -> 1 not OK: drain, reason "gpudiag <action>: <fault codes and bus IDs>"; only
#                                     on a readable report whose status is fail: without one (gpudiag could not write
#                                     it, a full TMPDIR) 2 unknown, never a drain
#   2 usage / configuration error  -> 2 unknown: logged, never drains (a broken profile must not drain the fleet)
#   3 nothing could be probed      -> 1 not OK on a GPU node (no GPU visible at all); GPUDIAG_NOTHING_PROBED=unknown
#                                     makes it 2 for fleets that run this on CPU-only nodes too (with a profile that
#                                     expects GPUs, gpudiag itself exits 1 there)
#   4 internal error (a gpudiag bug) -> 2 unknown: logged, never drains
#   timeout (the check hung past GPUDIAG_TIMEOUT) -> 1 not OK: a driver call that hangs is a sick GPU
# With --report, an undecided run (2 unknown, whatever the cause) never clears a failure: after a not-OK verdict it
# stays 1 not OK, with the last failure as the reason, until a run decides. Else NHC, which resumes a node it drained
# once every check returns 0, would put a failed node back into service on a run that could not look. GPUDIAG_STATE
# keeps the last decided verdict; delete it when you return such a node to service by hand before gpudiag can decide.
# (Slurm mode needs no memory: it resumes only on OK.)
#
# Time limits: slurmd kills a HealthCheckProgram that runs longer than 60 s (slurm.conf(5), HealthCheckProgram), and
# NHC's watchdog kills its whole run, every check together, after 30 s (nhc -t / TIMEOUT, default 30). So the whole
# gpudiag run is bounded by GPUDIAG_TIMEOUT (default 20 s; SIGKILL 2 s after the SIGTERM), and gpudiag gets its own
# probe deadline 5 s shorter (`check --timeout`), so that a hung GPU is reported by gpudiag (unknown / fail on that
# GPU) before the script has to kill it. Worst case here: 22 s, and in Slurm mode up to 2 x 10 s more for scontrol.
# Raise GPUDIAG_TIMEOUT only with NHC's TIMEOUT (and below Slurm's 60 s); never put `--level 2` in GPUDIAG_ARGS.
#
# Settings (environment, or the file GPUDIAG_CONFIG, default /etc/default/gpudiag-healthcheck, sourced if present):
#   GPUDIAG_PROFILE   shipped name (h200-8x …) or a .toml/path      GPUDIAG_BASELINE  golden baseline file
#   GPUDIAG_ARGS      more `gpudiag check` arguments (word-split), default "--skip workload"
#   GPUDIAG_TIMEOUT   whole seconds the gpudiag run may take, 1 to 55 (default 20, see the time limits above)
#   GPUDIAG_UNKNOWN   report (default) or drain: what an undecided check (status unknown, exit 0) becomes
#   GPUDIAG_STATE     file keeping the last decided verdict (default /var/lib/gpudiag-healthcheck/state: a
#                     directory only root writes, not the exporter's /var/lib/gpudiag; "" = none)
#   GPUDIAG           the gpudiag command (default gpudiag)         GPUDIAG_RESUME=1  resume nodes it drained
set -u

config=${GPUDIAG_CONFIG:-/etc/default/gpudiag-healthcheck}
# shellcheck source=/dev/null
[ -r "$config" ] && . "$config"

GPUDIAG=${GPUDIAG:-gpudiag}
GPUDIAG_TIMEOUT=${GPUDIAG_TIMEOUT:-20}
GPUDIAG_UNKNOWN=${GPUDIAG_UNKNOWN:-report}
GPUDIAG_STATE=${GPUDIAG_STATE-/var/lib/gpudiag-healthcheck/state}
GPUDIAG_ARGS=${GPUDIAG_ARGS:---skip workload}
GPUDIAG_NOTHING_PROBED=${GPUDIAG_NOTHING_PROBED:-notok}
GPUDIAG_RESUME=${GPUDIAG_RESUME:-0}
SCONTROL=${SCONTROL:-scontrol}
PYTHON=${PYTHON:-python3}
node=${SLURMD_NODENAME:-$(hostname -s)}
readonly OK=0 NOTOK=1 UNKNOWN=2 PREFIX=gpudiag

mode=drain
case "${1:-}" in
  --report) mode=report ;;
  "") ;;
  *) echo "usage: $0 [--report]" >&2; exit $UNKNOWN ;;
esac

log() { logger -t gpudiag-healthcheck -- "$*" 2>/dev/null; echo "gpudiag-healthcheck: $*" >&2; }

# A JSON report in two lines: its status (pass, warn, fail, unknown; "unreadable" when it is not a report), then one
# short reason. For failures the strongest action, then fault code and bus ID of the first few ("gpudiag reset:
# GPUDIAG-XID-48 0000:3b:00.0, GPUDIAG-PCIE-DOWNTRAINED 0000:19:00.0 (+1 more)"); for undecided checks their IDs and
# bus IDs and the first one's message ("gpudiag undecided: kernel_log.xid (cannot read /dev/kmsg: …)"). Only the
# causes are named: a result the report says follows from another (`caused_by`: a lost GPU's short GPU count, its
# Xid 79) is said by its cause, which names the GPU. A GPU without a bus ID is named by its index. Only IDs and a
# bounded, printable message reach the reason: it goes to scontrol and to the scheduler's node list.
summarize() {
  "$PYTHON" -c '
import json, sys
ranks = ["none", "watch", "drain", "reset", "reboot", "rma"]
try:
    with open(sys.argv[1], encoding="utf-8") as file:
        report = json.load(file)
    status = report.get("status")
    results = [r for r in report.get("results", []) if isinstance(r, dict)]
except (OSError, ValueError, AttributeError, TypeError) as exc:
    print("unreadable"); print(f"report unreadable: {exc}"[:120]); sys.exit()

def text(value, limit):
    return "".join(c if c.isprintable() else " " for c in str(value))[:limit]

def where(result):
    device = result.get("device") if isinstance(result.get("device"), dict) else {}
    index = device.get("index")
    return device.get("pci_bus_id") or (f"GPU {index}" if isinstance(index, int) else None)

def listing(chosen):
    # causes first: a result that follows from another one (caused_by) is said by naming its cause
    causes = [r for r in chosen if not r.get("caused_by")] or chosen
    items = list(dict.fromkeys(text(" ".join(str(x) for x in (r.get("fault_code") or r.get("check"), where(r))
                                             if x), 60) for r in causes))
    return ", ".join(items[:3]) + (f" (+{len(items) - 3} more)" if len(items) > 3 else "")

failed = [r for r in results if r.get("status") == "fail"]
undecided = [r for r in results if r.get("status") == "unknown"]
print(status if status in ("pass", "warn", "fail", "unknown") else "unreadable")
if failed:
    action = max((r.get("action") or "drain" for r in failed), key=lambda a: ranks.index(a) if a in ranks else 2)
    print(f"gpudiag {text(action, 10)}: {listing(failed)}")
elif undecided:
    first = text(undecided[0].get("message") or "no message", 80)
    print(f"gpudiag undecided: {listing(undecided)} ({first})")
else:
    print(f"gpudiag: a check failed (no failing result in the report, status {text(status, 10)})")
' "$1"
}

# The verdict of one gpudiag run: sets `verdict` and `reason`.
judge() {
  local args rc errors first_error status="" line="" probe_deadline
  case $GPUDIAG_TIMEOUT in
    [1-9] | [1-4][0-9] | 5[0-5]) ;;
    *) verdict=$UNKNOWN
       reason="$PREFIX: configuration error, node left alone: GPUDIAG_TIMEOUT=$GPUDIAG_TIMEOUT is not 1 to 55 seconds"
       return ;;
  esac
  probe_deadline=$((GPUDIAG_TIMEOUT > 6 ? GPUDIAG_TIMEOUT - 5 : 1))
  args=(check --format json)
  # A recording (--replay, a dry run of this hook) is not probed: gpudiag refuses a probe deadline next to it.
  case " $GPUDIAG_ARGS" in *" --replay"*) ;; *) args+=(--timeout "$probe_deadline") ;; esac
  [ -n "${GPUDIAG_PROFILE:-}" ] && args+=(--profile "$GPUDIAG_PROFILE")
  [ -n "${GPUDIAG_BASELINE:-}" ] && args+=(--baseline "$GPUDIAG_BASELINE")
  # shellcheck disable=SC2206  # GPUDIAG_ARGS is a list of words on purpose
  args+=($GPUDIAG_ARGS)

  # stderr through a pipe, not a file: on a full TMPDIR its first line is still there to say why
  errors=$(set -o pipefail; timeout --kill-after=2 "$GPUDIAG_TIMEOUT" "$GPUDIAG" "${args[@]}" 2>&1 >"$report" |
           head -c 65536)
  rc=$?
  first_error=$(printf '%s\n' "$errors" | grep -m1 .)
  if [ "$rc" = 0 ] || [ "$rc" = 1 ]; then
    { read -r status; read -r line; } < <(summarize "$report")
  fi
  case $rc in
    0) case $status in
         pass | warn) verdict=$OK; reason="$PREFIX: all checks pass${GPUDIAG_PROFILE:+ (profile $GPUDIAG_PROFILE)}" ;;
         unknown) reason=$line
           if [ "$GPUDIAG_UNKNOWN" = drain ]; then verdict=$NOTOK; else verdict=$UNKNOWN; fi ;;
         fail) verdict=$NOTOK; reason=$line ;;
         *) verdict=$UNKNOWN; reason="$PREFIX: could not judge the node (exit 0, $line)" ;;
       esac ;;
    1) if [ "$status" = fail ]; then verdict=$NOTOK; reason=$line
       else  # exit 1 without a failing report to show for it: no evidence to drain on
         verdict=$UNKNOWN
         reason="$PREFIX: could not judge the node (exit 1 without a failing report: $line${first_error:+; $first_error})"
       fi ;;
    3) reason="$PREFIX: no GPU could be probed (${first_error:-no driver or GPU found})"
       if [ "$GPUDIAG_NOTHING_PROBED" = unknown ]; then verdict=$UNKNOWN; else verdict=$NOTOK; fi ;;
    124 | 137) verdict=$NOTOK; reason="$PREFIX: the check hung for more than ${GPUDIAG_TIMEOUT}s (a GPU or driver call)" ;;
    2) verdict=$UNKNOWN; reason="$PREFIX: configuration error, node left alone: ${first_error:-exit 2}" ;;
    *) verdict=$UNKNOWN; reason="$PREFIX: could not judge the node (exit $rc): ${first_error:-no message}" ;;
  esac
}

# The report in a directory of its own, mode 0700 (mktemp -d): not a name in a world-writable /tmp that another
# user could read, or swap for a file of their choosing before the hook reads it back.
if workdir=$(mktemp -d "${TMPDIR:-/tmp}/gpudiag-healthcheck.XXXXXX" 2>/dev/null); then
  trap 'rm -rf "$workdir"' EXIT
  report=$workdir/report.json
  judge
else
  verdict=$UNKNOWN
  reason="$PREFIX: could not judge the node: cannot create a private directory in ${TMPDIR:-/tmp} for the report"
fi

# An undecided report keeps the last decided failure; a decided run is remembered (atomically; best effort: without
# a writable GPUDIAG_STATE an undecided run is only reported as undecided).
if [ -n "$GPUDIAG_STATE" ]; then
  if [ "$verdict" = "$UNKNOWN" ] && [ "$mode" = report ]; then
    last="" last_reason=""
    # Only a regular file of our own: not one another user planted or swapped for a symlink.
    [ -f "$GPUDIAG_STATE" ] && [ ! -L "$GPUDIAG_STATE" ] && [ -O "$GPUDIAG_STATE" ] &&
      { read -r last; read -r last_reason; } < "$GPUDIAG_STATE"
    if [ "$last" = "$NOTOK" ] && [ -n "$last_reason" ]; then
      log "$reason"
      verdict=$NOTOK reason="${last_reason:0:200} (still: this run could not decide)"
    fi
  elif [ "$verdict" != "$UNKNOWN" ]; then
    mkdir -p "$(dirname "$GPUDIAG_STATE")" 2>/dev/null
    if state_tmp=$(mktemp "$GPUDIAG_STATE.XXXXXX" 2>/dev/null); then
      if ! { printf '%s\n%s\n' "$verdict" "$reason" > "$state_tmp" && mv -f "$state_tmp" "$GPUDIAG_STATE"; } 2>/dev/null
      then
        rm -f "$state_tmp"
      fi
    fi
  fi
fi

if [ "$mode" = report ]; then
  echo "$reason"
  exit "$verdict"
fi

# Slurm: drain on NOTOK, resume on OK (if asked), only log otherwise. A node drained for another reason (by an
# admin, or by NHC) is left as it is, and so is its reason.
# scontrol waits on slurmctld: bounded too, inside Slurm's 60 s.
current_reason() {
  timeout 10 "$SCONTROL" show node "$node" 2>/dev/null | sed -n 's/^[[:space:]]*Reason=//p' | head -n1
}
case $verdict in
  "$NOTOK")
    existing=$(current_reason)
    if [ -n "$existing" ] && [ "${existing#"$PREFIX"}" = "$existing" ] && [ "$existing" != "(null)" ]; then
      log "not draining $node over its existing reason \"$existing\": $reason"
    elif timeout 10 "$SCONTROL" update nodename="$node" state=drain reason="$reason"; then
      log "drained $node: $reason"
    else
      log "could not drain $node: $reason"
    fi ;;
  "$OK")
    if [ "$GPUDIAG_RESUME" = 1 ] && existing=$(current_reason) && [ "${existing#"$PREFIX"}" != "$existing" ]; then
      timeout 10 "$SCONTROL" update nodename="$node" state=resume && log "resumed $node (was: $existing)"
    fi ;;
  *) log "$reason (not OK; the node is neither drained nor resumed)" ;;
esac
exit 0
