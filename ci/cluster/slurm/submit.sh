#!/usr/bin/env bash
# Submits a sharded nightly soak to Slurm: an array of SHARDS tasks (soak-array.sbatch, one GPU
# each), then the gather job (gather.sbatch), which runs once every task has ended, whether it
# passed, found failures, failed or was cancelled (afterany).
#
#   OUT_ROOT=/shared/faultline/$(date -u +%F) BUDGET=8h ci/cluster/slurm/submit.sh [sbatch options...]
#
# SHARDS (default 8) tasks, with ids 0..SHARDS-1; SEED defaults to today's date and is the same for
# every task; the sbatch options (a partition, an account) go to both jobs. Everything else in the
# environment (BUDGET, SCENARIOS, JOBS, BASELINE, ...) reaches the jobs as sbatch exports it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAULTLINE_ROOT=$(cd "$here/../../.." && pwd)
: "${OUT_ROOT:?set OUT_ROOT to a directory shared by every node, e.g. /shared/faultline/\$(date -u +%F)}"
SHARDS=${SHARDS:-8}
SEED=${SEED:-$(date -u +%Y%m%d)}
export FAULTLINE_ROOT OUT_ROOT SHARDS SEED

mkdir -p "$OUT_ROOT"
array=$(sbatch --parsable --array="0-$((SHARDS - 1))" --chdir="$OUT_ROOT" "$@" "$here/soak-array.sbatch")
array=${array%%;*}   # "jobid;cluster" on a federation
gather=$(sbatch --parsable --dependency="afterany:$array" --chdir="$OUT_ROOT" "$@" "$here/gather.sbatch")
gather=${gather%%;*}
echo "submitted soak array $array ($SHARDS shards, seed $SEED) and gather job $gather; results in $OUT_ROOT"
