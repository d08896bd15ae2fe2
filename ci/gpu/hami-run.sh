#!/usr/bin/env bash
# On the GPU machine: HAMi-core's shared region under faultline's lock/ and fn/ points (issue 18,
# item 5). Four hami_workers processes share one region file through LD_PRELOAD=libvgpu.so while
# allocating; in each run a fault point kills a worker at one place, and the run's outer timeout
# and stack capture report who stalls behind it.
#   ci/gpu/hami-run.sh GPU_DEST HAMI_DEST OUT COMMIT...
# GPU_DEST: ci/gpu/carry.sh's folder (faultline and its agent); HAMI_DEST: ci/gpu/hami-carry.sh's.
# Environment: RUNS (12 per point), JOBS (4: more CUDA contexts made at once stretch each one's
# start past the stall threshold), TIMEOUT (25s), WORK_S (2: each worker's seconds of allocating),
# POINTS (the point names below to run, default lock-acquired lock-held usage-update), LONG_POINT
# (a point name below: one more campaign of that point, 4 runs with a 330 s timeout, in the
# background: how long a stall lasts where it outlives TIMEOUT), CLEAN (1: the clean campaign;
# 0 leaves it out), ACTIVE (1: the run under faultline with HAMi-core's log; 0 leaves it out),
# WORKER (static: hami_workers, the runtime linked statically; shared: hami_workers_shared, with
# libcudart.so), DEADLINE_S (no campaign starts once the script has run this many seconds; each
# one left out is named in OUT/skipped: one device call holds the whole matrix).
# Per commit, into OUT/COMMIT/: bare.log (one run without faultline, HAMi-core's info log on: is
# it active? and the entry points the worker's runtime calls resolve to, "entry cuInit
# runtime=MODULE dlsym=MODULE"), active/ (one run under faultline with that log: active there
# too?), clean/; then, point by point and commit by commit in that order (so that a deadline cuts
# the last point of every commit, not every point of the last commit), one faultline campaign per
# point (--keep all), each a folder:
#   clean            no fault point
#   lock-acquired    lock/sem/acquired@lock_shrreg=25%kill: just after the region's semaphore was
#                    taken, before lock_shrreg records its owner
#   lock-held        fn/clear_proc_slot_nolock=25%kill: inside the lock, owner recorded (a
#                    registering process tidies the slots there)
#   lock-release     lock/sem/release@unlock_shrreg=25%kill: just before the region's semaphore is
#                    posted (the owner already cleared: HAMi issue #2500's window). In an optimized
#                    build unlock_shrreg ends in `jmp sem_post@plt`, a tail call the filter follows
#   release-inlined  lock/sem/release@init_proc_slot_withlock=25%kill: the same window where the
#                    Release build inlined unlock_shrreg (into init_proc_slot_withlock, which then
#                    ends in `jmp sem_post@plt` itself): what the check before run 1's note on
#                    lock-release names, since there only the out-of-line copy is seen
#   release-jump     fn/init_proc_slot_withlock+OFFSET=25%kill: that window as an instruction, the
#                    `jmp sem_post@plt` itself (hami-carry.sh finds it): reached whatever the
#                    tail calls around it, since a breakpoint needs no frame
#   postinit         lock/sem/acquired@lock_postinit=25%kill: just after postInit's semaphore was
#                    taken (host PID detection, serialised across processes since 3273df8)
#   usage-update     fn/add_gpu_device_memory_usage+OFFSET=P%kill: after the update's first locked
#                    add (hami-carry.sh finds it); P is chosen from the clean runs' allocation
#                    count so that about one worker in four is killed
# Each point fires independently in each worker, so a run may kill none, one or several. A worker
# that waited 8 s or more for its context or an allocation fails the run (exit 3): at 3273df8 four
# workers starting together register one after another, the last after up to 7 s, with no fault.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: ci/gpu/hami-run.sh GPU_DEST HAMI_DEST OUT COMMIT..." >&2
  exit 2
fi
gpu=$(cd "$1" && pwd) hami=$(cd "$2" && pwd) out=$3
shift 3
mkdir -p "$out"
out=$(cd "$out" && pwd)
fl=$gpu/bin/faultline workers=$hami/bin/hami_workers
[ "${WORKER:-static}" = shared ] && workers=$hami/bin/hami_workers_shared
started=$SECONDS
runs=${RUNS:-12} jobs=${JOBS:-4} timeout=${TIMEOUT:-25s}
export LD_LIBRARY_PATH=$gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cd "$out"  # runs start here: a folder where the kernel can write a crash's core
# One region file per run (the shell's pid), libvgpu.so preloaded after faultline's agent.
script='r=/tmp/hami-region.$$
export CUDA_DEVICE_MEMORY_SHARED_CACHE=$r CUDA_DEVICE_MEMORY_LIMIT=16g LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$0"
"$1" --procs 4 --seconds "${WORK_S:-2}" --stall-s 8
rc=$?
rm -f "$r"
exit $rc'

campaign() {  # campaign COMMIT NAME SPEC [faultline options...]
  local commit=$1 name=$2 spec=$3
  shift 3
  local lib=$hami/$commit/libvgpu.so dir=$out/$commit/$name
  rm -rf "$dir"
  local faults=()
  [ -n "$spec" ] && faults=(--faults "$spec")
  echo "== $commit $name ${spec:-(no fault)}"
  "$fl" exec --keep all --out "$dir" "${faults[@]}" "$@" -- sh -c "$script" "$lib" "$workers" \
    >"$dir.summary" 2>&1 || true
  cat "$dir.summary"
}

# The kill probability per hit for the usage update: 0.3 / allocations per worker, in percent.
usage_percent() {
  cat "$out/$1/clean/logs/"*.log 2>/dev/null |
    sed -n 's/.*, \([0-9]*\) allocations,.*/\1/p' | sort -n |
    awk '{ a[NR] = $1 } END { n = a[int((NR + 1) / 2)]; if (n < 1) n = 100; printf "%.5f", 30 / n }'
}

spec_of() {  # spec_of COMMIT NAME
  case $2 in
    lock-acquired) echo 'lock/sem/acquired@lock_shrreg=25%kill' ;;
    lock-held) echo 'fn/clear_proc_slot_nolock=25%kill' ;;
    lock-release) echo 'lock/sem/release@unlock_shrreg=25%kill' ;;
    release-inlined) echo 'lock/sem/release@init_proc_slot_withlock=25%kill' ;;
    release-jump)
      [ -f "$hami/$1/release-point" ] || return 0
      echo "fn/$(cat "$hami/$1/release-point")=25%kill" ;;
    postinit) echo 'lock/sem/acquired@lock_postinit=25%kill' ;;
    usage-update)
      [ -f "$hami/$1/usage-point" ] || return 0
      echo "fn/$(cat "$hami/$1/usage-point")=$(usage_percent "$1")%kill" ;;
  esac
}

past_deadline() {  # past_deadline WHAT: true (and WHAT noted in OUT/skipped) once DEADLINE_S is spent
  [ -n "${DEADLINE_S:-}" ] && [ $((SECONDS - started)) -ge "$DEADLINE_S" ] || return 1
  echo "$1 (at $((SECONDS - started)) s)" >>"$out/skipped"
  echo "== skipped past the deadline: $1"
}

long_pid=
ready=()
for commit in "$@"; do
  lib=$hami/$commit/libvgpu.so
  [ -f "$lib" ] || { echo "hami-run.sh: no $lib" >&2; exit 1; }
  mkdir -p "$out/$commit"
  past_deadline "$commit setup" && continue
  echo "== $commit bare, HAMi-core's info log on"
  set +e
  LIBCUDA_LOG_LEVEL=4 CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/hami-bare.$$ CUDA_DEVICE_MEMORY_LIMIT=16g \
    LD_PRELOAD=$lib timeout 60 "$workers" --procs 2 --seconds 0.2 --entry-points >"$out/$commit/bare.log" 2>&1
  echo "exit $?" >"$out/$commit/bare.status"
  echo "$(cat "$out/$commit/bare.status"); region file: $(stat -c %s /tmp/hami-bare.$$ 2>/dev/null || echo none) bytes"
  set -e
  rm -f /tmp/hami-bare.$$
  grep -v "add_gpu_device_memory\|rm_gpu_device_memory\|get_gpu_memory_usage\|dev=0 pid" "$out/$commit/bare.log" | head -20 || true
  echo "HAMi-core log lines: $(wc -l <"$out/$commit/bare.log"); usage updates: $(grep -c add_gpu_device_memory "$out/$commit/bare.log" || true)"
  echo "entry points: $(grep -m5 ' entry ' "$out/$commit/bare.log" | sed 's/^worker [0-9]*: entry //' | tr '\n' ';')"
  if [ "$(sed -n 's/^exit //p' "$out/$commit/bare.status")" != 0 ]; then
    echo "hami-run.sh: $commit: hami_workers does not run under libvgpu.so without faultline; its log:"
    tail -40 "$out/$commit/bare.log"
    continue
  fi
  ready+=("$commit")
  # HAMi-core active under faultline too (its dlsym reached through the agent's): one run, its log on.
  if [ "${ACTIVE:-1}" = 1 ]; then
    campaign "$commit" active "" --repeat 1 --timeout "$timeout" --env LIBCUDA_LOG_LEVEL=4 >/dev/null
    echo "under faultline: usage updates in HAMi-core's log: $(cat "$out/$commit/active/logs/"*.log | grep -c add_gpu_device_memory || true)"
  fi
  [ "${CLEAN:-1}" = 1 ] && campaign "$commit" clean "" --repeat "$runs" --jobs "$jobs" --timeout "$timeout"
  if [ -n "${LONG_POINT:-}" ] && [ -z "$long_pid" ]; then
    campaign "$commit" "$LONG_POINT-long" "$(spec_of "$commit" "$LONG_POINT")" --repeat 4 --jobs 4 --timeout 330s &
    long_pid=$!
  fi
done
for name in ${POINTS:-lock-acquired lock-held usage-update}; do
  for commit in "${ready[@]}"; do
    spec=$(spec_of "$commit" "$name")
    if [ -z "$spec" ]; then
      echo "== $commit $name: no such point in this build (see hami-carry.sh)" | tee -a "$out/skipped"
      continue
    fi
    past_deadline "$commit $name" && continue
    campaign "$commit" "$name" "$spec" --repeat "$runs" --jobs "$jobs" --timeout "$timeout"
  done
done
[ -z "$long_pid" ] || wait "$long_pid"
