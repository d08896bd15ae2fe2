#!/usr/bin/env bash
# Validates ci/cluster without a cluster: the Kubernetes manifests against the Kubernetes API
# schema (kubernetes-validate, strict: unknown fields fail) and against each other (the shard count
# is written in four places), the GitHub workflow against the workflow schema (check-jsonschema),
# and every shell script with `bash -n` and shellcheck. The validators are installed into .venv
# (from PyPI, pinned); once they are there it takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."

validators=(kubernetes-validate==1.37.0 check-jsonschema==0.39.0)
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q "${validators[@]}"   # about a second when they are already there
command -v shellcheck >/dev/null || { echo "check.sh: shellcheck is missing (ci/setup.sh installs it)" >&2; exit 2; }

manifests=(ci/cluster/k8s/*.yaml)
# The oldest Kubernetes with every field the Jobs use (backoffLimitPerIndex: 1.29), and the newest
# schema the validator knows.
for version in 1.29.0 1.37.0; do
  .venv/bin/kubernetes-validate --strict --quiet --kubernetes-version "$version" "${manifests[@]}"
done
.venv/bin/python - "${manifests[@]}" <<'PY'
# What the schema cannot say: the soak Job's completions, parallelism and FAULTLINE_SHARD_COUNT and
# the gather Job's SHARDS are one number; backoffLimitPerIndex needs restartPolicy Never; each pod
# writes under its own index.
import sys, yaml
docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]
jobs = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == "Job"}
env = lambda job: {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
soak, gather = jobs["soak"], jobs["gather"]
n = soak["spec"]["completions"]
counts = {"parallelism": soak["spec"]["parallelism"], "FAULTLINE_SHARD_COUNT": int(env(soak)["FAULTLINE_SHARD_COUNT"]),
          "gather SHARDS": int(env(gather)["SHARDS"])}
errors = [f"{k} is {v}, completions {n}" for k, v in counts.items() if v != n]
if soak["spec"]["completionMode"] != "Indexed": errors.append("completionMode is not Indexed")
if soak["spec"]["template"]["spec"]["restartPolicy"] != "Never": errors.append("backoffLimitPerIndex needs restartPolicy Never")
if "$JOB_COMPLETION_INDEX" not in " ".join(soak["spec"]["template"]["spec"]["containers"][0]["args"]):
    errors.append("the soak pods' OUT does not name JOB_COMPLETION_INDEX")
if env(soak)["SEED"] != env(soak)["NIGHT"] or env(gather)["NIGHT"] != env(soak)["NIGHT"]: errors.append("NIGHT and SEED differ")
for e in errors: print(f"check.sh: k8s/soak-indexed-job.yaml: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
.venv/bin/check-jsonschema --builtin-schema vendor.github-workflows ci/cluster/github-workflow-example.yml

scripts=(ci/cluster/*.sh ci/cluster/slurm/*.sh ci/cluster/slurm/*.sbatch)
for s in "${scripts[@]}"; do bash -n "$s"; done
shellcheck --shell=bash "${scripts[@]}"
echo "check.sh: ${#manifests[@]} manifests, the workflow and ${#scripts[@]} scripts are valid"
