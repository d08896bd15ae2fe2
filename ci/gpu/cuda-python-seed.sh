#!/usr/bin/env bash
# cuda-python's IPC child-process hang (NVIDIA/cuda-python issue #2004, guarded by PR #2124) in
# the suite's own processes, under `faultline exec` (issue 40). Nothing of the suite is changed:
# the pytest session is the program, with an outer timeout, and the faults are faultline's points.
#
#   ci/gpu/cuda-python-seed.sh [options] TREES OUT
#
# TREES holds the two trees of ../shared/cuda-python (copy it into a git-ignored folder that the
# device call carries: ../shared does not travel):
#   pre/   caf05e6a0c229fb96f77613426e6e60f8d44fccc, the first parent of the fix: the suite whose
#          children wedged CI for hours (a child that outlived its test's ignored join)
#   post/  ae34e4c304f8760c8a0890109fa9f502df0503b3, PR #2124 "layered defense against IPC
#          child-process hangs": helpers/child_processes.py (every join checked, survivors killed,
#          children tracked and killed before the pool fixture closes) and memory_ipc/conftest.py
#          (an outer pytest-timeout of the child timeout + 30 s on every IPC test)
# each as cuda_core/{pytest.ini,tests/} and cuda_python_test_helpers/.
#
# Per tree and fault spec, one `faultline exec` campaign in OUT/campaigns/TREE-SPEC/ (its
# results.jsonl, logs and the stacks of every process of each hung run), then OUT/table.md
# (ci/gpu/cuda-python-table.py): verdicts per tree and spec against the issue's requirements.
# The specs (--specs picks some, by name):
#   none         no fault: both trees pass (or skip what the machine lacks)
#   start-stop   process/start@python3*=2*off->stop: the session and multiprocessing's resource
#                tracker start; every later Python process (each test's children) stops before
#                its main: a child that never returns, as in #2004
#   start-delay  process/start@python3*=2*off->delay(DELAY): each child starts DELAY late, past
#                the test's 30 s join and the outer timeout: a child that spawns too slowly
#   import-stop  cuda/cuMemPoolImportPointer=stop: a child stops inside its import of the
#                parent's buffer, holding the imported pool
#   import-kill  cuda/cuMemPoolImportPointer=kill: a child is killed in that import
#   driver-start-stop  start-stop given from outside by the pytest driver (drivers/pytest, loaded
#                with -p faultline_pytest.plugin --faultline-faults=...): each test's processes
#                carry the agent, the session does not, so the first Python process a test starts
#                (multiprocessing's resource tracker) goes on: process/start@python3*=1*off->stop;
#                faultline exec --no-preload around it only for the outer timeout and the stacks
#
# Options:
#   --faultline BIN    faultline (default: $FAULTLINE_BIN, else build/bin/faultline)
#   --python PY        the interpreter (default: python3)
#   --wheels DIR       install DIR/*.whl (no index, no dependencies) into OUT/site, put first on
#                      PYTHONPATH: the releases the trees were tested with (cuda-core 1.0.1,
#                      cuda-bindings 13.2.0, cuda-pathfinder 1.5.4, pytest-rerunfailures, py-spy)
#                      over what the machine has
#   --runs N           runs of each fault spec per tree (default 20)
#   --clean-runs N     runs without a fault per tree (default 2)
#   --jobs J           runs at once in a fault campaign (default: N); clean ones run at 4
#   --timeout DUR      outer timeout of a run (default 100s: past the post tree's 60 s guard)
#   --delay DUR        start-delay's delay (default 150s: past the outer timeout)
#   --select ARGS      pytest's test selection (default: the IPC test with one spawned child,
#                      tests/memory_ipc/test_memory_ipc.py::TestIpcMempool::test_main[DeviceMR]:
#                      its parameter PinnedMR repeats it with pinned host memory)
#   --reruns           keep pytest-rerunfailures on in fault runs (default off there: its two
#                      reruns of a failing test triple a run's length and say nothing more)
#   --specs LIST       comma-separated spec names (default: all, none first)
#   --trees LIST       pre,post (default both)
#   --dry-run          check the trees, the options and every spec (faultline refuses a bad one
#                      before run 1) and print each campaign's command; runs nothing on a GPU
# Exit status: 0 when done (the table judges), 2 for bad arguments or trees.
set -euo pipefail

die() { echo "cuda-python-seed.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
faultline=${FAULTLINE_BIN:-$repo/build/bin/faultline}
python=python3 wheels='' runs=20 clean_runs=2 jobs='' timeout=100s delay=150s reruns=0 dry=0
select_args="tests/memory_ipc/test_memory_ipc.py::TestIpcMempool::test_main[DeviceMR]"
specs_wanted="none,start-stop,start-delay,import-stop,import-kill,driver-start-stop" trees_wanted="pre,post"
positional=()
while (($#)); do
  case $1 in
    --faultline) faultline=${2:?}; shift 2 ;;
    --python) python=${2:?}; shift 2 ;;
    --wheels) wheels=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --clean-runs) clean_runs=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --delay) delay=${2:?}; shift 2 ;;
    --select) select_args=${2:?}; shift 2 ;;
    --reruns) reruns=1; shift ;;
    --specs) specs_wanted=${2:?}; shift 2 ;;
    --trees) trees_wanted=${2:?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage ;;
    --) shift; positional+=("$@"); break ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} == 2)) || die "expected TREES and OUT (--help says what they are)"
trees_dir=${positional[0]} out=${positional[1]}
for n in runs clean_runs; do
  [[ ${!n} =~ ^[0-9]+$ ]] || die "--${n//_/-} must be a whole number, not '${!n}'"
done
((runs > 0)) || die "--runs must be at least 1"
jobs=${jobs:-$runs}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive whole number, not '$jobs'"
[[ $timeout =~ ^[0-9]+(ms|s|m)$ ]] || die "--timeout must be a duration such as 100s, not '$timeout'"
[[ $delay =~ ^[0-9]+(ms|s)$ ]] || die "--delay must be a duration such as 150s, not '$delay'"
[ -x "$faultline" ] || die "no faultline at $faultline (build it, or give --faultline)"
[ -d "$trees_dir" ] || die "TREES: no folder $trees_dir"
trees_dir=$(cd "$trees_dir" && pwd)

spec_of() {
  case $1 in
    none) echo "" ;;
    start-stop) echo 'process/start@python3*=2*off->stop' ;;
    start-delay) echo "process/start@python3*=2*off->delay($delay)" ;;
    import-stop) echo 'cuda/cuMemPoolImportPointer=stop' ;;
    import-kill) echo 'cuda/cuMemPoolImportPointer=kill' ;;
    driver-start-stop) echo 'process/start@python3*=1*off->stop' ;;
    *) return 1 ;;
  esac
}
IFS=, read -r -a specs <<<"$specs_wanted"
IFS=, read -r -a trees <<<"$trees_wanted"
for s in "${specs[@]}"; do spec_of "$s" >/dev/null || die "unknown spec name '$s' (none, start-stop, start-delay, import-stop, import-kill, driver-start-stop)"; done
for t in "${trees[@]}"; do
  case $t in pre|post) ;; *) die "unknown tree '$t' (pre, post)" ;; esac
  d=$trees_dir/$t
  for f in cuda_core/pytest.ini cuda_core/tests/conftest.py cuda_core/tests/memory_ipc/test_memory_ipc.py \
           cuda_python_test_helpers/cuda_python_test_helpers/__init__.py; do
    [ -f "$d/$f" ] || die "TREES: $d has no $f (TREES holds pre/ and post/ as ../shared/cuda-python does)"
  done
  # Which commit a tree is: the fix adds helpers/child_processes.py.
  if [ "$t" = post ] && [ ! -f "$d/cuda_core/tests/helpers/child_processes.py" ]; then
    die "TREES: post/ lacks tests/helpers/child_processes.py: it is not ae34e4c (the fix)"
  fi
  if [ "$t" = pre ] && [ -f "$d/cuda_core/tests/helpers/child_processes.py" ]; then
    die "TREES: pre/ has tests/helpers/child_processes.py: it is not caf05e6 (before the fix)"
  fi
done
if [ -n "$wheels" ]; then
  compgen -G "$wheels/*.whl" >/dev/null || die "--wheels: no .whl in $wheels"
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  die "OUT $out is not empty: give a new folder (nothing of an earlier seed run is replaced)"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Every spec is checked by faultline itself (the check it makes before run 1), whatever the mode.
for s in "${specs[@]}"; do
  spec=$(spec_of "$s")
  [ -n "$spec" ] || continue
  if ! err=$("$faultline" exec --repeat 1 --timeout 10s --no-stacks --out "$out/check-$s" --faults "$spec" -- true 2>&1); then
    die "faultline refuses spec $s ('$spec'): $err"
  fi
  rm -rf "$out/check-$s"
done

py=$python
if [ -n "$wheels" ] && ((dry == 0)); then
  # A folder first on PYTHONPATH rather than a venv: the machine's pytest and numpy may live where
  # a venv does not see them (a user site, another prefix), and the wheels must win over its own.
  "$python" -m pip install -q --target "$out/site" --no-index --no-deps "$wheels"/*.whl
  export PYTHONPATH=$out/site${PYTHONPATH:+:$PYTHONPATH}
  export PATH=$out/site/bin:$PATH  # py-spy, where a wheel brought it: hung Python processes' own frames
fi
if ((dry == 0)); then
  export PYTHONDONTWRITEBYTECODE=1
  [ -n "${CUDA_HOME:-}" ] || { [ -d /usr/local/cuda ] && export CUDA_HOME=/usr/local/cuda; }
  {
    echo "faultline: $("$faultline" --version 2>&1 | head -1)"
    echo "python: $("$py" -c 'import sys; print(sys.version.split()[0])')"
    "$py" -c 'import importlib.metadata as m
for d in ("cuda-core", "cuda-bindings", "cuda-pathfinder", "pytest", "pytest-timeout", "pytest-rerunfailures", "py-spy", "numpy"):
    try: print(d, m.version(d))
    except m.PackageNotFoundError: print(d, "absent")
import cuda.core, pytest; print("cuda.core from", cuda.core.__file__, "; pytest from", pytest.__file__)' 2>&1
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
  } >"$out/machine.txt"
  cat "$out/machine.txt"
fi

# campaign TREE NAME: one faultline exec campaign of the pytest session.
campaign() {
  local tree=$1 name=$2 spec n j
  spec=$(spec_of "$name")
  local faults=() plugins=(-p no:cacheprovider)
  if [[ $name == driver-* ]]; then
    faults=(--no-preload) n=$runs j=$jobs
    plugins+=(-p faultline_pytest.plugin "--faultline-bin=$faultline" "--faultline-faults=$spec")
    ((reruns)) || plugins+=(-p no:rerunfailures)
  elif [ -n "$spec" ]; then
    faults=(--faults "$spec") n=$runs j=$jobs
    ((reruns)) || plugins+=(-p no:rerunfailures)
  else
    n=$clean_runs j=4
  fi
  ((n > 0)) || return 0
  # shellcheck disable=SC2206  # --select is pytest's arguments, split as a shell would
  local cmd=("$faultline" exec --repeat "$n" --jobs "$j" --timeout "$timeout" --keep all
             --out "$out/campaigns/$tree-$name" "${faults[@]}" --
             "$py" -m pytest $select_args "${plugins[@]}" -q -rA)
  echo "== $tree $name ${spec:-(no fault)}: (cd $trees_dir/$tree/cuda_core && $(printf '%q ' "${cmd[@]}"))"
  ((dry)) && return 0
  mkdir -p "$out/campaigns"
  (cd "$trees_dir/$tree/cuda_core" && PYTHONPATH=$repo/drivers/pytest/src${PYTHONPATH:+:$PYTHONPATH} "${cmd[@]}") >"$out/campaigns/$tree-$name.summary" 2>&1 || true
  tail -3 "$out/campaigns/$tree-$name.summary"
}

for s in "${specs[@]}"; do
  # The two trees of one spec side by side: a fault campaign's runs mostly wait.
  pids=()
  for t in "${trees[@]}"; do
    if ((dry)); then campaign "$t" "$s"; else campaign "$t" "$s" & pids+=($!); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
done
if ((dry)); then
  echo "dry run: trees, options and specs checked; nothing run"
  rmdir "$out" 2>/dev/null || true
  exit 0
fi
python3 "$repo/ci/gpu/cuda-python-table.py" --timeout "$timeout" "$out" >"$out/table.md"
cat "$out/table.md"
