#!/usr/bin/env bash
# gpudiag-healthcheck: run `gpudiag check` with the node's profile and baseline, and tell the scheduler.
#
#   gpudiag-healthcheck            Slurm HealthCheckProgram: drain this node with a reason when a check fails
#                                  (slurmd ignores a health check's exit status: draining is the program's job).
#   gpudiag-healthcheck --report   Print one line and exit 0 OK / 1 not OK / 2 unknown: the exit-code protocol of
#                                  node-problem-detector custom plugins, also used by the NHC check (gpudiag.nhc).
#
# gpudiag's exit codes (DESIGN.md) and what they become:
#   0 no check failed              -> 0 OK (and, with GPUDIAG_RESUME=1, resume a node this script drained)
#   1 a check failed               -> 1 not OK: drain, reason "gpudiag <action>: <fault codes and bus IDs>"
#   2 usage / configuration error  -> 2 unknown: logged, never drains (a broken profile must not drain the fleet)
#   3 nothing could be probed      -> 1 not OK on a GPU node (no GPU visible at all); GPUDIAG_NOTHING_PROBED=unknown
#                                     makes it 2 for fleets that run this on CPU-only nodes too
#   4 internal error (a gpudiag bug) -> 2 unknown: logged, never drains
#   timeout (the check hung past GPUDIAG_TIMEOUT) -> 1 not OK: a driver call that hangs is a sick GPU
#
# Settings (environment, or the file GPUDIAG_CONFIG, default /etc/default/gpudiag-healthcheck, sourced if present):
#   GPUDIAG_PROFILE   shipped name (h200-8x …) or a .toml/path      GPUDIAG_BASELINE  golden baseline file
#   GPUDIAG_ARGS      more `gpudiag check` arguments (word-split), default "--skip workload"
#   GPUDIAG_TIMEOUT   seconds before the check counts as hung (default 120; keep below the scheduler's own limit)
#   GPUDIAG           the gpudiag command (default gpudiag)         GPUDIAG_RESUME=1  resume nodes it drained
set -u

config=${GPUDIAG_CONFIG:-/etc/default/gpudiag-healthcheck}
# shellcheck source=/dev/null
[ -r "$config" ] && . "$config"

GPUDIAG=${GPUDIAG:-gpudiag}
GPUDIAG_TIMEOUT=${GPUDIAG_TIMEOUT:-120}
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

# The failing results of a JSON report as one short line: the strongest action, then fault code and bus ID of the
# first few failures ("gpudiag reset: GPUDIAG-XID-48 0000:3b:00.0, GPUDIAG-PCIE-DOWNTRAINED 0000:19:00.0 (+1 more)").
summarize() {
  "$PYTHON" -c '
import json, sys
ranks = ["none", "watch", "drain", "reset", "reboot", "rma"]
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"gpudiag: a check failed (report unreadable: {exc})"); sys.exit()
failed = [r for r in report.get("results", []) if r.get("status") == "fail"]
action = max((r.get("action") or "drain" for r in failed), key=lambda a: ranks.index(a) if a in ranks else 2,
             default="drain")
items = list(dict.fromkeys(
    " ".join(x for x in (r.get("fault_code") or r.get("check"), (r.get("device") or {}).get("pci_bus_id")) if x)
    for r in failed))
more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
print(f"gpudiag {action}: " + ", ".join(items[:3]) + more)
' "$1"
}

report=$(mktemp) errors=$(mktemp)
trap 'rm -f "$report" "$errors"' EXIT
args=(check --format json)
[ -n "${GPUDIAG_PROFILE:-}" ] && args+=(--profile "$GPUDIAG_PROFILE")
[ -n "${GPUDIAG_BASELINE:-}" ] && args+=(--baseline "$GPUDIAG_BASELINE")
# shellcheck disable=SC2206  # GPUDIAG_ARGS is a list of words on purpose
args+=($GPUDIAG_ARGS)

timeout --kill-after=10 "$GPUDIAG_TIMEOUT" "$GPUDIAG" "${args[@]}" >"$report" 2>"$errors"
rc=$?
first_error=$(grep -m1 . "$errors")

case $rc in
  0) verdict=$OK; reason="$PREFIX: all checks pass${GPUDIAG_PROFILE:+ (profile $GPUDIAG_PROFILE)}" ;;
  1) verdict=$NOTOK; reason=$(summarize "$report") ;;
  3) reason="$PREFIX: no GPU could be probed (${first_error:-no driver or GPU found})"
     if [ "$GPUDIAG_NOTHING_PROBED" = unknown ]; then verdict=$UNKNOWN; else verdict=$NOTOK; fi ;;
  124 | 137) verdict=$NOTOK; reason="$PREFIX: the check hung for more than ${GPUDIAG_TIMEOUT}s (a GPU or driver call)" ;;
  2) verdict=$UNKNOWN; reason="$PREFIX: configuration error, node left alone: ${first_error:-exit 2}" ;;
  *) verdict=$UNKNOWN; reason="$PREFIX: could not judge the node (exit $rc): ${first_error:-no message}" ;;
esac

if [ "$mode" = report ]; then
  echo "$reason"
  exit "$verdict"
fi

# Slurm: drain on NOTOK, resume on OK (if asked), only log otherwise. A node drained for another reason (by an
# admin, or by NHC) is left as it is, and so is its reason.
current_reason() {
  "$SCONTROL" show node "$node" 2>/dev/null | sed -n 's/^[[:space:]]*Reason=//p' | head -n1
}
case $verdict in
  "$NOTOK")
    existing=$(current_reason)
    if [ -n "$existing" ] && [ "${existing#"$PREFIX"}" = "$existing" ] && [ "$existing" != "(null)" ]; then
      log "not draining $node over its existing reason \"$existing\": $reason"
    elif "$SCONTROL" update nodename="$node" state=drain reason="$reason"; then
      log "drained $node: $reason"
    else
      log "could not drain $node: $reason"
    fi ;;
  "$OK")
    if [ "$GPUDIAG_RESUME" = 1 ] && existing=$(current_reason) && [ "${existing#"$PREFIX"}" != "$existing" ]; then
      "$SCONTROL" update nodename="$node" state=resume && log "resumed $node (was: $existing)"
    fi ;;
  *) log "$reason" ;;
esac
exit 0
