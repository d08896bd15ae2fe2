#!/usr/bin/env bash
# faultline's main job: builds, then runs the reproducer suite on the simulated device — every
# scenario's clean variant many times (`faultline run --all`), then every bug point against its
# scenario (`faultline verify`) — and writes the results (out/run/results.jsonl and
# out/verify/results.jsonl, per-run logs, crash reports and stacks) and the summary
# (out/summary.txt, also printed), then the reports a person opens first: out/report.html (plots),
# out/summary.md (also appended to $GITHUB_STEP_SUMMARY when set) and out/junit.xml.
set -euo pipefail
cd "$(dirname "$0")/.."
export FAULTLINE_DEVICE=${FAULTLINE_DEVICE:-sim}
ci/setup.sh build
out=${FAULTLINE_OUT:-out}
rm -rf "$out"
mkdir -p "$out"
# The status of the suite travels through a file: the block below runs in a subshell (the pipe).
status_file=$out/.status
echo 0 > "$status_file"
{
  status=0
  build/bin/faultline run --all --repeat "${FAULTLINE_REPEAT:-100}" --jobs "$(nproc)" --seed 1 \
    --target-rate 0.01 --out "$out/run" --replace || status=$?
  echo
  build/bin/faultline verify --repeat "${FAULTLINE_VERIFY_REPEAT:-20}" --jobs "$(nproc)" --seed 1 \
    --out "$out/verify" --replace || status=$?
  echo
  build/bin/faultline report "$out/run" "$out/verify" \
    --html "$out/report.html" --markdown "$out/summary.md" --junit "$out/junit.xml" || status=$?
  echo "$status" > "$status_file"
} 2>&1 | tee "$out/summary.txt"
status=$(cat "$status_file")
rm -f "$status_file"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$out/summary.md" >> "$GITHUB_STEP_SUMMARY"; fi
exit "$status"
