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

(cd build && ctest --output-on-failure --parallel "$(nproc)" --timeout 300)
step "CTest"

# The driver's tests (they drive build/bin/faultline).
.venv/bin/python -m pytest drivers/pytest/tests -q -p no:cacheprovider
step "the driver's tests"

# Sanitizer pass: unit tests only (the benchmarks and CUDA backend add nothing under ASan here).
# Several tests prove that a bug re-created by a bug point dies by SIGSEGV; ASan must leave those
# signals to the process (and to faultline's crash handler) instead of turning them into exit 1.
# The sanitizer builds trade optimisation for build time (-O1), and the TSan and fuzz builds,
# which run no debugger, full debug info too (-g1: line tables, enough for their reports; the
# ASan pass keeps -g: its end-to-end tests read hung runs' stacks with gdb, which names functions
# by their scopes only with full debug info). The CUDA backend's GPU tests only skip here.
san_flags=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DFAULTLINE_BENCHMARKS=OFF -DFAULTLINE_CUDA=OFF)
ci/setup.sh build-asan -DFAULTLINE_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g" \
  "-DCMAKE_C_FLAGS=-O1 -g" -DFAULTLINE_BENCHMARKS=OFF -DFAULTLINE_CUDA=OFF
step "ASan+UBSan build"
(cd build-asan &&
  ASAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0 \
  ctest --output-on-failure --parallel "$(nproc)" --timeout 600 -LE no-sanitize)
step "CTest under ASan+UBSan"
# ThreadSanitizer over the shared accounting (lock, seqlock, slots: threads writing and reading
# one region) and the registry (workers, drains, concurrent unregisters); only those test
# binaries are built.
cmake -S . -B build-tsan -G Ninja -DFAULTLINE_SANITIZE=thread "${san_flags[@]}" >/dev/null
cmake --build build-tsan --target accounting_test registry_test
TSAN_OPTIONS="suppressions=$PWD/ci/tsan.supp halt_on_error=1" build-tsan/bin/accounting_test --gtest_brief=1
TSAN_OPTIONS="suppressions=$PWD/ci/tsan.supp halt_on_error=1" build-tsan/bin/registry_test --gtest_brief=1
step "TSan: build and run"

# The region validator under libFuzzer (clang, ASan+UBSan), for a bounded time.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFAULTLINE_FUZZ=ON \
  -DFAULTLINE_SANITIZE=address,undefined -DFAULTLINE_TESTS=OFF "${san_flags[@]}" >/dev/null
cmake --build build-fuzz --target accounting_fuzz

mkdir -p build-fuzz/corpus
build-fuzz/bin/accounting_fuzz -max_total_time=30 -timeout=10 -print_final_stats=1 build-fuzz/corpus 2>&1 | tail -3
step "fuzz: build and 30 s run"

# --- ci/cluster: the cluster manifests, workflow and scripts validated (schemas, shellcheck), and
# sharding by each scheduler's variables end to end (every run in one shard, the merge counts all).
ci/cluster/check.sh
.venv/bin/python -m pytest ci/cluster/tests -q -p no:cacheprovider
# The Slurm path for real: a one-node Slurm (its own munged, slurmctld, slurmd) runs submit.sh's
# array soak and gather, then a cancelled and requeued shard (about 80 s; root, as the daemons).
if [ "$(id -u)" -eq 0 ]; then ci/cluster/slurm/one-node.sh; else sudo -E ci/cluster/slurm/one-node.sh; fi
# --- end ci/cluster
step "cluster: manifests, sharding, one-node Slurm"

# The GPU record's generator (ci/gpu/record.py) over real-format fixtures.
.venv/bin/python -m pytest ci/gpu/tests ci/tests -q -p no:cacheprovider
step "the GPU record's and CI's own tests"
printf 'ci/test.sh: %s\n' "${steps[@]}" >&2
echo "ci/test.sh: all tests passed in $SECONDS s"
