#!/usr/bin/env bash
# One machine's nightly soak: `faultline soak` for a time budget (resuming what an earlier attempt
# left in OUT), then the JUnit, Markdown and HTML reports of OUT, then, given a baseline, the gate.
#
#   BUDGET=8h OUT=/data/soak/$(date -u +%F) ci/cluster/nightly-soak.sh
#
# Settings (environment):
#   FAULTLINE  the faultline binary (default: build/bin/faultline of this checkout)
#   BUDGET     time to soak, e.g. 8h, 30m, 90s (default 8h)
#   OUT        output directory (default out/soak); a soak already there is resumed
#   SCENARIOS  scenario names or patterns, separated by spaces (default: all)
#   JOBS       runs at once (default: faultline's, 1)
#   SEED       the soak's seed (default: today's date, YYYYMMDD UTC, so each night differs and is
#              replayable; a soak resumed in OUT keeps the seed it was started with)
#   REPORT_EVERY  how often faultline rewrites OUT/report.* while it runs (default: faultline's)
#   BASELINE   a baseline file (faultline gate --write-baseline): the verdict is then the gate's
#   FOUND_FAILURES_EXIT  exit status when the soak found failures and no baseline decides (default
#              1; the cluster jobs use 0: the shard's work is done, the gather step judges)
#   HUNT_BUDGET  after the soak, hunt exit races in faultline's own test executables (every
#              *_test of HUNT_BUILD/bin run as a whole process, over and over, under faultline:
#              ci/exit-hunt.sh) for this long, e.g. 30m; into OUT/exit-hunt/. Default: no hunt (a
#              sharded soak runs it on one machine only: set it there)
#   HUNT_BUILD the build whose test executables are hunted (default: the one holding FAULTLINE);
#              a sanitizer build wants HUNT_ARGS=--no-preload
#   HUNT_JOBS  runs at once in the hunt (default: the machine's cores)
# Sharding: faultline itself reads the scheduler's variables (GTEST_*, JOB_COMPLETION_INDEX with
# FAULTLINE_SHARD_COUNT, SLURM_ARRAY_TASK_*), which this script passes through untouched.
#
# Writes OUT/results.jsonl, OUT/report.html, OUT/report.md (the soak's), OUT/junit.xml,
# OUT/summary.md, and OUT/soak.status (the soak's exit status, once it has ended).
# Exit status: 0 no failure (or the gate passed), 1 failures found (or a regression), 2 a usage or
# harness error (the reports are still written from whatever was recorded), 130 interrupted.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FAULTLINE=${FAULTLINE:-$root/build/bin/faultline}
BUDGET=${BUDGET:-8h}
OUT=${OUT:-$root/out/soak}
SCENARIOS=${SCENARIOS:-}
JOBS=${JOBS:-}
REPORT_EVERY=${REPORT_EVERY:-}
BASELINE=${BASELINE:-}
FOUND_FAILURES_EXIT=${FOUND_FAILURES_EXIT:-1}
HUNT_BUDGET=${HUNT_BUDGET:-}
HUNT_BUILD=${HUNT_BUILD:-$(dirname "$(dirname "$FAULTLINE")")}
HUNT_JOBS=${HUNT_JOBS:-$(nproc)}
HUNT_ARGS=${HUNT_ARGS:-}

args=(soak)
if [ -n "$SCENARIOS" ]; then
  read -r -a names <<<"$SCENARIOS"
  args+=("${names[@]}")
fi
args+=(--budget "$BUDGET" --out "$OUT")
# A soak already in OUT (an earlier attempt, a requeued task, a replaced pod) is resumed; an OUT
# without one gets a new soak (faultline refuses --resume with nothing to continue, and a new soak
# in an OUT that holds something else).
[ ! -f "$OUT/soak.json" ] || args+=(--resume)
[ -z "$JOBS" ] || args+=(--jobs "$JOBS")
[ -z "$REPORT_EVERY" ] || args+=(--report-every "$REPORT_EVERY")
# A resume refuses another seed than the one its soak started with: after midnight, today's date is
# another seed, so a soak already in OUT keeps its own unless SEED is given.
if [ -n "${SEED:-}" ]; then
  args+=(--seed "$SEED")
elif [ ! -f "$OUT/soak.json" ]; then
  args+=(--seed "$(date -u +%Y%m%d)")
fi

# faultline ends its runs' process trees and flushes its results on SIGTERM. Run it as a child and
# pass the signal on: in a container this script is PID 1, which ignores signals it has no trap
# for, and Slurm signals the batch shell.
child=
# shellcheck disable=SC2317  # reached through the traps
forward() { [ -z "$child" ] || kill -s "$1" "$child" 2>/dev/null || true; }
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward HUP' HUP
run_forwarding() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  # A trapped signal ends `wait` early (status > 128) while the child is still finishing.
  while kill -0 "$child" 2>/dev/null; do
    rc=0
    wait "$child" || rc=$?
  done
  child=
  return "$rc"
}

mkdir -p "$OUT"
rm -f "$OUT/soak.status"
echo "nightly-soak: $FAULTLINE ${args[*]}" >&2
soak_rc=0
run_forwarding "$FAULTLINE" "${args[@]}" || soak_rc=$?
echo "$soak_rc" >"$OUT/soak.status"

status=$soak_rc
[ "$status" -ne 1 ] || status=$FOUND_FAILURES_EXIT
if [ -s "$OUT/results.jsonl" ]; then
  if ! "$FAULTLINE" report "$OUT" --junit "$OUT/junit.xml" --markdown "$OUT/summary.md" --html "$OUT/report.html"; then
    echo "nightly-soak: faultline report failed" >&2
    status=2
  fi
  if [ -n "$BASELINE" ] && [ "$soak_rc" -le 1 ]; then
    gate_rc=0
    "$FAULTLINE" gate --baseline "$BASELINE" --current "$OUT" || gate_rc=$?
    # With a baseline, failures at the baseline's rate are expected: the gate decides.
    if [ "$status" -ne 2 ]; then status=$gate_rc; fi
  fi
else
  echo "nightly-soak: no run recorded in $OUT" >&2
  [ "$status" -ne 0 ] || status=2
fi
if [ -n "$HUNT_BUDGET" ]; then
  hunted=()
  for t in "$HUNT_BUILD"/bin/*_test; do [ -x "$t" ] && hunted+=("$t"); done
  hunt_rc=0
  # shellcheck disable=SC2086  # HUNT_ARGS is a word list by design
  run_forwarding "$root/ci/exit-hunt.sh" --build "$HUNT_BUILD" --budget "$HUNT_BUDGET" --jobs "$HUNT_JOBS" \
    --out "$OUT/exit-hunt" $HUNT_ARGS "${hunted[@]}" || hunt_rc=$?
  echo "$hunt_rc" >"$OUT/exit-hunt.status"
  # A usage error outranks a failure; a failure turns a clean night into a failing one.
  if [ "$hunt_rc" -eq 2 ]; then status=2; elif [ "$hunt_rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=1; fi
  echo "nightly-soak: exit hunt of faultline's own tests: exit status $hunt_rc (OUT/exit-hunt)" >&2
fi
echo "nightly-soak: soak exit status $soak_rc, exit status $status; results in $OUT" >&2
exit "$status"
