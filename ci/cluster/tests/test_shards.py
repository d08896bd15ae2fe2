"""Sharded runs end to end, without a GPU or a cluster.

Goal: whichever scheduler hands out the shard indexes (GoogleTest's variables, a Kubernetes
Indexed Job's completion index, a Slurm job array's task id), every run of a campaign lands in
exactly one shard, and `faultline report` over the shard directories counts every run once.
Method: one unsharded reference campaign of `exit/*` on the simulated device, then, for each
scheduler style, one `faultline run` per shard with only that scheduler's variables in its
environment; the union of the shards' results.jsonl must be the reference's runs (same run
numbers, names and seeds), each in one shard, and the merged JUnit must count them all. Schedulers
whose variables disagree, or that give an index without its count, must be refused with exit
status 2 and a message naming the variables.

    FAULTLINE=build/bin/faultline .venv/bin/python -m pytest ci/cluster/tests -q -p no:cacheprovider
"""

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FAULTLINE = Path(os.environ.get("FAULTLINE", ROOT / "build" / "bin" / "faultline"))
SHARDS = 3
REPEAT = 5
CAMPAIGN = ["run", "exit/*", "--repeat", str(REPEAT), "--seed", "7", "--jobs", "2", "--no-stacks"]

# Every variable some scheduler's sharding convention uses: none may leak in from the environment
# this test itself runs in (CTest, a Slurm allocation, a pod).
SCHEDULER_VARS = re.compile(r"^(GTEST_(TOTAL_SHARDS|SHARD_INDEX|SHARD_STATUS_FILE)|JOB_COMPLETION_INDEX|"
                            r"FAULTLINE_SHARD_COUNT|SLURM_ARRAY_\w+)$")


def clean_env(**scheduler):
    env = {k: v for k, v in os.environ.items() if not SCHEDULER_VARS.match(k)}
    env["FAULTLINE_DEVICE"] = "sim"
    env.update({k: str(v) for k, v in scheduler.items()})
    return env


def faultline(args, env):
    return subprocess.run([str(FAULTLINE), *args], env=env, capture_output=True, text=True, timeout=300)


def runs_of(out_dir):
    """(run, name, seed) of every line of out_dir/results.jsonl."""
    lines = (out_dir / "results.jsonl").read_text().splitlines()
    return [(r["run"], r["name"], r["seed"]) for r in map(json.loads, filter(None, lines))]


# The variables each scheduler sets in the task that performs shard i of SHARDS.
STYLES = {
    "gtest": lambda i: {"GTEST_TOTAL_SHARDS": SHARDS, "GTEST_SHARD_INDEX": i},
    "kubernetes-indexed-job": lambda i: {"JOB_COMPLETION_INDEX": i, "FAULTLINE_SHARD_COUNT": SHARDS},
    # sbatch --array=1-3: ids 1..3, so shard i is task id i+1.
    "slurm-array-1-3": lambda i: {"SLURM_ARRAY_JOB_ID": 4242, "SLURM_ARRAY_TASK_ID": i + 1,
                                  "SLURM_ARRAY_TASK_COUNT": SHARDS, "SLURM_ARRAY_TASK_MIN": 1,
                                  "SLURM_ARRAY_TASK_MAX": SHARDS, "SLURM_ARRAY_TASK_STEP": 1},
}


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    if not FAULTLINE.is_file():
        pytest.fail(f"{FAULTLINE} is not built (cmake --build build --target faultline faultline-scenarios)")
    out = tmp_path_factory.mktemp("reference")
    r = faultline([*CAMPAIGN, "--out", str(out)], clean_env())
    assert r.returncode == 0, r.stderr
    runs = runs_of(out)
    assert sorted(run for run, _, _ in runs) == list(range(len(runs))), "the reference numbers its runs 0..N-1"
    assert len(runs) % REPEAT == 0 and len(runs) >= REPEAT
    return sorted(runs)


@pytest.mark.parametrize("style", STYLES)
def test_every_run_lands_in_exactly_one_shard_and_the_report_merges_them(style, reference, tmp_path):
    dirs = []
    for i in range(SHARDS):
        out = tmp_path / f"shard-{i}"
        r = faultline([*CAMPAIGN, "--out", str(out)], clean_env(**STYLES[style](i)))
        assert r.returncode == 0, f"shard {i}: {r.stderr}"
        assert f"shard {i}/{SHARDS}" in r.stderr, f"shard {i} did not take its index from the environment: {r.stderr}"
        dirs.append(out)

    owner = {}
    for i, out in enumerate(dirs):
        for run in runs_of(out):
            assert run not in owner, f"run {run} is in shard {owner.get(run)} and shard {i}"
            assert run[0] % SHARDS == i, f"run {run[0]} belongs to shard {run[0] % SHARDS}, found in {i}"
            owner[run] = i
    assert sorted(owner) == reference, "the shards together are the unsharded campaign's runs"

    junit, markdown = tmp_path / "junit.xml", tmp_path / "summary.md"
    r = faultline(["report", *map(str, dirs), "--junit", str(junit), "--markdown", str(markdown)], clean_env())
    assert r.returncode == 0, r.stderr
    assert "missing" not in r.stderr and "counted once" not in r.stderr, r.stderr
    suites = ET.parse(junit).getroot()
    variants = len(reference) // REPEAT
    assert suites.tag == "testsuites" and int(suites.get("tests")) == variants
    merged = sum(int(p.get("value")) for p in suites.iter("property") if p.get("name") == "runs")
    assert merged == len(reference), ET.tostring(suites, encoding="unicode")
    assert markdown.read_text().strip()

    # A shard left out is named, not silently dropped.
    r = faultline(["report", str(dirs[0]), str(dirs[1]), "--markdown", str(tmp_path / "partial.md")], clean_env())
    assert r.returncode == 0, r.stderr
    assert f"missing (2/{SHARDS})" in r.stderr, r.stderr


def test_runs_do_not_see_the_sharding_variables_faultline_consumed(tmp_path):
    probe = "env | grep -E '^(JOB_COMPLETION_INDEX|FAULTLINE_SHARD_COUNT|SLURM_ARRAY_TASK_ID)=' && exit 3; exit 0"
    r = faultline(["exec", "--out", str(tmp_path / "out"), "--no-preload", "--", "sh", "-c", probe],
                  clean_env(JOB_COMPLETION_INDEX=0, FAULTLINE_SHARD_COUNT=1))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("env, named", [
    ({"GTEST_TOTAL_SHARDS": 3, "GTEST_SHARD_INDEX": 0, "JOB_COMPLETION_INDEX": 1, "FAULTLINE_SHARD_COUNT": 3},
     ["GTEST_SHARD_INDEX=0", "JOB_COMPLETION_INDEX=1"]),
    ({"JOB_COMPLETION_INDEX": 0, "FAULTLINE_SHARD_COUNT": 3, "SLURM_ARRAY_TASK_ID": 2,
      "SLURM_ARRAY_TASK_COUNT": 3, "SLURM_ARRAY_TASK_MIN": 1},
     ["JOB_COMPLETION_INDEX=0", "SLURM_ARRAY_TASK_ID=2"]),
    ({"JOB_COMPLETION_INDEX": 1}, ["JOB_COMPLETION_INDEX=1", "FAULTLINE_SHARD_COUNT"]),
    ({"SLURM_ARRAY_TASK_ID": 3, "SLURM_ARRAY_TASK_COUNT": 3, "SLURM_ARRAY_TASK_MIN": 1, "SLURM_ARRAY_TASK_MAX": 7},
     ["SLURM_ARRAY_TASK_ID=3", "--shard"]),
], ids=["gtest-vs-kubernetes", "kubernetes-vs-slurm", "index-without-count", "slurm-id-list"])
def test_unusable_scheduler_variables_are_refused_naming_them(env, named, tmp_path):
    r = faultline([*CAMPAIGN, "--out", str(tmp_path / "out")], clean_env(**env))
    assert r.returncode == 2, r.stderr
    for name in named:
        assert name in r.stderr, r.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists(), "nothing runs when the shard is unknown"
