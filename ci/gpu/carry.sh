#!/usr/bin/env bash
# Packs what `ci/gpu-check --from DEST` needs on a GPU machine that has the driver but no compiler,
# no libfiu and no libbenchmark: the binaries in DEST/bin, the shared libraries in DEST/lib.
#   ci/gpu/carry.sh DEST        e.g. ci/gpu/carry.sh .device/gpu (git-ignored)
# From $FAULTLINE_BUILD (default build/, a CUDA build): faultline, faultline-scenarios, the unit
# test binaries gpu-check runs, every *_bench, the fl_cuda_* programs, fl_testdata_pass and _noop,
# fl_accounting_node, and build/lib/*.so (the preloaded agent). When ci/gpu/rmm-clients.sh has
# built them, ci/gpu/rmm-carry.sh adds the RMM clients (build-rmm-client-*/) with each release's
# librmm in DEST/lib/rmm-<series>/, and build-rmm/bin/alloc_bench (which also measures RMM's pool)
# replaces build/bin/alloc_bench. Every library ldd resolves that a stock CUDA machine lacks
# (libbenchmark, ...) goes to DEST/lib under its soname. Everything is stripped of debug
# information only (`strip --strip-debug`): the symbol tables stay, so crash signatures still name
# functions. faultline finds its agent in ../lib; gpu-check puts DEST/lib on LD_LIBRARY_PATH for
# the rest. Prints each file's size and the total; fails above 50 MiB or when a carried program
# would not resolve its libraries from DEST.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: ci/gpu/carry.sh DEST" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=$(mkdir -p "$1" && cd "$1" && pwd)
build=${FAULTLINE_BUILD:-$repo/build}
limit_mib=50
# Left out as stock (the same list as rmm-carry.sh): glibc, libstdc++, libgcc_s, the driver.
stock='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvidia-)'

[ -x "$build/bin/faultline" ] || { echo "carry.sh: no $build/bin/faultline (build first, or set FAULTLINE_BUILD)" >&2; exit 1; }
[ -x "$build/bin/cuda_backend_test" ] || { echo "carry.sh: $build has no cuda backend (configure with -DFAULTLINE_CUDA=ON)" >&2; exit 1; }

# The RMM part first: rmm-carry.sh starts from an empty DEST/bin and DEST/lib.
rmm=0
if compgen -G "$repo/build-rmm-client-*/bin/rmm_client_*" >/dev/null || [ -x "$repo/build-rmm/bin/alloc_bench" ]; then
  FAULTLINE_BUILD=$build "$repo/ci/gpu/rmm-carry.sh" "$dest" >/dev/null
  rmm=1
else
  rm -rf "${dest:?}/bin" "${dest:?}/lib"
  mkdir -p "$dest/bin" "$dest/lib"
fi

carry() {  # carry SRC DEST_FILE
  strip --strip-debug -o "$2" "$1"
}
carry_libs() {  # the libraries of $1 that a stock machine lacks, into DEST/lib under their soname
  local name path
  while read -r name path; do
    [[ $name =~ $stock ]] && continue
    if [ "$path" = "not" ]; then
      echo "carry.sh: $1 needs $name, which is not found here" >&2
      exit 1
    fi
    case $name in librmm.so | librapids_logger.so) continue ;; esac  # rmm-carry.sh placed them per release
    # The NCCL programs link the stand-in libnccl.so.2; on the GPU machine the real one is used.
    case $name in libnccl.so.*) continue ;; esac
    [ -f "$dest/lib/$name" ] || carry "$path" "$dest/lib/$name"
  done < <(ldd "$1" | awk '$2 == "=>" { print $1, $3 }')
}

missing=()
programs=(faultline faultline-keeper faultline-core-handler faultline-scenarios cuda_backend_test alloc_test ipc_test registry_test accounting_test
          fl_testdata_pass fl_testdata_noop fl_accounting_node)
for p in "$build"/bin/*_bench "$build"/bin/fl_cuda_* "$build"/bin/fl_nccl_*; do
  [ -x "$p" ] && programs+=("$(basename "$p")")
done
for name in "${programs[@]}"; do
  src=$build/bin/$name
  if [ ! -x "$src" ]; then
    missing+=("$name")
    continue
  fi
  # build-rmm's alloc_bench (pool vs cudaMalloc vs async vs RMM's pool) wins over build/'s.
  if [ "$name" = alloc_bench ] && [ "$rmm" = 1 ] && [ -x "$repo/build-rmm/bin/alloc_bench" ]; then
    continue
  fi
  carry "$src" "$dest/bin/$name"
done
for lib in "$build"/lib/*.so; do
  [ -f "$lib" ] && carry "$lib" "$dest/lib/$(basename "$lib")"
done
# cuda_points_bench's stand-in driver, in a folder of its own: never on the loader's path, where it
# would hide the real libcuda.so.1.
fake=$build/faults/preload/fakecuda/libcuda.so.1
if [ -f "$fake" ]; then
  mkdir -p "$dest/fakecuda"
  carry "$fake" "$dest/fakecuda/libcuda.so.1"
fi
# CUPTI, which the agent dlopens beside itself to see late CUDA calls (a stock driver machine has
# none): the toolkit's libcupti.so.13, found through the agent's build or the usual toolkit path.
for cupti in "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcupti.so.13 "${CUDA_HOME:-/usr/local/cuda}"/lib/libcupti.so.13 \
             "${CUDA_HOME:-/usr/local/cuda}"/extras/CUPTI/lib64/libcupti.so.13; do
  if [ -f "$cupti" ]; then
    carry "$(readlink -f "$cupti")" "$dest/lib/libcupti.so.13"
    break
  fi
done
for f in "$dest"/bin/* "$dest"/lib/*.so; do
  carry_libs "$f"
done
if ((${#missing[@]})); then
  echo "carry.sh: not built in $build: ${missing[*]}" >&2
  exit 1
fi

# Every carried program must resolve its libraries from DEST alone (apart from the stock ones),
# with DEST/lib on LD_LIBRARY_PATH as gpu-check sets it.
for p in "$dest"/bin/*; do
  if LD_LIBRARY_PATH=$dest/lib ldd "$p" | grep -q "not found"; then
    echo "carry.sh: $p does not resolve from $dest:" >&2
    LD_LIBRARY_PATH=$dest/lib ldd "$p" | grep "not found" >&2
    exit 1
  fi
done
(cd "$dest" && find bin lib -type f -printf '%s\t%p\n' | sort -k2 | awk -F'\t' '{ printf "%8.2f MiB  %s\n", $1 / 1048576, $2 }')
total_kib=$(du -sk "$dest/bin" "$dest/lib" | awk '{ s += $1 } END { print s }')
echo "carry.sh: $dest holds $((total_kib / 1024)) MiB ($( ((rmm)) && echo "with" || echo "without") the RMM builds)"
if ((total_kib > limit_mib * 1024)); then
  echo "carry.sh: more than $limit_mib MiB" >&2
  exit 1
fi
