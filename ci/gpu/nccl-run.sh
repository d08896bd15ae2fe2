#!/usr/bin/env bash
# On a machine with two GPUs: the nccl/ points and the distributed verdict on the real NCCL, through
# `faultline exec`, for the plain NCCL program (fl_nccl_allreduce, device memory; its dlopen build;
# and its build as a library loaded RTLD_LOCAL) and for torch.distributed launched by torchrun. DEST is what ci/gpu/carry.sh packed; each
# case's campaign goes to OUT/<case>/, and OUT/table.md gets one line per case (its runs' outcomes
# and the first run's ranks line).
#   ci/gpu/nccl-run.sh DEST OUT [plain|torch|table|fsdp4|all]     (default all: plain and torch)
# table  (two GPUs) issue 41's table: faults/preload/testing/torch_steps.py --mode table (broadcast,
#        all_reduce, reduce_scatter_tensor, synchronize per step) with no point, a stopped
#        broadcast, a killed reduce-scatter, a delayed all-reduce and a failed init.
# fsdp4  (four GPUs) torch_steps.py --mode fsdp on four ranks: one rank stopped, one killed, one
#        delayed past the process group's timeout, and a planted desync (rank 2 skips the broadcast
#        of step 3, no point).
# In table and fsdp4 every case also runs PyTorch's flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE,
# TORCH_NCCL_DUMP_ON_TIMEOUT, dumps under OUT/<case>.fr/) with the watchdog's timeout FR_TIMEOUT_S
# and TORCH_NCCL_ASYNC_ERROR_HANDLING=0 (it dumps, and leaves the hang to faultline's timeout), and,
# where this PyTorch ships torch/distributed/flight_recorder, its analyser over the dumps:
# OUT/<case>.fr.txt, and a line in OUT/flight-recorder.md beside faultline's verdict.
# The real libnccl.so.2 is the one of the machine's PyTorch (the nvidia-nccl wheel), put first on
# LD_LIBRARY_PATH. Settings: REPEAT (3), TORCH_REPEAT (2), STEPS_REPEAT (1), HANG_TIMEOUT (25s),
# STEPS_HANG_TIMEOUT (45s), FR_TIMEOUT_S (20), PYTHON (python3).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: ci/gpu/nccl-run.sh DEST OUT [plain|torch|table|fsdp4|all]" >&2
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
steps_repeat=${STEPS_REPEAT:-1}
steps_hang=${STEPS_HANG_TIMEOUT:-45s}
fr_timeout=${FR_TIMEOUT_S:-20}
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

# The flight recorder's view of case NAME: its analyser over OUT/NAME.fr/, where this PyTorch
# ships one, into OUT/NAME.fr.txt; a line in OUT/flight-recorder.md beside faultline's signature.
flight_recorder() {  # flight_recorder NAME
  local name=$1 dumps=$out/$1.fr fr=$out/$1.fr.txt
  local sig
  sig=$("$python" -c 'import json,sys
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(next((r.get("signature") or "" for r in recs if r.get("outcome") not in (None, "pass")), "pass"))' \
    "$out/$name/results.jsonl" 2>/dev/null)
  if ! "$python" -c 'import torch.distributed.flight_recorder.fr_trace' 2>/dev/null; then
    echo "this PyTorch ships no torch.distributed.flight_recorder" >"$fr"
  elif ! ls "$dumps"/nccl_trace_rank_* >/dev/null 2>&1; then
    echo "no flight recorder dump in $dumps" >"$fr"
  else
    "$python" -m torch.distributed.flight_recorder.fr_trace "$dumps" -p nccl_trace_rank_ >"$fr" 2>&1 ||
      echo "(analyser exit $?)" >>"$fr"
  fi
  printf '| %s | %s | %s |\n' "$name" "$sig" "$(grep -v '^$' "$fr" | tail -n 4 | tr '\n|' ' /')" >>"$out/flight-recorder.md"
}

steps_case() {  # steps_case NAME SPEC TIMEOUT NPROC -- PROGRAM-ARGS...
  local name=$1 spec=$2 timeout=$3 nproc=$4
  shift 5
  mkdir -p "$out/$name.fr"
  local fr=(--env "TORCH_NCCL_TRACE_BUFFER_SIZE=2000" --env "TORCH_NCCL_DUMP_ON_TIMEOUT=1"
            --env "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$out/$name.fr/nccl_trace_rank_"
            --env "TORCH_NCCL_ASYNC_ERROR_HANDLING=0" --env "FL_TORCH_TIMEOUT_S=$fr_timeout")
  case_run "$name" "$spec" "$steps_repeat" "$timeout" "${fr[@]}" -- \
    "$python" -m torch.distributed.run --nproc-per-node "$nproc" "$repo/faults/preload/testing/torch_steps.py" "$@"
  flight_recorder "$name"
}

table_cases() {  # issue 41's table, two GPUs
  local t=(--mode table --steps 8)
  steps_case table-none "" 120s 2 -- "${t[@]}"
  steps_case table-stop "nccl/ncclBroadcast@rank=1=2*off->stop" "$steps_hang" 2 -- "${t[@]}"
  steps_case table-kill "nccl/ncclReduceScatter@rank=0=1*off->kill" 90s 2 -- "${t[@]}"
  steps_case table-delay "nccl/ncclAllReduce@rank=1=delay(2s)" 120s 2 -- "${t[@]}"
  steps_case table-initfail "nccl/ncclCommInitRank*@rank=1=fail(ncclSystemError)" 90s 2 -- "${t[@]}"
}

fsdp4_cases() {  # item 4 of issue 41, four GPUs
  local f=(--mode fsdp --steps 8 --every 3)
  steps_case fsdp4-stop "nccl/ncclAllGather@rank=2=3*off->stop" "$steps_hang" 4 -- "${f[@]}"
  steps_case fsdp4-kill "nccl/ncclReduceScatter@rank=3=2*off->kill" 90s 4 -- "${f[@]}"
  steps_case fsdp4-delay "nccl/ncclBroadcast@rank=1=1*off->delay(60s)" "$steps_hang" 4 -- "${f[@]}"
  steps_case fsdp4-desync "" "$steps_hang" 4 -- "${f[@]}" --desync 2:3
}

case $which in
  plain) plain ;;
  torch) torch_cases ;;
  table) table_cases ;;
  fsdp4) fsdp4_cases ;;
  all) plain; torch_cases ;;
  *) echo "nccl-run.sh: plain, torch, table, fsdp4 or all, not '$which'" >&2; exit 2 ;;
esac
cat "$table"
if [ -f "$out/flight-recorder.md" ]; then
  echo
  echo "| case | faultline | flight recorder (analyser's last lines) |"
  echo "|---|---|---|"
  cat "$out/flight-recorder.md"
fi
