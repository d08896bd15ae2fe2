#!/usr/bin/env bash
# Fetches RMM's C++ library from PyPI (the `librmm-cu13` wheel of one release series) and the
# wheels it needs for C++ use (its unconditional Requires-Dist: `rapids-logger`), and unpacks them
# into DEST, where CMake finds them through FAULTLINE_RMM_ROOT / RMM_ROOT (cmake/rmm_wheel.cmake).
#   ci/gpu/fetch-rmm.sh SERIES DEST        e.g. ci/gpu/fetch-rmm.sh 26.06 .whl/rmm-26.06
# SERIES is a release series (26.04, 26.06, ...: the newest 26.4.*, 26.6.*) or an exact version
# (26.6.0). The wheel is the manylinux_2_28 x86-64 one; its CCCL headers are bundled in it
# (include/rapids), its cudart is linked statically into librmm.so. Afterwards DEST holds
#   librmm/include (rmm, nvtx3), librmm/include/rapids (CCCL), librmm/lib64/librmm.so,
#   rapids_logger/include, rapids_logger/lib64/librapids_logger.so, wheels/, VERSIONS.txt
# and the script prints the include and library directories. Idempotent: a DEST already holding
# the same request is left as it is. Needs python3 with pip and network access to PyPI.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: ci/gpu/fetch-rmm.sh SERIES DEST   (SERIES: 26.04, 26.06, or an exact version)" >&2
  exit 2
fi
series=$1
dest=$2
python=${PYTHON:-python3}

# RAPIDS calls its series 26.06; PyPI holds them as 26.6.0 (PEP 440 drops the leading zero, and
# pip's prefix match `==26.06.*` does not normalise it), so strip leading zeros first.
if ! [[ $series =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
  echo "fetch-rmm.sh: '$series' is not a version or series (26.06, 26.6.0)" >&2
  exit 2
fi
normalized=$(echo "$series" | sed -E 's/(^|\.)0+([0-9])/\1\2/g')
case $normalized in
  *.*.*) spec="librmm-cu13==$normalized" ;;
  *) spec="librmm-cu13==$normalized.*" ;;
esac

if [ -f "$dest/VERSIONS.txt" ] && grep -qxF "request: $spec" "$dest/VERSIONS.txt"; then
  echo "fetch-rmm.sh: $dest already holds $spec" >&2
else
  rm -rf "$dest"
  mkdir -p "$dest/wheels"
  pip_download() {
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --python-version 3.11 --dest "$dest/wheels" "$@"
  }
  pip_download "$spec"
  rmm_wheel=$(ls "$dest"/wheels/librmm_cu13-*.whl)
  # The C++ dependencies are the wheel's unconditional requirements (no `extra ==` marker).
  mapfile -t deps < <("$python" - "$rmm_wheel" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            if "extra ==" not in req:
                print(req.split(";")[0].strip())
EOF
  )
  for dep in "${deps[@]}"; do pip_download "$dep"; done
  for w in "$dest"/wheels/*.whl; do "$python" -m zipfile -e "$w" "$dest"; done
  {
    echo "request: $spec"
    for w in "$dest"/wheels/*.whl; do echo "wheel: $(basename "$w")"; done
    echo "librmm git commit: $(cat "$dest/librmm/GIT_COMMIT" 2>/dev/null || echo unknown)"
    if [ -f "$dest/librmm/include/rmm/process_is_exiting.hpp" ]; then
      echo "rmm::process_is_exiting(): present"
    else
      echo "rmm::process_is_exiting(): absent"
    fi
  } >"$dest/VERSIONS.txt"
fi

root=$(cd "$dest" && pwd)
cat "$root/VERSIONS.txt"
echo "include: $root/librmm/include/rapids (CCCL, first) $root/librmm/include $root/rapids_logger/include"
echo "lib: $root/librmm/lib64 $root/rapids_logger/lib64"
echo "cmake: -DFAULTLINE_RMM_ROOT=$root   (ci/gpu/rmm_client: -DRMM_ROOT=$root)"
