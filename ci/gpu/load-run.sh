#!/usr/bin/env bash
# The GPU machine under load (issue 27): the whole catalog at --jobs = cores and twice that, the
# names of crashes of a real client at --jobs = cores against a bare pipe, and a soak. Each part
# fits one device command (10 minutes); campaigns live in WORK (kept while the machine is warm)
# and continue with --resume when a part is called again, so a part cut short loses nothing.
#   ci/gpu/load-run.sh DEST WORK OUT PART [ARG]
#     DEST  what ci/gpu/carry.sh packed (bin/faultline, bin/faultline-scenarios, bin/rmm_client_*)
#     WORK  where the campaigns stay between calls (e.g. .device/load, git-ignored)
#     OUT   where this call's summaries go (the device tool's $OUT)
#     PART  verify J          faultline verify --repeat 30 --jobs J over the whole catalog
#           clean J           faultline run --all --repeat 300 --jobs J (the clean variants)
#           names J           ci/fidelity.py: rmm_client_2604 --detached-worker, bare through a pipe
#                             against faultline exec (default crash capture), interleaved, J at once,
#                             60 runs each; how many crashes their signature names by frames
#           soak J BUDGET     faultline soak --jobs J --budget BUDGET (resumed when WORK has one)
# Every part prints its table; OUT gets PART-J.txt (and the JSON summaries); WORK/PART-J the
# campaign. A part stops (SIGINT: runs in flight end, nothing recorded is lost) after
# LOAD_PART_S seconds (default 540) so that its call returns; call it again to go on.
# Needs FAULTLINE_DEVICE unset or cuda (the catalog runs on the GPU).
set -uo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
dest=$(cd "$1" && pwd)
work=$2
out=$3
part=$4
jobs=$5
mkdir -p "$work" "$out"
work=$(cd "$work" && pwd)
fl="$dest/bin/faultline"
limit=(timeout --signal=INT --kill-after=30 "${LOAD_PART_S:-540}")
export FAULTLINE_DEVICE=${FAULTLINE_DEVICE:-cuda}
export LD_LIBRARY_PATH="$dest/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
name="$part-$jobs"
campaign="$work/$name"
# A campaign already there is continued; anything else of an earlier attempt is replaced.
resume=(--replace)
[ -f "$campaign/campaign.json" ] && resume=(--resume)

case $part in
  verify)
    "${limit[@]}" "$fl" verify --repeat 30 --jobs "$jobs" --seed 27 --out "$campaign" "${resume[@]}" --json \
      >"$out/$name.json" 2>"$out/$name.txt"
    rc=$?
    ;;
  clean)
    "${limit[@]}" "$fl" run --all --repeat 300 --jobs "$jobs" --seed 2700 --out "$campaign" "${resume[@]}" --json \
      >"$out/$name.json" 2>"$out/$name.txt"
    rc=$?
    ;;
  names)
    "${limit[@]}" python3 "$(dirname "$0")/../fidelity.py" --build "$dest" --runs 60 --jobs "$jobs" --timeout 120 \
      --modes bare-pipe,default --program "$dest/bin/rmm_client_2604 --detached-worker" \
      --json "$out/$name.json" >"$out/$name.txt" 2>&1
    rc=$?
    ;;
  soak)
    budget=${6:?soak needs a budget}
    seed=(--seed 2727)
    resume=(--replace)
    [ -f "$campaign/soak.json" ] && resume=(--resume) && seed=()
    "${limit[@]}" "$fl" soak --jobs "$jobs" --budget "$budget" "${seed[@]}" --out "$campaign" "${resume[@]}" \
      >"$out/$name.txt" 2>&1
    rc=$?
    [ -f "$campaign/soak.json" ] && cp "$campaign/soak.json" "$out/$name.json"
    ;;
  *)
    echo "load-run.sh: unknown part $part" >&2
    exit 2
    ;;
esac
tail -n 40 "$out/$name.txt"
echo "load-run.sh: $name exit $rc"
exit 0
