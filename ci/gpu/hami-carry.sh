#!/usr/bin/env bash
# Packs HAMi-core's check (issue 18, item 5) for the GPU machine: hami_workers (ci/gpu/hami/,
# built here with nvcc, the CUDA runtime linked statically as nvcc does by default) into DEST/bin
# and each commit's libvgpu.so (built by ci/gpu/hami-core.sh) into DEST/<commit>/. faultline and
# its agent come from ci/gpu/carry.sh's folder, named to hami-run.sh on the GPU machine.
#   ci/gpu/hami-carry.sh DEST COMMIT=LIBVGPU...
#   e.g. ci/gpu/hami-carry.sh .device/hami 54b0ca3=/tmp/hami-54b0ca3/build/libvgpu.so 3273df8=/tmp/hami-3273df8/build/libvgpu.so
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: ci/gpu/hami-carry.sh DEST COMMIT=LIBVGPU..." >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=$1
shift
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
rm -rf "$dest"
mkdir -p "$dest/bin"
"$nvcc" -O2 -std=c++17 -o "$dest/bin/hami_workers" "$repo/ci/gpu/hami/hami_workers.cu"
for pair in "$@"; do
  commit=${pair%%=*} lib=${pair#*=}
  [ -f "$lib" ] || { echo "hami-carry.sh: no $lib" >&2; exit 1; }
  mkdir -p "$dest/$commit"
  # Symbols stay: the lock/ filter and fn/ points read them, and hung runs' stacks name them.
  strip --strip-debug -o "$dest/$commit/libvgpu.so" "$lib"
  # The kill "inside the usage update": the instruction after add_gpu_device_memory_usage's first
  # locked add (at 3273df8 the seqlock made odd; at 54b0ca3 the slot's total), as fn/SYMBOL+OFFSET.
  objdump -d --no-show-raw-insn "$dest/$commit/libvgpu.so" | python3 -c '
import re, sys
start = locked = None
for line in sys.stdin.read().splitlines():
    m = re.match(r"([0-9a-f]+) <add_gpu_device_memory_usage>:$", line)
    if m:
        start = int(m.group(1), 16)
    elif start is not None:
        i = re.match(r"\s*([0-9a-f]+):\s+(\S+)", line)
        if not i:
            break
        if locked:
            print(hex(int(i.group(1), 16) - start))
            sys.exit(0)
        locked = i.group(2) == "lock"
sys.exit(1)' >"$dest/$commit/usage-offset" ||
    { echo "hami-carry.sh: no locked add in add_gpu_device_memory_usage of $lib" >&2; exit 1; }
  echo "$commit: add_gpu_device_memory_usage+$(cat "$dest/$commit/usage-offset")"
done
du -sh "$dest"
