#!/usr/bin/env bash
# faultline's main job: builds, then runs the reproducer suite on the simulated device — every
# scenario's clean variant many times (`faultline run --all`), then every bug point against its
# scenario (`faultline verify`) — and writes the results (out/run/results.jsonl and
# out/verify/results.jsonl, per-run logs, crash reports and stacks) and the summary
# (out/summary.txt, also printed).
set -euo pipefail
cd "$(dirname "$0")/.."
export FAULTLINE_DEVICE=${FAULTLINE_DEVICE:-sim}
ci/setup.sh build
out=${FAULTLINE_OUT:-out}
rm -rf "$out"
mkdir -p "$out"
status=0
{
  build/bin/faultline run --all --repeat "${FAULTLINE_REPEAT:-100}" --jobs "$(nproc)" --seed 1 \
    --target-rate 0.01 --out "$out/run" || status=$?
  echo
  build/bin/faultline verify --repeat "${FAULTLINE_VERIFY_REPEAT:-20}" --jobs "$(nproc)" --seed 1 \
    --out "$out/verify" || status=$?
} 2>&1 | tee "$out/summary.txt"
exit "$status"
