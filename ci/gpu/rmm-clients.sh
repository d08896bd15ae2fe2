#!/usr/bin/env bash
# Builds the RMM client (ci/gpu/rmm_client) against two RMM releases from PyPI, one before the exit
# fix (26.04: no rmm::process_is_exiting()) and one after (26.06), fetching the wheels when they are
# not unpacked yet; with --bench, also alloc_bench with RMM's pool beside faultline's (build-rmm).
#   ci/gpu/rmm-clients.sh [--bench]
# Results: build-rmm-client-2604/bin/rmm_client_2604, build-rmm-client-2606/bin/rmm_client_2606
# (and build-rmm/bin/alloc_bench). Wheels under .whl/rmm-<series>. Then ci/gpu/rmm-carry.sh DEST.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=0
case ${1:-} in
  --bench) bench=1 ;;
  "") ;;
  *) echo "usage: ci/gpu/rmm-clients.sh [--bench]" >&2; exit 2 ;;
esac

# Builds share one lock with the other builds of this checkout.
build() { if command -v flock >/dev/null; then flock /tmp/fl-build.lock cmake --build "$@"; else cmake --build "$@"; fi; }

for series in 26.04 26.06; do
  tag=${series/./}
  ci/gpu/fetch-rmm.sh "$series" ".whl/rmm-$series" >/dev/null
  dir=build-rmm-client-$tag
  [ -f "$dir/build.ninja" ] || cmake -S ci/gpu/rmm_client -B "$dir" -G Ninja -DRMM_ROOT="$PWD/.whl/rmm-$series" >/dev/null
  build "$dir"
  echo "rmm-clients.sh: $dir/bin/rmm_client_$tag"
done

if ((bench)); then
  [ -f build-rmm/build.ninja ] ||
    cmake -S . -B build-rmm -G Ninja -DFAULTLINE_CUDA=ON -DFAULTLINE_RMM_ROOT="$PWD/.whl/rmm-26.06" >/dev/null
  build build-rmm --target alloc_bench
  echo "rmm-clients.sh: build-rmm/bin/alloc_bench"
fi
