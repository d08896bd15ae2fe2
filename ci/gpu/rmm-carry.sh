#!/usr/bin/env bash
# Packs what ci/gpu/rmm-clients.sh built for a GPU machine that has the driver but no RMM, no
# libbenchmark and no compiler: the binaries in DEST/bin, the shared libraries they need in
# DEST/lib (librmm.so and librapids_logger.so per release in DEST/lib/rmm-<series>/, as both
# releases ship a librmm.so; anything else that is not on a stock CUDA 13 machine in DEST/lib).
#   ci/gpu/rmm-carry.sh DEST        e.g. ci/gpu/rmm-carry.sh .device/rmm (git-ignored)
# Carried: build-rmm-client-*/bin/rmm_client_*, build-rmm/bin/alloc_bench when built, and
# faultline with its preloaded agent from $FAULTLINE_BUILD (default build/) when built, so DEST is
# self-contained (faultline finds the agent in ../lib, the programs find their libraries through
# their RUNPATH $ORIGIN/../lib/rmm-<series> and $ORIGIN/../lib: no LD_LIBRARY_PATH needed).
# Everything is stripped of debug information only: the symbol tables stay, so crash stacks still
# name the functions. Left out as stock: glibc, libstdc++, libgcc_s, and the driver (libcuda,
# which the static cudart opens at run time). Fails when DEST would exceed 48 MiB.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: ci/gpu/rmm-carry.sh DEST" >&2
  exit 2
fi
dest=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
faultline_build=${FAULTLINE_BUILD:-$repo/build}
limit_mib=48

stock='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvidia-)'

programs=()
for p in "$repo"/build-rmm-client-*/bin/rmm_client_* "$repo/build-rmm/bin/alloc_bench"; do
  [ -x "$p" ] && programs+=("$p")
done
if ((${#programs[@]} == 0)); then
  echo "rmm-carry.sh: nothing built; run ci/gpu/rmm-clients.sh first" >&2
  exit 1
fi

rm -rf "$dest/bin" "$dest/lib"
mkdir -p "$dest/bin" "$dest/lib"
carry() {  # carry SRC DEST_FILE
  mkdir -p "$(dirname "$2")"
  strip --strip-debug -o "$2" "$1"
}
# The shared libraries of $1 (resolved where it was built) that a stock machine lacks.
carry_libs() {
  local program=$1 series
  series=$(readelf -d "$program" | grep -o 'ORIGIN/\.\./lib/rmm-[0-9.]*' | head -n 1 | sed 's/.*rmm-//') || true
  while read -r name path; do
    [[ $name =~ $stock ]] && continue
    if [ "$path" = "not" ]; then
      echo "rmm-carry.sh: $program needs $name, which is not found" >&2
      exit 1
    fi
    case $name in
      librmm.so | librapids_logger.so)
        [ -n "$series" ] || { echo "rmm-carry.sh: $program has no rmm-<series> RUNPATH" >&2; exit 1; }
        [ -f "$dest/lib/rmm-$series/$name" ] || carry "$path" "$dest/lib/rmm-$series/$name" ;;
      *) [ -f "$dest/lib/$name" ] || carry "$path" "$dest/lib/$name" ;;
    esac
  done < <(ldd "$program" | awk '$2 == "=>" { print $1, $3 }')
}

for p in "${programs[@]}"; do
  carry "$p" "$dest/bin/$(basename "$p")"
  carry_libs "$p"
done
if [ -x "$faultline_build/bin/faultline" ] && [ -f "$faultline_build/lib/libfaultline_agent.so" ]; then
  carry "$faultline_build/bin/faultline" "$dest/bin/faultline"
  carry "$faultline_build/lib/libfaultline_agent.so" "$dest/lib/libfaultline_agent.so"
  carry_libs "$faultline_build/bin/faultline"
  carry_libs "$faultline_build/lib/libfaultline_agent.so"
else
  echo "rmm-carry.sh: no faultline in $faultline_build (FAULTLINE_BUILD); carry it separately" >&2
fi

# Every carried program must resolve its libraries from DEST alone (apart from the stock ones).
for p in "$dest"/bin/*; do
  if ldd "$p" | grep -q "not found"; then
    echo "rmm-carry.sh: $p does not resolve from $dest:" >&2
    ldd "$p" | grep "not found" >&2
    exit 1
  fi
done
(cd "$dest" && find bin lib -type f -printf '%s\t%p\n' | sort -k2 | awk -F'\t' '{ printf "%8.2f MiB  %s\n", $1 / 1048576, $2 }')
total_kib=$(du -sk "$dest/bin" "$dest/lib" | awk '{ s += $1 } END { print s }')
echo "rmm-carry.sh: $dest holds $((total_kib / 1024)) MiB"
if ((total_kib > limit_mib * 1024)); then
  echo "rmm-carry.sh: more than $limit_mib MiB" >&2
  exit 1
fi
