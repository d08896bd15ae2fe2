#!/usr/bin/env bash
# The checks that need a real GPU, run on a machine with one (never in CI, which has none):
# the cuda backend's tests, the allocator benchmark against cudaMalloc/cudaMallocAsync, the
# fault-point benchmark, the exit/ scenarios on the cuda backend (clean and each bug point),
# `faultline exec` over a small CUDA program whose detached thread allocates while main returns,
# and the fidelity benchmark (bare vs under faultline) on the CUDA exit races.
#   ci/gpu-check.sh BUILD_DIR OUT_DIR
# BUILD_DIR is a build made on an x86-64 machine with the CUDA toolkit (libfiu is linked
# statically, so the GPU machine needs neither libfiu nor a compiler).
set -uo pipefail
build=$(cd "$1" && pwd); out=$2
mkdir -p "$out"
bin=$build/bin
export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

step() { echo "=== $*"; }
step "cuda backend tests"
"$bin/cuda_backend_test" 2>&1 | tail -n 30 | tee "$out/cuda_backend_test.txt"

step "allocator benchmark: sim then cuda, same binary"
FAULTLINE_DEVICE=sim "$bin/alloc_bench" --benchmark_min_time=0.2 2>&1 | tee "$out/alloc_bench_sim.txt" | tail -n 12
FAULTLINE_DEVICE=cuda "$bin/alloc_bench" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true 2>&1 | tee "$out/alloc_bench_cuda.txt" | tail -n 20

step "fault point benchmark"
"$bin/faults_point_bench" --benchmark_min_time=0.2 2>&1 | tail -n 8 | tee "$out/point_bench.txt"

step "exit/ scenarios on cuda: clean and each bug point"
export FAULTLINE_DEVICE=cuda
fl="$bin/faultline"
"$fl" run exit/static-pool exit/thread-in-flight exit/early-reset --repeat 10 --jobs 4 --seed 1 \
  --out "$out/run-clean" --json --no-stacks | tee "$out/run_clean.json"
for bug in exit/static-pool:bug/alloc/no-exit-guard exit/thread-in-flight:bug/alloc/no-drain \
           exit/early-reset:bug/alloc/no-epoch-guard; do
  name=${bug%%:*}; point=${bug#*:}
  "$fl" run "$name" --faults "$point=print" --repeat 10 --jobs 4 --seed 1 --no-stacks \
    --out "$out/run-${point//\//_}" --json | tee -a "$out/run_bugs.json"
done

step "faultline exec on fl_cuda_exit_race (detached thread allocating while main returns)"
"$fl" exec --repeat 30 --jobs 4 --seed 1 --timeout 60s --out "$out/exec-race" --json \
  -- "$bin/fl_cuda_exit_race" | tee "$out/exec_race.json"
"$fl" exec --repeat 30 --jobs 4 --seed 1 --timeout 60s --out "$out/exec-race-guard" --json \
  -- "$bin/fl_cuda_exit_race" --guard | tee "$out/exec_race_guard.json"
"$fl" exec --repeat 30 --jobs 4 --seed 1 --timeout 60s --out "$out/exec-race-slow" --json \
  -- "$bin/fl_cuda_exit_race" --pause-us 20 | tee "$out/exec_race_slow.json"
step "fidelity: bare vs faultline exec, interleaved (ci/fidelity.py)"
python3 "$(dirname "$0")/fidelity.py" --build "$build" --runs 30 --modes bare,default,inside,amplified \
  --program fl_cuda_exit_race --program fl_cuda_pool_map_race --json "$out/fidelity_cuda.json"
python3 "$(dirname "$0")/fidelity.py" --build "$build" --runs 300 --jobs 6 --modes bare,default,amplified \
  --program "fl_cuda_exit_race --drain" --json "$out/fidelity_cuda_drain.json"
step "done"
