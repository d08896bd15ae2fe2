#!/usr/bin/env bash
# On the GPU machine: each action of the cuda/ points against fl_cuda_points_probe, built with the
# static runtime and with libcudart.so, through `faultline exec` (one run each; the probe's lines
# from the run's log). DEST is what ci/gpu/carry.sh packed; OUT/cuda-points.txt gets everything.
#   ci/gpu/cuda-points-run.sh DEST OUT
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: ci/gpu/cuda-points-run.sh DEST OUT" >&2
  exit 2
fi
dest=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
scratch=$(mktemp -d /tmp/cuda-points-run.XXXXXX)
cd "$scratch" || exit 1
export LD_LIBRARY_PATH=$dest/lib NO_COLOR=1
report=$out/cuda-points.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$report"
n=0
probe() {  # probe SPEC STEP...
  local spec=$1
  shift
  for build in fl_cuda_points_probe fl_cuda_points_probe_shared; do
    n=$((n + 1))
    printf '\n=== %s %s: %s\n' "$build" "${spec:-(no point)}" "$*"
    "$dest/bin/faultline" exec -n 1 --keep all -o "c$n" --replace ${spec:+--faults "$spec"} -- "$dest/bin/$build" "$@" 2>&1 |
      grep -E "runs,|never reached|SIG"
    cat "c$n"/logs/*.log 2>/dev/null | grep -E "rc=|reached|point on|ms="
  done
}
{
  probe "" alloc free info event sync alloc
  probe "cuda/cuMemFree_v2=1*fail(CUDA_ERROR_LAUNCH_FAILED)" alloc free free info
  probe "cuda/cuMemFree=fail(CUDA_ERROR_ILLEGAL_ADDRESS)" alloc free info
  probe "cuda/cuMemAlloc*=delay(200ms)" alloc free
  probe "cuda/cuEventSynchronize=teardown(device)" event sync alloc
  probe "cuda/cuMemFree_v2=print" alloc free
  probe "cuda/cuMemFree_v2=kill;cuda/cuNever=fail" alloc free info
  probe "cuda/cudaMalloc=delay(200ms)" alloc free
} 2>&1 | tee -a "$report"
echo "cuda-points-run.sh: $report"
