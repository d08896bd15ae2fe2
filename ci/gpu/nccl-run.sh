#!/usr/bin/env bash
# On a machine with two GPUs: the nccl/ points and the distributed verdict on the real NCCL, through
# `faultline exec`, for the plain NCCL program (fl_nccl_allreduce, device memory; its dlopen build;
# and its build as a library loaded RTLD_LOCAL) and for torch.distributed launched by torchrun. DEST is what ci/gpu/carry.sh packed; each
# case's campaign goes to OUT/<case>/, and OUT/table.md gets one line per case (its runs' outcomes
# and the first run's ranks line).
#   ci/gpu/nccl-run.sh DEST OUT [plain|torch|all]     (default all)
# The real libnccl.so.2 is the one of the machine's PyTorch (the nvidia-nccl wheel), put first on
# LD_LIBRARY_PATH. Settings: REPEAT (3), TORCH_REPEAT (2), HANG_TIMEOUT (25s), PYTHON (python3).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: ci/gpu/nccl-run.sh DEST OUT [plain|torch|all]" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
which=${3:-all}
python=${PYTHON:-python3}
repeat=${REPEAT:-3}
torch_repeat=${TORCH_REPEAT:-2}
hang=${HANG_TIMEOUT:-25s}
nccl_lib=$("$python" - <<'PY'
import glob, os, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for f in glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so.2")):
        print(os.path.dirname(f)); sys.exit(0)
sys.exit(1)
PY
) || { echo "nccl-run.sh: no nvidia/nccl/lib/libnccl.so.2 in $python's site-packages" >&2; exit 1; }
export LD_LIBRARY_PATH=$nccl_lib:$dest/lib NO_COLOR=1
table=$out/table.md
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | sed 's/^/    GPU /'
  echo "    libnccl.so.2: $nccl_lib"
  echo
  echo "| case | spec | runs | outcomes | ranks of the first failed run |"
  echo "|---|---|---|---|---|"
} >"$table"

case_run() {  # case_run NAME SPEC REPEAT TIMEOUT [--env K=V ...] -- CMD...
  local name=$1 spec=$2 n=$3 timeout=$4
  shift 4
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  echo "=== $name: ${spec:-(no point)}" >&2
  "$dest/bin/faultline" exec -n "$n" --timeout "$timeout" --keep all -o "$out/$name" --replace --json \
    ${spec:+--faults "$spec"} "${opts[@]}" -- "$@" >"$out/$name.summary.json" 2>"$out/$name.err"
  "$python" - "$out/$name" "$name" "$spec" >>"$table" <<'PY'
import collections, json, sys
d, name, spec = sys.argv[1:4]
recs = [json.loads(l) for l in open(d + "/results.jsonl") if l.strip()]
runs = [r for r in recs if "outcome" in r]
c = collections.Counter(r["outcome"] for r in runs)
first = next((r for r in runs if r["outcome"] != "pass"), None)
ranks = ""
if first and first.get("ranks"):
    ranks = "; ".join(f"{x['rank']} {x['state']}" + (f" #{x['collectives']}" if x.get("collectives") else "") +
                      (f" {x['signal']['name']}" if x.get("signal") else "") for x in first["ranks"])
sig = (first or {}).get("signature", "")
print(f"| {name} | `{spec or '-'}` | {len(runs)} | {', '.join(f'{k} {v}' for k, v in sorted(c.items()))} | {ranks} — {sig[:160]} |")
PY
}

plain() {
  local p=$dest/bin/fl_nccl_allreduce args=(--nranks 2 --iters 20 --memory device)
  case_run plain-none "" "$repeat" 60s -- "$p" "${args[@]}"
  case_run plain-stop "nccl/ncclAllReduce@rank=1=2*off->stop" "$repeat" "$hang" -- "$p" "${args[@]}"
  case_run plain-kill "nccl/ncclAllReduce@rank=1=4*off->kill" "$repeat" 60s -- "$p" "${args[@]}"
  case_run plain-initfail "nccl/ncclCommInitRank@rank=0=fail(ncclSystemError)" "$repeat" 60s -- "$p" "${args[@]}"
  case_run plain-dlopen-stop "nccl/ncclAllReduce@rank=1=2*off->stop" "$repeat" "$hang" -- \
    "$dest/bin/fl_nccl_allreduce_dlopen" "${args[@]}"
  case_run plain-local-stop "nccl/ncclAllReduce@rank=1=2*off->stop" "$repeat" "$hang" -- \
    "$dest/bin/fl_nccl_allreduce_local" "${args[@]}"
}

torch_cases() {
  local run=("$python" -m torch.distributed.run --nproc-per-node 2 "$repo/faults/preload/testing/torch_allreduce.py")
  local watchdog=(--env FL_TORCH_TIMEOUT_S=15 --env TORCH_NCCL_ASYNC_ERROR_HANDLING=1)
  local no_watchdog=(--env FL_TORCH_TIMEOUT_S=600 --env TORCH_NCCL_ASYNC_ERROR_HANDLING=0)
  case_run torch-none "" "$torch_repeat" 120s -- "${run[@]}"
  case_run torch-stop-aeh0 "nccl/ncclAllReduce@rank=1=2*off->stop" "$torch_repeat" 60s "${no_watchdog[@]}" -- "${run[@]}"
  case_run torch-stop-aeh1 "nccl/ncclAllReduce@rank=1=2*off->stop" "$torch_repeat" 90s "${watchdog[@]}" -- "${run[@]}"
  case_run torch-kill-aeh0 "nccl/ncclAllReduce@rank=1=4*off->kill" "$torch_repeat" 60s "${no_watchdog[@]}" -- "${run[@]}"
  case_run torch-kill-aeh1 "nccl/ncclAllReduce@rank=1=4*off->kill" "$torch_repeat" 90s "${watchdog[@]}" -- "${run[@]}"
  case_run torch-initfail "nccl/ncclCommInitRank*@rank=0=fail(ncclSystemError)" "$torch_repeat" 120s -- "${run[@]}"
}

case $which in
  plain) plain ;;
  torch) torch_cases ;;
  all) plain; torch_cases ;;
  *) echo "nccl-run.sh: plain, torch or all, not '$which'" >&2; exit 2 ;;
esac
cat "$table"
