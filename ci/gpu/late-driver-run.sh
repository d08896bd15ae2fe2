#!/usr/bin/env bash
# On the GPU machine: `--late-cuda` against the programs it must flag and those it must not, from
# what ci/gpu/carry.sh packed in DEST (with the RMM clients: ci/gpu/rmm-clients.sh first). Writes
# OUT/late-driver.txt (every campaign's summary), OUT/cuda-points-bench.txt (the stubs' cost) and
# OUT/late-files.tgz (each kept run's late-cuda.PID files, which `faultline agent-report RUN_DIR`
# classifies again elsewhere, as long as the same binaries sit at the same paths).
#   ci/gpu/late-driver-run.sh DEST OUT [REPEAT]      (REPEAT: runs per scenario or client, 20)
# Flagged: exit/static-pool's bug point (through `run` and through `exec`), the RMM 26.04 client,
# fl_cuda_static_map, fl_cuda_exit_race. Clean: every exit/ scenario without a bug point, the
# RMM 26.06 client without a worker, fl_cuda_points_probe with either runtime.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: ci/gpu/late-driver-run.sh DEST OUT [REPEAT]" >&2
  exit 2
fi
dest=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
repeat=${3:-20}
jobs=${JOBS:-4}
scratch=$(mktemp -d /tmp/late-driver-run.XXXXXX)
cd "$scratch" || exit 1
export LD_LIBRARY_PATH=$dest/lib NO_COLOR=1 FAULTLINE_DEVICE=cuda
fl=$dest/bin/faultline
summary=$out/late-driver.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
# The campaign lines only: no progress, no header, no "first:" log paths.
quiet() { grep -v '^faultline: \(seed\|containment\|crash capture\|[0-9]*/[0-9]* runs\)\|first:\|repro:'; }
step() { printf '\n=== %s\n' "$*" | tee -a "$summary"; }

step "exit/static-pool, bug/alloc/no-exit-guard: run --late-cuda"
$fl run exit/static-pool --late-cuda -n "$repeat" -j "$jobs" -o sp-run --replace --faults bug/alloc/no-exit-guard=print 2>&1 | quiet | tee -a "$summary"
step "exit/static-pool, bug/alloc/no-exit-guard: exec --late-cuda -- faultline-scenarios"
$fl exec --late-cuda -n "$repeat" -j "$jobs" -o sp-exec --replace --faults bug/alloc/no-exit-guard=print \
  -- "$dest/bin/faultline-scenarios" run exit/static-pool 2>&1 | quiet | tee -a "$summary"
step "every exit/ scenario, clean: run --late-cuda"
$fl run 'exit/*' --late-cuda -n "$repeat" -j "$jobs" -o exit-clean --replace 2>&1 | quiet | tee -a "$summary"
step "programs of the project's: exec --late-cuda"
for p in "fl_cuda_points_probe alloc free event sync alloc" "fl_cuda_points_probe_shared alloc free event sync alloc" \
         "fl_cuda_static_map 3" "fl_cuda_exit_race"; do
  name=${p%% *}
  # shellcheck disable=SC2086 # the program's arguments split on purpose
  $fl exec --late-cuda -n 10 -j "$jobs" -o "$name" --replace -- "$dest/bin/"$p 2>&1 | quiet | tee -a "$summary"
done
for tag in 2604 2606; do
  client=$dest/bin/rmm_client_$tag
  [ -x "$client" ] || continue
  step "RMM $tag client, pool in a static container: exec --late-cuda (30)"
  $fl exec --late-cuda -n 30 -j "$jobs" -o "rmm-$tag" --replace -- "$client" 2>&1 | quiet | tee -a "$summary"
  step "RMM $tag client with a detached worker: exec --late-cuda (10)"
  $fl exec --late-cuda -n 10 -j "$jobs" -o "rmm-$tag-worker" --replace -- "$client" --streams 4 --detached-worker 2>&1 | quiet | tee -a "$summary"
done
step "cuda_points_bench (stand-in driver)" >/dev/null
FAULTLINE_FAKE_LIBCUDA=$dest/fakecuda/libcuda.so.1 FAULTLINE_AGENT_LIB=$dest/lib/libfaultline_agent.so \
  "$dest/bin/cuda_points_bench" --benchmark_min_time=0.3 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true >"$out/cuda-points-bench.txt" 2>&1
grep -E "median" "$out/cuda-points-bench.txt"
find . -name 'late-cuda.*' | tar czf "$out/late-files.tgz" -T - 2>/dev/null
echo "late-driver-run.sh: $out (scratch $scratch)"
