#!/usr/bin/env bash
# Runs every test: the unit and end-to-end tests (CTest), `faultline verify` on the simulated
# device, the pytest driver's tests, then the unit tests again under ASan+UBSan, the shared
# accounting's tests under TSan, the region validator's fuzz target for 30 s, and the cluster path
# (manifests checked, sharding end to end, a one-node Slurm running the sharded soak for real).
set -euo pipefail
cd "$(dirname "$0")/.."
export FAULTLINE_DEVICE=${FAULTLINE_DEVICE:-sim}

# Each step's time goes to stderr as it ends ("ci/test.sh: 212 s  CTest"), and the list again at
# the end: where a run's time goes, step by step, for the next change that wants it shorter.
steps=()
step_start=$SECONDS
step() {
  local took=$((SECONDS - step_start))
  steps+=("$(printf '%5d s  %s' "$took" "$1")")
  echo "ci/test.sh: $took s  $1" >&2
  step_start=$SECONDS
}

ci/setup.sh build
step "set-up and build"
python3 ci/floors.py  # every #include points down the floors its room's CMakeLists.txt names

# The pytest driver (drivers/pytest): its package in a venv of its own. It brings py-spy, with
# which faultline reads a hung Python process's frames: CTest's test of that must find it.
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e 'drivers/pytest[test]'
export FAULTLINE_PY_SPY=$PWD/.venv/bin/py-spy FAULTLINE_REQUIRE_PY_SPY=1
step "floors, the driver's venv"

# A test process that dies of a fatal signal prints every thread's stack first (the shared test
# main's crash stacks, core/testing/crash_stacks.h), so that CTest's log names what crashed.
(cd build && FAULTLINE_TEST_CRASH_STACKS=1 ctest --output-on-failure --parallel "$(nproc)" --timeout 300)
step "CTest"

# Sanitizer pass: unit tests only (the benchmarks and CUDA backend add nothing under ASan here).
# Several tests prove that a bug re-created by a bug point dies by SIGSEGV; ASan must leave those
# signals to the process (and to faultline's crash handler) instead of turning them into exit 1.
# The sanitizer builds trade optimisation for build time: -Og for the ASan+UBSan build (its
# library units compile in half the time they take at -O1: UBSan's checks are what -O1 spends
# it on), -O1 for TSan and fuzz; the TSan and fuzz builds, which run no debugger, take -g1 (line
# tables, enough for their reports); the ASan pass keeps -g: its end-to-end tests read hung runs'
# stacks with gdb, which names functions by their scopes only with full debug info. The CUDA
# backend's GPU tests only skip here.
san_flags=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DFAULTLINE_BENCHMARKS=OFF -DFAULTLINE_CUDA=OFF)
# The ASan+UBSan build compiles while the steps that mostly wait run: the driver's tests, the
# cluster's checks and its one-node Slurm, CI's own tests (together about 0.3 of a core over
# 170 s). Nothing timed runs beside it: CTest's `faultline verify` has finished, and the build is
# niced below those steps. Its output goes to build-asan/build.log, printed if it fails.
mkdir -p build-asan
setsid nice -n 10 ci/setup.sh build-asan -DFAULTLINE_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=None \
  "-DCMAKE_CXX_FLAGS=-Og -g" "-DCMAKE_C_FLAGS=-Og -g" -DFAULTLINE_BENCHMARKS=OFF -DFAULTLINE_CUDA=OFF \
  >build-asan/build.log 2>&1 &
asan_build=$!
trap 'kill -- -"$asan_build" 2>/dev/null || true' EXIT  # a failed step leaves no build running

# The driver's tests (they drive build/bin/faultline).
.venv/bin/python -m pytest drivers/pytest/tests -q -p no:cacheprovider
step "the driver's tests (the ASan build beside them)"

# --- ci/cluster: the cluster manifests, workflow and scripts validated (schemas, shellcheck), and
# sharding by each scheduler's variables end to end (every run in one shard, the merge counts all).
ci/cluster/check.sh
.venv/bin/python -m pytest ci/cluster/tests -q -p no:cacheprovider
# The Slurm path for real: a one-node Slurm (its own munged, slurmctld, slurmd) runs submit.sh's
# array soak and gather, then a cancelled and requeued shard (about 80 s; root, as the daemons).
if [ "$(id -u)" -eq 0 ]; then ci/cluster/slurm/one-node.sh; else sudo -E ci/cluster/slurm/one-node.sh; fi
# --- end ci/cluster
step "cluster: manifests, sharding, one-node Slurm (the ASan build beside it)"

# The GPU record's generator (ci/gpu/record.py) over real-format fixtures.
.venv/bin/python -m pytest ci/gpu/tests ci/tests -q -p no:cacheprovider
step "the GPU record's and CI's own tests (the ASan build beside them)"

# Our own medicine (ci/exit-hunt.sh): the test executables most exposed to exit races (worker
# threads, forks, the simulated device's streams) run as whole processes, over and over, under
# `faultline soak` at --jobs = cores for 90 s, as a flaky exit would hit a CI run. A run that is not
# a pass fails CI here, with its signature, top frames and repro line.
ci/exit-hunt.sh --build build --budget 90s
step "exit hunt: faultline's own tests under faultline (the ASan build beside it)"

if ! wait "$asan_build"; then
  tail -n 60 build-asan/build.log >&2
  echo "ci/test.sh: the ASan+UBSan build failed (build-asan/build.log)" >&2
  exit 1
fi
trap - EXIT
step "ASan+UBSan build (what it took beyond the steps beside it)"

# The fuzz and TSan builds compile beside the ASan+UBSan tests under SCHED_IDLE: they take only
# the CPU those tests leave idle (mostly waiting on their children), and give it up the moment a
# test's process wants it, which nice did not (a niced build beside CTest made verify's clean
# variants miss their bounds). Their output goes to build-tsan/build.log.
san_builds() {
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFAULTLINE_FUZZ=ON \
    -DFAULTLINE_SANITIZE=address,undefined -DFAULTLINE_TESTS=OFF "${san_flags[@]}" >/dev/null &&
    cmake --build build-fuzz --target accounting_fuzz &&
    cmake -S . -B build-tsan -G Ninja -DFAULTLINE_SANITIZE=thread "${san_flags[@]}" >/dev/null &&
    cmake --build build-tsan --target accounting_test registry_test
}
mkdir -p build-tsan
setsid chrt --idle 0 bash -c "$(declare -p san_flags); $(declare -f san_builds); san_builds" >build-tsan/build.log 2>&1 &
san_build=$!
trap 'kill -- -"$san_build" 2>/dev/null || true' EXIT

(cd build-asan &&
  ASAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0 FAULTLINE_TEST_CRASH_STACKS=1 \
  ctest --output-on-failure --parallel "$(nproc)" --timeout 600 -LE no-sanitize)
step "CTest under ASan+UBSan (the fuzz and TSan builds beside it, SCHED_IDLE)"

if ! wait "$san_build"; then
  tail -n 60 build-tsan/build.log >&2
  echo "ci/test.sh: the fuzz or TSan build failed (build-tsan/build.log)" >&2
  exit 1
fi
trap - EXIT
step "fuzz and TSan builds (what they took beyond the ASan+UBSan tests)"

# The region validator under libFuzzer (clang, ASan+UBSan), for a bounded time, on one core while
# the TSan tests take the other.
mkdir -p build-fuzz/corpus
build-fuzz/bin/accounting_fuzz -max_total_time=30 -timeout=10 -print_final_stats=1 build-fuzz/corpus \
  >build-fuzz/fuzz.log 2>&1 &
fuzz_run=$!
trap 'kill "$fuzz_run" 2>/dev/null || true' EXIT

# ThreadSanitizer over the shared accounting (lock, seqlock, slots: threads writing and reading
# one region) and the registry (workers, drains, concurrent unregisters); only those test
# binaries are built.
TSAN_OPTIONS="suppressions=$PWD/ci/tsan.supp halt_on_error=1" build-tsan/bin/accounting_test --gtest_brief=1
TSAN_OPTIONS="suppressions=$PWD/ci/tsan.supp halt_on_error=1" build-tsan/bin/registry_test --gtest_brief=1
step "TSan: run (the fuzzer beside it)"

fuzz_status=0
wait "$fuzz_run" || fuzz_status=$?
trap - EXIT
tail -n 3 build-fuzz/fuzz.log
if ((fuzz_status != 0)); then
  tail -n 80 build-fuzz/fuzz.log >&2
  echo "ci/test.sh: the fuzzer found a crash or failed (exit $fuzz_status)" >&2
  exit 1
fi
step "fuzz: the rest of its 30 s run"

printf 'ci/test.sh: %s\n' "${steps[@]}" >&2
echo "ci/test.sh: all tests passed in $SECONDS s"
