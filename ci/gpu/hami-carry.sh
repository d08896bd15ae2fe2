#!/usr/bin/env bash
# Packs HAMi-core's check (issue 18, item 5) for the GPU machine: hami_workers (ci/gpu/hami/,
# built here with nvcc, the CUDA runtime linked statically as nvcc does by default, and
# hami_workers_shared with libcudart.so beside it) into DEST/bin
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
# The same worker with the shared runtime (libcudart.so, as PyTorch loads it), for WORKER=shared;
# the GPU machine's CUDA install provides libcudart.so.13, so the carry holds it beside the worker.
"$nvcc" -O2 -std=c++17 -cudart shared -Xlinker -rpath -Xlinker '$ORIGIN' -o "$dest/bin/hami_workers_shared" \
  "$repo/ci/gpu/hami/hami_workers.cu"
cudart=$(ldd "$dest/bin/hami_workers_shared" | awk '/libcudart/ { print $3 }')
[ -n "$cudart" ] && cp -L "$cudart" "$dest/bin/"
for pair in "$@"; do
  commit=${pair%%=*} lib=${pair#*=}
  [ -f "$lib" ] || { echo "hami-carry.sh: no $lib" >&2; exit 1; }
  mkdir -p "$dest/$commit"
  # Symbols stay: the lock/ filter and fn/ points read them, and hung runs' stacks name them.
  strip --strip-debug -o "$dest/$commit/libvgpu.so" "$lib"
  # The kill "inside the usage update": the instruction after add_gpu_device_memory_usage's first
  # locked add (at 3273df8 the seqlock made odd; at 54b0ca3 the slot's total), as fn/SYMBOL+OFFSET
  # in DEST/COMMIT/usage-point. An optimized build may keep the function only as a clone
  # (add_gpu_device_memory_usage.isra.0): the point then names the clone, which holds the code.
  # Without a locked add (the function inlined everywhere) there is no usage-point, and
  # hami-run.sh skips that point for the commit.
  objdump -d --no-show-raw-insn "$dest/$commit/libvgpu.so" | python3 -c '
import re, sys
start = locked = name = None
for line in sys.stdin.read().splitlines():
    m = re.match(r"([0-9a-f]+) <(add_gpu_device_memory_usage(\.[a-z0-9_.]+)?)>:$", line)
    if m and not (m.group(2).endswith(".cold")):
        start, name, locked = int(m.group(1), 16), m.group(2), False
    elif start is not None:
        i = re.match(r"\s*([0-9a-f]+):\s+(\S+)", line)
        if not i:
            start = None
            continue
        if locked:
            print("%s+%s" % (name, hex(int(i.group(1), 16) - start)))
            sys.exit(0)
        locked = i.group(2) == "lock"
sys.exit(1)' >"$dest/$commit/usage-point" ||
    { rm -f "$dest/$commit/usage-point"; echo "hami-carry.sh: no locked add in add_gpu_device_memory_usage of $lib: no usage-update point" >&2; }
  sed 's/.*+//' "$dest/$commit/usage-point" >"$dest/$commit/usage-offset" 2>/dev/null || true
  # The region lock's release as init_proc_slot_withlock does it in an optimized build (issue 39):
  # unlock_shrreg inlined there, the owner cleared, then `jmp sem_post@plt`: the jump's own
  # instruction, as fn/SYMBOL+OFFSET in DEST/COMMIT/release-point. A lock/sem/release filter cannot
  # name that window: the chain pthread_once -> initialized -> jmp init_proc_slot_withlock -> jmp
  # sem_post leaves no frame or call of those functions before sem_post's return address.
  objdump -d --no-show-raw-insn "$dest/$commit/libvgpu.so" | python3 -c '
import re, sys
start = None
for line in sys.stdin.read().splitlines():
    m = re.match(r"([0-9a-f]+) <(init_proc_slot_withlock)>:$", line)
    if m:
        start = int(m.group(1), 16)
    elif start is not None:
        i = re.match(r"\s*([0-9a-f]+):\s+(jmp|call)\s+\S+ <sem_post@plt>", line)
        if i:
            print("init_proc_slot_withlock+%s" % hex(int(i.group(1), 16) - start))
            sys.exit(0)
        if not line.strip():
            start = None
sys.exit(1)' >"$dest/$commit/release-point" ||
    { rm -f "$dest/$commit/release-point"; echo "hami-carry.sh: no sem_post in init_proc_slot_withlock of $lib: no release-jump point" >&2; }
  echo "$commit: $(cat "$dest/$commit/usage-point" 2>/dev/null || echo 'no usage-update point'); release: $(cat "$dest/$commit/release-point" 2>/dev/null || echo none)"
done
du -sh "$dest"
