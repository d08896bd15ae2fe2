#!/usr/bin/env bash
# Runs every test: the unit and end-to-end tests (CTest), `faultline verify` on the simulated
# device, the pytest driver's tests, then the unit tests again under ASan+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
export FAULTLINE_DEVICE=${FAULTLINE_DEVICE:-sim}

ci/setup.sh build
(cd build && ctest --output-on-failure --parallel "$(nproc)" --timeout 300)

# Sanitizer pass: unit tests only (the benchmarks and CUDA backend add nothing under ASan here).
# Several tests prove that a bug re-created by a bug point dies by SIGSEGV; ASan must leave those
# signals to the process (and to faultline's crash handler) instead of turning them into exit 1.
ci/setup.sh build-asan -DFAULTLINE_SANITIZE=address,undefined -DFAULTLINE_BENCHMARKS=OFF
(cd build-asan &&
  ASAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0 \
  ctest --output-on-failure --parallel "$(nproc)" --timeout 600 -LE no-sanitize)
echo "ci/test.sh: all tests passed"
