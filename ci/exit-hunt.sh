#!/usr/bin/env bash
# Our own medicine: faultline's own test executables run as whole processes, over and over, under
# `faultline soak -- BINARY`, for a time budget: the exit races, hangs and flakes that faultline
# exists to find, hunted in its own suite by faultline itself. Any run that is not a pass fails
# the hunt, and faultline's summary of that binary (its signature, top frames and a repro line)
# is printed.
#
#   ci/exit-hunt.sh [--build DIR] [--budget 90s | --runs N] [--jobs N] [--timeout 2m] [--no-preload]
#                   [--out DIR] [COMMAND...]
#
# COMMAND: a test executable with its arguments, one shell word list per argument
# ('registry_test --gtest_filter=registry_bug.*'); a bare name is looked up in DIR/bin. The default
# is the set most exposed to exit races (worker threads, forks, the simulated device's streams),
# which CI hunts in about 90 s. The budget is shared out evenly among the commands (`faultline soak
# -- COMMAND`); --runs N runs each command N times instead (`faultline exec --repeat N`); --jobs
# (default: the machine's cores) copies of a binary run at once, as two CI jobs on one machine would.
# --no-preload: for sanitizer builds (ASan wants to be first). Outputs go to OUT/NAME/ (default: a
# temporary directory, removed when every run passed); the table goes to stdout, one row per
# command (runs, outcomes).
#
# Exit status: 0 every run passed; 1 a run failed, crashed, hung or leaked (its summary printed);
# 2 bad usage or a command that is not there (before anything runs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "ci/exit-hunt.sh: $*" >&2
  exit 2
}

build=$root/build
budget=90s
runs=
jobs=$(nproc)
timeout=2m
preload=()
out=
while (($#)); do
  case "$1" in
    --build) build=$(cd "${2:?--build needs a directory}" && pwd) || die "--build $2: no such directory"; shift 2 ;;
    --budget) budget=${2:?--budget needs a duration}; shift 2 ;;
    --runs) runs=${2:?--runs needs a count}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a count}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs a duration}; shift 2 ;;
    --no-preload) preload=(--no-preload); shift ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) break ;;
  esac
done
commands=("$@")
if ((${#commands[@]} == 0)); then
  commands=(registry_test sim_backend_test ipc_test alloc_test accounting_test)
fi

seconds_of() {  # 90s, 2m, 1h, 45 -> seconds
  local d=$1
  case "$d" in
    *h) echo $((${d%h} * 3600)) ;;
    *m) echo $((${d%m} * 60)) ;;
    *s) echo $((${d%s})) ;;
    *) echo $((d)) ;;
  esac
}
[[ "$budget" =~ ^[0-9]+[smh]?$ ]] || die "--budget $budget: expected a number of seconds, minutes or hours (90s, 5m, 1h)"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs $jobs: expected a positive count"
[ -z "$runs" ] || [[ "$runs" =~ ^[1-9][0-9]*$ ]] || die "--runs $runs: expected a positive count"
total=$(seconds_of "$budget")
per=$((total / ${#commands[@]}))
[ -n "$runs" ] || ((per >= 1)) || die "--budget $budget is less than a second for each of ${#commands[@]} commands"

faultline=$build/bin/faultline
[ -x "$faultline" ] || die "$faultline not found: build first (bash ci/setup.sh)"

# Every command checked before the first run.
declare -a names=()
for c in "${commands[@]}"; do
  read -r -a words <<<"$c"
  ((${#words[@]})) || die "an empty command"
  exe=${words[0]}
  [[ "$exe" == */* ]] || exe=$build/bin/$exe
  [ -x "$exe" ] || die "${words[0]}: not an executable ($exe)"
  names+=("$(basename "$exe")")
done

keep_out=1
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/faultline-exit-hunt-XXXXXX")
  keep_out=0
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)  # each command runs from a folder of its own inside it

# The hunt runs as CI runs the tests, but with nothing of CI's own diagnostics in the processes:
# the crash-stack handler of the test main perturbs exit races (faultline reads cores instead).
unset FAULTLINE_TEST_CRASH_STACKS

failed=0
rows=()
for i in "${!commands[@]}"; do
  read -r -a words <<<"${commands[$i]}"
  [[ "${words[0]}" == */* ]] || words[0]=$build/bin/${words[0]}
  dir=$out/$i-${names[$i]}
  rc=0
  # From a directory of its own: a `core` folder where the hunt stands would keep cores from being
  # written, and two binaries must not share their relative paths.
  mkdir -p "$dir/cwd"
  if [ -n "$runs" ]; then
    campaign=(exec --repeat "$runs")
  else
    campaign=(soak --budget "${per}s")
  fi
  (cd "$dir/cwd" && "$faultline" "${campaign[@]}" --jobs "$jobs" --timeout "$timeout" ${preload[@]+"${preload[@]}"} \
    --out "$dir/soak" -- "${words[@]}") >"$dir/soak.log" 2>&1 || rc=$?
  line=$(grep -E '^[^ ].*: [0-9]+ runs, ' "$dir/soak.log" | tail -n 1 || true)
  rows+=("$(printf '%-60s %s' "${commands[$i]}" "${line#*: }")")
  if ((rc != 0)); then
    failed=1
    echo "ci/exit-hunt.sh: ${commands[$i]}: not every run passed (faultline exit $rc); its summary:" >&2
    sed -n '/^faultline: [0-9]*\/[0-9]* runs/!p' "$dir/soak.log" | tail -n 60 >&2
  fi
done

if [ -n "$runs" ]; then
  echo "ci/exit-hunt.sh: ${#commands[@]} command(s), $runs runs each, --jobs $jobs"
else
  echo "ci/exit-hunt.sh: ${#commands[@]} command(s), ${per} s each, --jobs $jobs"
fi
printf '  %s\n' "${rows[@]}"
if ((failed)); then
  echo "ci/exit-hunt.sh: FAILED: a run of faultline's own tests was not a pass (outputs in $out)" >&2
  exit 1
fi
((keep_out)) || rm -rf "$out"
exit 0
