#!/usr/bin/env bash
# Installs what faultline needs on a fresh Debian machine (only what is missing), then configures
# and builds. Idempotent and quick when everything is already there.
#   ci/setup.sh [BUILD_DIR [extra cmake args...]]     (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ gdb elfutils binutils libfiu-dev fiu-utils nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
          python3-plotly esbuild chromium libxml2-utils shellcheck libdw-dev libelf-dev zlib1g-dev liblzma-dev libbz2-dev libzstd-dev
          slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ci/setup.sh: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja "$@" >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)"
