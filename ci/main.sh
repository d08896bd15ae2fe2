#!/usr/bin/env bash
# faultline's main job: builds, then runs the reproducer suite on the simulated device and writes
# the results (out/results.jsonl, per-run logs and stacks) and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
export FAULTLINE_DEVICE=${FAULTLINE_DEVICE:-sim}
ci/setup.sh build
out=${FAULTLINE_OUT:-out}
rm -rf "$out"
build/bin/faultline run --all --repeat "${FAULTLINE_REPEAT:-20}" --jobs "$(nproc)" --seed 1 --out "$out"
