#!/usr/bin/env bash
# Merges the shards of one sharded soak: waits (up to WAIT seconds) until every shard's soak has
# ended, then writes the merged reports with `faultline report` over ROOT/shard-* and, given a
# baseline, runs `faultline gate` on them. The Kubernetes gather Job and the Slurm gather job run it.
#
#   SHARDS=8 ci/cluster/gather.sh /results/20250101
#
# Settings (environment):
#   FAULTLINE  the faultline binary (default: build/bin/faultline of this checkout)
#   SHARDS     how many shards the soak had: a shard that never wrote shard-*/soak.status is
#              waited for, then reported missing (default: not checked; faultline report still
#              notes shards missing from a sharded campaign)
#   WAIT       seconds to wait for unfinished shards (default 0)
#   MERGED     where the merged reports go (default ROOT/merged): junit.xml, summary.md, report.html
#   BASELINE   a baseline file (faultline gate --write-baseline): the verdict is then the gate's
# Exit status: 0 every shard ended without failures (or the gate passed), 1 failures found (or a
# regression), 2 a shard missing or ended with a harness error, or the reports could not be written.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FAULTLINE=${FAULTLINE:-$root/build/bin/faultline}
ROOT=${1:?usage: gather.sh ROOT (the directory holding the shard-* outputs)}
SHARDS=${SHARDS:-}
WAIT=${WAIT:-0}
MERGED=${MERGED:-$ROOT/merged}
BASELINE=${BASELINE:-}

ended() { compgen -G "$ROOT/shard-*/soak.status" | wc -l; }
deadline=$((SECONDS + WAIT))
while [ -n "$SHARDS" ] && [ "$(ended)" -lt "$SHARDS" ] && [ "$SECONDS" -lt "$deadline" ]; do
  echo "gather: $(ended) of $SHARDS shards have ended; waiting" >&2
  sleep 60
done

shopt -s nullglob
dirs=()
status=0
for d in "$ROOT"/shard-*/; do
  d=${d%/}
  [ -s "$d/results.jsonl" ] && dirs+=("$d")
  if [ ! -f "$d/soak.status" ]; then
    echo "gather: $d: its soak has not ended (still running, or killed); its recorded runs are merged" >&2
    status=2
    continue
  fi
  rc=$(<"$d/soak.status")
  case $rc in
    0) ;;
    1) [ "$status" -eq 2 ] || status=1 ;;
    *) echo "gather: $d: its soak ended with exit status $rc" >&2; status=2 ;;
  esac
done
if [ -n "$SHARDS" ] && [ "${#dirs[@]}" -lt "$SHARDS" ]; then
  echo "gather: ${#dirs[@]} of $SHARDS shards recorded runs in $ROOT" >&2
  status=2
fi
if [ "${#dirs[@]}" -eq 0 ]; then
  echo "gather: no shard recorded a run in $ROOT" >&2
  exit 2
fi

mkdir -p "$MERGED"
if ! "$FAULTLINE" report "${dirs[@]}" --junit "$MERGED/junit.xml" --markdown "$MERGED/summary.md" --html "$MERGED/report.html"; then
  echo "gather: faultline report failed" >&2
  exit 2
fi
cat "$MERGED/summary.md"
if [ -n "$BASELINE" ] && [ "$status" -ne 2 ]; then
  status=0
  current=()
  for d in "${dirs[@]}"; do current+=(--current "$d"); done
  "$FAULTLINE" gate --baseline "$BASELINE" "${current[@]}" || status=$?
fi
echo "gather: exit status $status; merged reports in $MERGED" >&2
exit "$status"
