#!/usr/bin/env bash
# Runs the Slurm path of the sharded soak for real, on this one machine: brings up a private Slurm
# (munged, slurmctld and slurmd as root, everything under one temporary folder, nothing of the
# system's services or configuration used), submits the project's own submit.sh unchanged, then
# checks what the jobs wrote, and takes everything down again, checks passing or not.
#
#   sudo ci/cluster/slurm/one-node.sh          # about 80 s on 2 cores, all of it under 5 minutes
#
# Phase 1: an array of SHARDS soak tasks (BUDGET each, one run at a time, the simulated device)
#   and the dependent gather job with a baseline. Checks: every task and the gather ended with
#   exit status 0; every run is in exactly one shard (run k in shard k mod n, no run number twice,
#   each shard's numbers without a gap and as many as its soak counted); the merged JUnit and
#   Markdown count every record of the shards; the gate ran on all the shards and passed.
# Phase 2: an array of RESUME_SHARDS tasks; task 1 is cancelled (scancel) while it runs, then
#   requeued (scontrol requeue) and resumes its shard (nightly-soak.sh passes --resume). Checks:
#   the resumed soak saw every run recorded before the cancel, its shard has no run twice and no
#   gap, it spent only what was left of its budget, and the gather merged it after it ended.
#
# Needs root and the Debian packages slurm-wlm (or slurmctld, slurmd, slurm-client) and munge:
#   apt-get install -y slurm-wlm munge
# Settings (environment):
#   FAULTLINE (or FAULTLINE_BIN)  the faultline binary (default: build/bin/faultline of this checkout)
#   SHARDS, BUDGET         phase 1: array size (default 4) and each task's budget in seconds (20s)
#   RESUME_SHARDS, RESUME_BUDGET  phase 2: the same (default 2, 20s)
#   SCENARIOS              the soak's scenarios (default 'exit/*'); SEED (default: today's date)
#   ONE_NODE_TIMEOUT       seconds all the waiting may take together (default 240)
#   ONE_NODE_PORT          slurmctld's port; slurmd takes the next one (default 16817)
#   ONE_NODE_KEEP          a directory to copy the outputs and daemon logs to before the cleanup
#   ONE_NODE_INJECT        testing this script: 'duplicate' copies a record of shard 0 into
#                          shard 1 before the checks (they must fail); 'abort' fails right after
#                          the first submission, while tasks run (the cleanup must end them)
# Exit status: 0 every check passed, 1 a check failed, 2 a prerequisite is missing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
started=$SECONDS

FAULTLINE=${FAULTLINE:-${FAULTLINE_BIN:-$root/build/bin/faultline}}
SHARDS=${SHARDS:-4}
BUDGET=${BUDGET:-20s}
RESUME_SHARDS=${RESUME_SHARDS:-2}
RESUME_BUDGET=${RESUME_BUDGET:-20s}
SCENARIOS=${SCENARIOS:-exit/*}
SEED=${SEED:-$(date -u +%Y%m%d)}
timeout_s=${ONE_NODE_TIMEOUT:-240}
port=${ONE_NODE_PORT:-16817}
keep=${ONE_NODE_KEEP:-}
inject=${ONE_NODE_INJECT:-}

usage_error() { echo "one-node: $*" >&2; exit 2; }

# --- prerequisites: checked, never installed here ----------------------------------------------
[ "$(id -u)" -eq 0 ] || usage_error "run it as root: slurmd, slurmctld and munged run as root here"
missing=()
for c in slurmctld slurmd sbatch squeue sinfo scontrol scancel munged munge unmunge python3; do
  command -v "$c" >/dev/null || missing+=("$c")
done
[ "${#missing[@]}" -eq 0 ] ||
  usage_error "missing ${missing[*]}: install the Debian packages slurm-wlm and munge (apt-get install -y slurm-wlm munge)"
case $FAULTLINE in /*) ;; *) FAULTLINE=$root/$FAULTLINE ;; esac
[ -x "$FAULTLINE" ] || usage_error "$FAULTLINE is not built (cmake --build build --target faultline faultline-scenarios)"
for b in "$BUDGET" "$RESUME_BUDGET"; do
  [[ $b =~ ^[1-9][0-9]*s$ ]] || usage_error "BUDGET and RESUME_BUDGET are seconds, e.g. 20s (not '$b')"
done
if [ "$SHARDS" -lt 2 ] || [ "$RESUME_SHARDS" -lt 2 ]; then usage_error "SHARDS and RESUME_SHARDS must be at least 2"; fi
case $inject in ''|duplicate|abort) ;; *) usage_error "ONE_NODE_INJECT is 'duplicate' or 'abort', not '$inject'" ;; esac

# Nothing of an outer scheduler may reach the jobs (sbatch exports this environment to them) or
# faultline (which takes its shard from these variables and refuses two schedulers at once).
# shellcheck disable=SC2046  # the names are words
unset $(compgen -v | grep -E '^(SLURM_|SBATCH_|SALLOC_|SRUN_|SQUEUE_|SINFO_|SCONTROL_|GTEST_(TOTAL_SHARDS|SHARD_INDEX)$|JOB_COMPLETION_INDEX$|FAULTLINE_SHARD_COUNT$)' || true)

# --- checks and the summary --------------------------------------------------------------------
verdicts=()
failed=0
record() {  # PASS|FAIL NAME [DETAIL]
  verdicts+=("$(printf '%-4s  %s%s' "$1" "$2" "${3:+: $3}")")
  [ "$1" = PASS ] || failed=1
  echo "one-node: ${verdicts[-1]}" >&2
}
die() { record FAIL "$1" "${2:-}"; exit 1; }
deadline=$((SECONDS + timeout_s))
wait_until() {  # DESCRIPTION COMMAND...: polls COMMAND every second until it succeeds or time is up
  local what=$1
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "one-node: timed out waiting until $what" >&2; return 1; }
    sleep 1
  done
}

# --- the private cluster -----------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/faultline-slurm.XXXXXX")
chmod 755 "$tmp"   # munged wants every directory above its socket searchable by all
conf=$tmp/slurm.conf
sock=$tmp/munge/munge.socket
munged_pid='' ctld_pid='' slurmd_pid=''

alive() {  # PID: exists and is not a zombie
  local stat
  [ -n "$1" ] && { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
stop_pid() {  # PID: SIGTERM, then SIGKILL after 5 s; reaped if it is a child of this script
  local pid=$1 i
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
    ! alive "$pid" || kill -KILL "$pid" 2>/dev/null || true
  fi
  [ -z "$pid" ] || wait "$pid" 2>/dev/null || true
}
# Processes of this cluster: the daemons and every process of a job (slurmstepd, the batch
# scripts, faultline and its runs) carry this cluster's SLURM_CONF in their environment. This
# script's own environment (as it was started) does not.
cluster_pids() {
  local e pid kv
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}
    pid=${pid%/environ}
    if [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ]; then continue; fi
    { while IFS= read -r -d '' kv; do
        [ "$kv" != "SLURM_CONF=$conf" ] || { echo "$pid"; break; }
      done <"$e"; } 2>/dev/null || true
  done
}
# slurmstepd exits after its job and is reaped by init, which may take a moment: its pids are
# noted while jobs run, and the cleanup waits until they are gone.
stepds=' '
note_stepds() {
  local pid comm
  for pid in $(cluster_pids); do
    { read -r comm <"/proc/$pid/comm"; } 2>/dev/null || continue
    if [ "$comm" = slurmstepd ] && [[ $stepds != *" $pid "* ]]; then stepds+="$pid "; fi
  done
}

cleanup() {
  local status=$? pids pid seen i left comm
  trap - EXIT INT TERM
  set +e
  seen=$(cluster_pids)   # slurmstepd and the jobs' processes, while they still run
  if alive "$ctld_pid"; then
    # Jobs first: slurmstepd outlives slurmd, and a cancelled task's processes get SIGTERM, then
    # SIGKILL after KillWait.
    pids=$(timeout 5 squeue -h -o '%i/%T' 2>/dev/null | tr '\n' ' ')
    [ -z "$pids" ] || echo "one-node: cancelling the jobs left: $pids" >&2
    timeout 10 scancel --user=root >/dev/null 2>&1
    deadline=$((SECONDS + 15))
    wait_until "every job has ended" queue_empty
  fi
  if [ "$failed" -ne 0 ] || [ "$status" -ne 0 ]; then
    for f in "$tmp"/log/slurmctld.log "$tmp"/log/slurmd.log; do
      [ -f "$f" ] && { echo "--- last lines of $f" >&2; tail -n 15 "$f" >&2; }
    done
  fi
  if [ -n "$keep" ]; then
    mkdir -p "$keep" && cp -a "$tmp/out" "$tmp/log" "$conf" "$keep/" 2>/dev/null
    echo "one-node: outputs and logs copied to $keep" >&2
  fi
  stop_pid "$slurmd_pid"
  stop_pid "$ctld_pid"
  pids=$(cluster_pids)
  if [ -n "$pids" ]; then
    echo "one-node: ending leftover processes of the cluster: $(echo "$pids" | tr '\n' ' ')" >&2
    for pid in $pids; do stop_pid "$pid"; done
  fi
  stop_pid "$munged_pid"
  rm -rf "$tmp"
  [ "$status" -eq 0 ] || [ "$failed" -ne 0 ] ||
    record FAIL "aborted" "exit status $status (interrupted, or a command of this script failed: see above)"
  # What has ended but not yet been reaped by its parent (slurmstepd's is init) has no
  # environment to recognise it by: wait for every process seen above to be gone.
  for ((i = 0; i < 50; i++)); do
    left=
    for pid in $seen; do [ ! -e "/proc/$pid" ] || left+=" $pid"; done
    for pid in $stepds; do
      { read -r comm <"/proc/$pid/comm"; } 2>/dev/null || continue
      [ "$comm" != slurmstepd ] || [[ $left == *" $pid"* ]] || left+=" $pid"
    done
    [ -n "$left" ] || break
    sleep 0.1
  done
  pids=$(cluster_pids)
  if [ -n "$pids" ]; then
    record FAIL "cleanup" "processes of the cluster still run: $(echo "$pids" | tr '\n' ' ')"
  elif [ -n "$left" ]; then
    record PASS "cleanup" "daemons and jobs ended; not yet reaped by their parent:$left"
  else
    record PASS "cleanup" "daemons, jobs ($(wc -w <<<"$seen") processes of the cluster) and $tmp gone"
  fi
  echo >&2
  echo "one-node: summary ($((SECONDS - started)) s)" >&2
  printf '  %s\n' "${verdicts[@]}" >&2
  if [ "$failed" -ne 0 ] || [ "$status" -ne 0 ]; then
    echo "one-node: FAIL" >&2
    [ "$status" -ne 0 ] || status=1
  else
    echo "one-node: PASS (${#verdicts[@]} checks)" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp"/{munge,state,spool,log,out}
if command -v mungekey >/dev/null; then
  mungekey --create --keyfile="$tmp/munge/munge.key"
else
  dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 600 "$tmp/munge/munge.key"
munged --foreground --socket="$sock" --key-file="$tmp/munge/munge.key" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/munged.seed" >"$tmp/log/munged.out" 2>&1 &
munged_pid=$!
munge_answers() { munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; }
wait_until "munged answers on $sock" munge_answers || die "munged" "did not start: $(tail -n 3 "$tmp/log/munged.out")"

# The node as slurmd sees it (CPUs, sockets, cores, memory), named localhost; 4 stand-in GPUs,
# because soak-array.sbatch asks for one per task.
hw=$(slurmd -C | head -n 1)
hw=${hw#NodeName=* }
cat >"$conf" <<EOF
ClusterName=faultline-one-node
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
KillWait=5
MinJobAge=600
InactiveLimit=0
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 $hw Gres=gpu:4 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
# Slurm wants a device file per GPU; with TaskPlugin=task/none nothing opens them.
cat >"$tmp/gres.conf" <<'EOF'
NodeName=localhost Name=gpu File=/dev/null
NodeName=localhost Name=gpu File=/dev/zero
NodeName=localhost Name=gpu File=/dev/full
NodeName=localhost Name=gpu File=/dev/urandom
EOF
export SLURM_CONF=$conf

slurmctld -D -c -f "$conf" >"$tmp/log/slurmctld.out" 2>&1 &
ctld_pid=$!
slurmd -D -N localhost -f "$conf" >"$tmp/log/slurmd.out" 2>&1 &
slurmd_pid=$!
node_idle() { [ "$(sinfo -h -n localhost -o %T 2>/dev/null)" = idle ]; }
wait_until "sinfo shows localhost idle" node_idle ||
  die "cluster" "the node did not come up: $(sinfo -h -o '%T %E' 2>&1 | head -n 1)"
record PASS "cluster" "slurmctld, slurmd (${hw%% *}) and munged up, node idle after $((SECONDS - started)) s"

# --- what every job gets (sbatch exports this environment) -------------------------------------
read -r -a scenario_names <<<"$SCENARIOS"
export FAULTLINE SEED SCENARIOS JOBS=1 FAULTLINE_DEVICE=sim
# The gate needs a baseline: a short unsharded soak of the same scenarios on this machine.
if [ -z "${BASELINE:-}" ]; then
  BASELINE=$tmp/out/baseline.json
  "$FAULTLINE" soak "${scenario_names[@]}" --budget 3s --jobs 1 --seed 1 --out "$tmp/out/baseline-soak" \
    >"$tmp/log/baseline.out" 2>&1 || true
  "$FAULTLINE" gate --write-baseline "$BASELINE" --current "$tmp/out/baseline-soak" >>"$tmp/log/baseline.out" 2>&1 ||
    die "baseline" "could not be written: $(tail -n 3 "$tmp/log/baseline.out")"
fi
export BASELINE
# soak-array.sbatch asks for 8 CPUs and 32G per task, gather.sbatch for 2 CPUs and 4G: too much
# for one small machine. submit.sh passes its arguments to both sbatch calls.
sbatch_args=(--partition=ci --cpus-per-task=1 --mem=256M)

array='' gather=''
submit() {  # OUT_ROOT SHARDS BUDGET: submit.sh as it is; sets array and gather
  local said
  said=$(OUT_ROOT=$1 SHARDS=$2 BUDGET=$3 "$here/submit.sh" "${sbatch_args[@]}" 2>&1) ||
    die "submit $(basename "$1")" "submit.sh failed: $said"
  array=$(sed -n 's/^submitted soak array \([0-9][0-9]*\) .*/\1/p' <<<"$said")
  gather=$(sed -n 's/.* and gather job \([0-9][0-9]*\);.*/\1/p' <<<"$said")
  if [ -z "$array" ] || [ -z "$gather" ]; then die "submit $(basename "$1")" "unexpected output: $said"; fi
  record PASS "submit $(basename "$1")" "$said"
}
field() {  # JOB FIELD: a field of scontrol show job
  { timeout 10 scontrol -o show job "$1" 2>/dev/null | grep -o "\(^\| \)$2=[^ ]*" | head -n 1 | cut -d= -f2-; } || true
}
gone() {  # JOB...: none is pending, running or completing
  local q
  note_stepds
  q=$(timeout 10 squeue -h -o %i -j "$(IFS=,; echo "$*")") || return 1
  [ -z "$q" ]
}
ended_ok() {  # NAME JOB: JobState COMPLETED, ExitCode 0:0
  local state code
  state=$(field "$2" JobState)
  code=$(field "$2" ExitCode)
  if [ "$state" = COMPLETED ] && [ "$code" = 0:0 ]; then
    record PASS "$1" "job $2 COMPLETED, exit code 0:0"
  else
    record FAIL "$1" "job $2 ${state:-unknown}, exit code ${code:-unknown} (see its output in OUT_ROOT)"
  fi
}
gather_after() {  # NAME GATHER TASK...: the gather job started after every task had ended
  local start last=
  start=$(field "$2" StartTime)
  for t in "${@:3}"; do
    local end
    end=$(field "$t" EndTime)
    [[ $end < $last ]] || last=$end
  done
  if [ -n "$start" ] && [[ ! $start < $last ]]; then
    record PASS "$1" "gather started $start, the last task ended $last"
  else
    record FAIL "$1" "gather started ${start:-never}, the last task ended $last"
  fi
}
queue_empty() { [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]; }
lines_of() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

analyse() {  # OUT_ROOT SHARDS BUDGET_S GATHER_LOG [VICTIM RECORDED_AT_CANCEL ATTEMPT2_LOG]
  if ! python3 - "$@" >"$tmp/checks.tsv" 2>"$tmp/checks.err" <<'PY'; then
import glob, json, os, re, sys
import xml.etree.ElementTree as ET

root, n, budget_s, gather_log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
victim = int(sys.argv[5]) if len(sys.argv) > 5 else None
label = os.path.basename(root)

def verdict(ok, name, detail):
    print(f"{'PASS' if ok else 'FAIL'}\t{label}: {name}\t{' '.join(str(detail).split())}")

def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default

owner, total = {}, 0
for i in range(n):
    d = f"{root}/shard-{i}"
    try:
        runs = [json.loads(l)["run"] for l in read(f"{d}/results.jsonl").splitlines() if l.strip()]
        soak = json.loads(read(f"{d}/soak.json", "{}"))
        campaign = json.loads(read(f"{d}/campaign.json", "{}"))
    except (ValueError, KeyError) as e:
        verdict(False, f"shard {i}", f"unreadable output: {e}")
        continue
    status = read(f"{d}/soak.status").strip()
    logs = glob.glob(f"{root}/faultline-soak-*_{i}.out")
    said = re.search(r"shard (\d+/\d+) \((SLURM_ARRAY_TASK_ID=\d+) of (SLURM_ARRAY_TASK_COUNT=\d+)\)",
                     read(logs[0]) if logs else "")
    verdict(bool(said) and said.group(1) == f"{i}/{n}" and said.group(2) == f"SLURM_ARRAY_TASK_ID={i}",
            f"shard {i} from Slurm's variables", f"faultline: {said.group(0)}" if said else
            f"no 'shard {i}/{n} (SLURM_ARRAY_TASK_ID=...' in {logs[0] if logs else 'its output'}")
    verdict(status == "0" and campaign.get("shard") == f"{i}/{n}" and soak.get("finished") is True,
            f"shard {i} ended", f"soak.status {status or 'missing'}, campaign shard {campaign.get('shard')}, "
            f"finished {soak.get('finished')}")
    problems = []
    if not runs:
        problems.append("no run recorded")
    if len(set(runs)) != len(runs):
        problems.append(f"{len(runs) - len(set(runs))} run numbers recorded twice")
    alien = sorted(r for r in runs if r % n != i)
    if alien:
        problems.append(f"runs {alien[:5]} belong to other shards")
    if sorted(runs) != list(range(i, i + n * len(runs), n)):
        problems.append(f"the numbers are not {i}, {i + n}, ... without a gap")
    if soak.get("runs") != len(runs):
        problems.append(f"soak.json counts {soak.get('runs')} runs, results.jsonl has {len(runs)}")
    verdict(not problems, f"shard {i} runs", "; ".join(problems) or
            f"{len(runs)} runs, numbers {i}, {i + n}, ... {i + n * (len(runs) - 1)}, as many as its soak counted")
    twice = [r for r in runs if r in owner and owner[r] != i]
    if twice:
        verdict(False, f"shard {i} disjoint", f"runs {twice[:5]} are also in shard {owner[twice[0]]}")
    for r in runs:
        owner.setdefault(r, i)
    total += len(runs)

verdict(len(owner) == total, "every run in exactly one shard",
        f"{total} records, {len(owner)} distinct run numbers over {n} shards")

merged = f"{root}/merged"
try:
    suites = ET.parse(f"{merged}/junit.xml").getroot()
    junit_runs = sum(int(p.get("value")) for p in suites.iter("property") if p.get("name") == "runs")
    verdict(junit_runs == total, "merged JUnit counts them all",
            f"JUnit: {junit_runs} runs in {suites.get('tests')} test cases; shards: {total} records")
except (OSError, ET.ParseError, TypeError, ValueError) as e:
    verdict(False, "merged JUnit counts them all", f"{merged}/junit.xml: {e}")
num = lambda s: int(s.replace(",", ""))  # faultline writes 2,716
m = re.search(r"([\d,]+) runs from ([\d,]+) results files?", read(f"{merged}/summary.md"))
verdict(bool(m) and num(m.group(1)) == total and num(m.group(2)) == n, "merged summary counts them all",
        f"summary.md: {m.group(0) if m else 'no run count'}; shards: {total} records in {n} files")
verdict(os.path.getsize(f"{merged}/report.html") > 0 if os.path.exists(f"{merged}/report.html") else False,
        "merged HTML report written", f"{merged}/report.html")

log = read(gather_log)
g = re.search(r"^gate: ([\d,]+) runs? of ([\d,]+) variants? \(([^)]*)\)", log, re.M)
x = re.search(r"gather: exit status \d+", log)
judged = sorted(re.findall(r"/shard-(\d+)/results\.jsonl", g.group(3))) if g else []
verdict(bool(g) and num(g.group(1)) == total and judged == sorted(str(i) for i in range(n))
        and "gate: passed" in log and "gather: exit status 0" in log and "missing" not in log,
        "gate ran on the merged results",
        (f"gate: {g.group(1)} runs of {g.group(2)} variants of shards {', '.join(judged)}" if g else "no gate output")
        + f" (shards: {total} records); "
        + ("passed" if "gate: passed" in log else "did not pass") + "; "
        + (x.group(0) if x else "no gather exit status") + ("; a shard is missing" if "missing" in log else ""))

if victim is not None:
    at_cancel, attempt2 = int(sys.argv[6]), read(sys.argv[7])
    d = f"{root}/shard-{victim}"
    runs = [json.loads(l)["run"] for l in read(f"{d}/results.jsonl").splitlines() if l.strip()]
    soak = json.loads(read(f"{d}/soak.json", "{}"))
    seen = re.search(r"(\d+) runs were recorded before this resume", attempt2)
    verdict(bool(seen) and int(seen.group(1)) == at_cancel and "(resuming)" in attempt2,
            f"shard {victim} resumed what was recorded",
            f"{at_cancel} complete records when cancelled; the requeued task says: "
            + (seen.group(0) if seen else "no resume line"))
    spent = soak.get("spent_ms", 0) / 1000
    verdict(len(runs) > at_cancel and spent <= budget_s + 5, f"shard {victim} continued its budget",
            f"{len(runs) - at_cancel} runs after the resume, {len(runs)} in all; {spent:.1f} s spent of {budget_s:.0f} s")
PY
    record FAIL "$(basename "$1"): analysis" "$(tail -n 3 "$tmp/checks.err")"
  fi
  local verdict name detail
  while IFS=$'\t' read -r verdict name detail; do record "$verdict" "$name" "$detail"; done <"$tmp/checks.tsv"
}

# --- phase 1: the sharded soak and its gather --------------------------------------------------
out1=$tmp/out/sharded
submit "$out1" "$SHARDS" "$BUDGET"
tasks=()
for ((i = 0; i < SHARDS; i++)); do tasks+=("${array}_$i"); done
if [ "$inject" = abort ]; then
  # shellcheck disable=SC2317  # called through wait_until
  first_runs() { [ "$(field "${array}_0" JobState)" = RUNNING ]; }
  wait_until "a task runs" first_runs || true
  die "injected abort" "ONE_NODE_INJECT=abort, with tasks running"
fi
wait_until "the soak array $array and gather job $gather have ended" gone "$array" "$gather" ||
  die "sharded: jobs" "still in the queue: $(squeue -h -o '%i %T' 2>&1 | tr '\n' ' ')"
for t in "${tasks[@]}"; do ended_ok "sharded: task $t" "$t"; done
ended_ok "sharded: gather" "$gather"
gather_after "sharded: gather after the array" "$gather" "${tasks[@]}"
if [ "$inject" = duplicate ]; then
  head -n 1 "$out1/shard-0/results.jsonl" >>"$out1/shard-1/results.jsonl"
  echo "one-node: ONE_NODE_INJECT=duplicate: a record of shard 0 copied into shard 1" >&2
fi
analyse "$out1" "$SHARDS" "${BUDGET%s}" "$out1/faultline-soak-gather-$gather.out"

# --- phase 2: a task cancelled while it runs, requeued, resumed ---------------------------------
out2=$tmp/out/resume
submit "$out2" "$RESUME_SHARDS" "$RESUME_BUDGET"
victim=${array}_1
tasks=()
for ((i = 0; i < RESUME_SHARDS; i++)); do tasks+=("${array}_$i"); done
busy() { [ "$(field "$victim" JobState)" = RUNNING ] && [ "$(lines_of "$out2/shard-1/results.jsonl")" -ge 100 ]; }
wait_until "task $victim runs and has recorded 100 runs" busy || die "resume: cancel" "task $victim never got going"
scancel "$victim"
cancelled() { [ "$(field "$victim" JobState)" = CANCELLED ] && gone "$victim"; }
wait_until "task $victim is cancelled and its processes have ended" cancelled ||
  die "resume: cancel" "task $victim is $(field "$victim" JobState)"
at_cancel=$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if l.endswith("\n") and json.loads(l)))' \
  "$out2/shard-1/results.jsonl")
cp "$out2/faultline-soak-$victim.out" "$tmp/log/cancelled-attempt.out"   # the requeued task truncates it
record PASS "resume: cancel" "task $victim cancelled while running: $at_cancel runs recorded, soak.status $(cat "$out2/shard-1/soak.status" 2>/dev/null || echo missing)"
# A requeued job waits the credential lifetime (120 s) before it may start again: start it now.
if ! scontrol requeue "$victim" || ! scontrol update JobId="$victim" StartTime=now; then
  die "resume: requeue" "scontrol requeue $victim failed"
fi
record PASS "resume: requeue" "task $victim requeued: $(field "$victim" JobState), restarts $(field "$victim" Restarts)"
wait_until "the soak array $array and gather job $gather have ended" gone "$array" "$gather" ||
  die "resume: jobs" "still in the queue: $(squeue -h -o '%i %T' 2>&1 | tr '\n' ' ')"
for t in "${tasks[@]}"; do ended_ok "resume: task $t" "$t"; done
restarts=$(field "$victim" Restarts)
if [ "$restarts" = 1 ]; then record PASS "resume: task $victim ran twice" "Restarts=1"
else record FAIL "resume: task $victim ran twice" "Restarts=${restarts:-unknown}"; fi
ended_ok "resume: gather" "$gather"
gather_after "resume: gather after the requeued task" "$gather" "${tasks[@]}"
analyse "$out2" "$RESUME_SHARDS" "${RESUME_BUDGET%s}" "$out2/faultline-soak-gather-$gather.out" \
  1 "$at_cancel" "$out2/faultline-soak-$victim.out"
