#!/usr/bin/env bash
# Builds HAMi-core's libvgpu.so (github.com/Project-HAMi/HAMi-core) from a clone of it at one
# commit, for the lock/ and fn/ points' check on a GPU (issue 18): nothing of HAMi-core is copied
# into this repository; the source is read from SRC and built in OUT.
#   ci/gpu/hami-core.sh SRC COMMIT OUT [BUILD_TYPE]
#   e.g. ci/gpu/hami-core.sh ~/HAMi-core 54b0ca3 build-hami-54b0ca3
#        ci/gpu/hami-core.sh ~/HAMi-core 54b0ca3 build-hami-54b0ca3-debug Debug
# HAMi-core's sources do not compile against CUDA 13's cuda.h, and the GPU machines' driver (580)
# still serves CUDA 12 entry points: the headers are CUDA 12.9's, from PyPI's
# nvidia-cuda-runtime-cu12 (cuda.h, cuda_runtime.h) and nvidia-nvml-dev-cu12 (nvml.h) wheels,
# unpacked into OUT/cuda-12.9/include (HAMi-core's CMakeLists.txt reads $CUDA_HOME/include).
# BUILD_TYPE (CMAKE_BUILD_TYPE): Release by default, HAMi-core's CMakeLists.txt's own default
#   branch (-O3 from CMake, -fvisibility=hidden: only its dlsym hook is exported; its functions are
#   in .symtab only, where the lock/ filter and fn/ points read them; the compiler clones,
#   inlines and tail-calls its lock wrappers: issue 39). Debug: -g, no -O, default visibility
#   (what HAMi-core's own build.sh passes). Only the vgpu target is built, so the Release build's
#   strip_symbol step (strip -x, which would drop the local symbols) does not run.
# Environment: CUDA_HOME (the headers above), CI_COMMIT_REF_NAME=COMMIT (HAMi-core's CMakeLists.txt
# names the build by its git branch, which an archived source has none of).
# Prints the path of libvgpu.so.
set -euo pipefail
if [ $# -ne 3 ] && [ $# -ne 4 ]; then
  echo "usage: ci/gpu/hami-core.sh SRC COMMIT OUT [BUILD_TYPE]" >&2
  exit 2
fi
src=$1 commit=$2 out=$3 build_type=${4:-Release}
git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null || { echo "hami-core.sh: $src has no commit $commit" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
wheels=${FAULTLINE_HAMI_WHEELS:-$out/wheels}
mkdir -p "$wheels"
if ! compgen -G "$wheels/nvidia_cuda_runtime_cu12-12.9*.whl" >/dev/null || ! compgen -G "$wheels/nvidia_nvml_dev_cu12-12.9*.whl" >/dev/null; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
    'nvidia-cuda-runtime-cu12==12.9.*' 'nvidia-nvml-dev-cu12==12.9.*'
fi
cuda_home=$out/cuda-12.9
rm -rf "$cuda_home" "$out/unpacked"
mkdir -p "$cuda_home/include" "$out/unpacked"
for w in "$wheels"/nvidia_cuda_runtime_cu12-12.9*.whl "$wheels"/nvidia_nvml_dev_cu12-12.9*.whl; do
  python3 -m zipfile -e "$w" "$out/unpacked"
done
cp -r "$out/unpacked"/nvidia/cuda_runtime/include/. "$out/unpacked"/nvidia/nvml_dev/include/. "$cuda_home/include/"
# Link stubs: libvgpu.so links -lcuda -lnvidia-ml, which the GPU machine's driver provides at run
# time; here empty libraries with the driver's sonames stand in for them at link time.
mkdir -p "$cuda_home/lib64"
for stub in cuda:libcuda.so.1 nvidia-ml:libnvidia-ml.so.1; do
  echo 'void faultline_link_stub(void) {}' | cc -x c -shared -fPIC -Wl,-soname,"${stub#*:}" -o "$cuda_home/lib64/lib${stub%%:*}.so" -
done
rm -rf "$out/src" "$out/build"
mkdir -p "$out/src"
git -C "$src" archive "$commit" | tar -x -C "$out/src"
CUDA_HOME=$cuda_home CI_COMMIT_REF_NAME=$commit LIBRARY_PATH=$cuda_home/lib64 cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE="$build_type" \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log" >&2; exit 1; }
LIBRARY_PATH=$cuda_home/lib64 cmake --build "$out/build" -j"$(nproc)" --target vgpu >"$out/build.log" 2>&1 || { tail -30 "$out/build.log" >&2; exit 1; }
lib=$(find "$out/build" -name 'libvgpu.so' | head -1)
[ -n "$lib" ] || { echo "hami-core.sh: no libvgpu.so in $out/build" >&2; exit 1; }
echo "$lib"
