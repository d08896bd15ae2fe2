#!/usr/bin/env bash
# On the GPU machine: runs what ci/gpu/rmm-carry.sh packed. `bench` runs alloc_bench (faultline's
# pool vs cudaMalloc vs cudaMallocAsync vs RMM's pool) into OUT/alloc_bench.json and prints the
# ratios; `clients` runs faultline exec over each RMM client (26.04, 26.06), without and with a
# detached worker, without and with the exit amplifier (exit/end=delay(100ms)), and packs the
# campaigns into OUT/rmm-clients.tgz with a summary in OUT/rmm-clients.txt.
#   ci/gpu/rmm-gpu-run.sh DEST OUT bench|clients|all [REPEAT]      (REPEAT: runs per case, 30)
# JOBS (default 4) runs at once: with a core_pattern that names no pid, cores of crashes at the
# same moment overwrite each other (those runs keep their signal but lose their stack); JOBS=1
# keeps every stack and is slower.
# Runs from a scratch directory: a source tree's core/ folder would stop the kernel's core dumps.
# Where gdb is missing and cuda-gdb is there, a `gdb` that runs cuda-gdb is put first on PATH so
# faultline can read the core dumps (crash capture `core`); the campaign header says which capture
# was used and why not `core`.
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: ci/gpu/rmm-gpu-run.sh DEST OUT bench|clients|all [REPEAT]" >&2
  exit 2
fi
dest=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
what=$3
repeat=${4:-30}
jobs=${JOBS:-4}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d /tmp/rmm-gpu-run.XXXXXX)
cd "$scratch" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

if ! command -v gdb >/dev/null && command -v cuda-gdb >/dev/null; then
  mkdir -p "$scratch/shim"
  printf '#!/bin/sh\nexec cuda-gdb "$@"\n' >"$scratch/shim/gdb"
  chmod +x "$scratch/shim/gdb"
  export PATH=$scratch/shim:$PATH
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "=== alloc_bench on cuda: pool, device, async, rmm_pool"
  FAULTLINE_DEVICE=cuda "$dest/bin/alloc_bench" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/alloc_bench.json" \
    --benchmark_out_format=json 2>&1 | tee "$out/alloc_bench.txt" | grep -E "median|ERROR"
  python3 "$here/alloc-ratios.py" "$out/alloc_bench.json" | tee "$out/alloc_ratios.txt"
fi

if [ "$what" = clients ] || [ "$what" = all ]; then
  fl=$dest/bin/faultline
  summary=$out/rmm-clients.txt
  : >"$summary"
  for tag in 2604 2606; do
    for worker in "" --detached-worker; do
      for faults in "" "exit/end=delay(100ms)"; do
        name=rmm_client_${tag}${worker:+_worker}${faults:+_amplified}
        echo "=== $name" | tee -a "$summary"
        "$fl" exec --repeat "$repeat" --jobs "$jobs" --seed 1 --timeout 60s --out "$scratch/$name" --replace \
          ${faults:+--faults "$faults"} -- "$dest/bin/rmm_client_$tag" --streams 4 $worker 2>&1 | tee -a "$summary"
        # The first crash's stack, as faultline recorded it.
        first=$(find "$scratch/$name/runs" -name crash-stacks.txt 2>/dev/null | sort | head -n 1)
        [ -n "$first" ] && { echo "--- ${first#"$scratch"/}"; head -n 80 "$first"; } >>"$summary"
        rm -f "$scratch"/core*  # read already; only the stacks travel back
      done
    done
  done
  tar -C "$scratch" -czf "$out/rmm-clients.tgz" $(cd "$scratch" && ls -d rmm_client_*)
fi
