"""ci/gpu/cuda-python-seed.sh without a GPU: its refusals and its dry run (against trees laid out
as ../shared/cuda-python's, and against that folder itself where it is there), and
ci/gpu/cuda-python-table.py's verdicts over campaigns written here."""
import importlib.util
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(GPU))
SCRIPT = os.path.join(GPU, "cuda-python-seed.sh")
FAULTLINE = os.path.join(REPO, "build", "bin", "faultline")
SHARED_TREES = os.path.join(os.path.dirname(REPO), "shared", "cuda-python")
needs_build = pytest.mark.skipif(not os.access(FAULTLINE, os.X_OK), reason="no build/bin/faultline (bash ci/setup.sh)")

spec = importlib.util.spec_from_file_location("cuda_python_table", os.path.join(GPU, "cuda-python-table.py"))
table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table)

TREE_FILES = ["cuda_core/pytest.ini", "cuda_core/tests/conftest.py", "cuda_core/tests/memory_ipc/test_memory_ipc.py",
              "cuda_python_test_helpers/cuda_python_test_helpers/__init__.py"]


def make_trees(root, post_has_guard=True, pre_has_guard=False):
    for tree in ("pre", "post"):
        for f in TREE_FILES:
            path = root / tree / f
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("# stand-in\n")
    if post_has_guard:
        (root / "post/cuda_core/tests/helpers").mkdir(parents=True, exist_ok=True)
        (root / "post/cuda_core/tests/helpers/child_processes.py").write_text("# stand-in\n")
    if pre_has_guard:
        (root / "pre/cuda_core/tests/helpers").mkdir(parents=True, exist_ok=True)
        (root / "pre/cuda_core/tests/helpers/child_processes.py").write_text("# stand-in\n")
    return root


def seed(*args, faultline=FAULTLINE):
    return subprocess.run(["bash", SCRIPT, "--faultline", faultline, *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_without_trees_and_out_it_says_what_they_are():
    r = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "expected TREES and OUT" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--runs", "x"], "--runs must be a whole number"),
    (["--runs", "0"], "--runs must be at least 1"),
    (["--jobs", "0"], "--jobs must be a positive whole number"),
    (["--timeout", "soon"], "--timeout must be a duration"),
    (["--specs", "none,start-stpo"], "unknown spec name 'start-stpo'"),
    (["--trees", "pre,fixed"], "unknown tree 'fixed'"),
    (["--frobnicate"], "unknown option --frobnicate"),
])
def test_bad_options_are_refused_before_anything_runs(tmp_path, args, message):
    trees = make_trees(tmp_path / "trees")
    r = seed(*args, trees, tmp_path / "out", faultline="/bin/true")
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "out").exists()


def test_trees_that_are_not_the_two_commits_are_refused(tmp_path):
    r = seed(tmp_path, tmp_path / "out", faultline="/bin/true")
    assert r.returncode == 2 and "has no cuda_core/pytest.ini" in r.stderr
    swapped = make_trees(tmp_path / "swapped", post_has_guard=False)
    r = seed(swapped, tmp_path / "out", faultline="/bin/true")
    assert r.returncode == 2 and "it is not ae34e4c" in r.stderr
    both = make_trees(tmp_path / "both", pre_has_guard=True)
    r = seed(both, tmp_path / "out", faultline="/bin/true")
    assert r.returncode == 2 and "it is not caf05e6" in r.stderr


def test_an_out_that_holds_something_is_never_reused(tmp_path):
    trees = make_trees(tmp_path / "trees")
    out = tmp_path / "out"
    out.mkdir()
    (out / "table.md").write_text("an earlier run\n")
    r = seed(trees, out, faultline="/bin/true")
    assert r.returncode == 2 and "is not empty" in r.stderr
    assert (out / "table.md").read_text() == "an earlier run\n"


@needs_build
def test_dry_run_checks_every_spec_with_faultline_and_prints_each_campaign(tmp_path):
    trees = make_trees(tmp_path / "trees")
    r = seed("--dry-run", trees, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("== ")]
    assert len(lines) == 2 * 6  # two trees, six specs
    assert any("pre start-stop" in l and "process/start@python3\\*=2\\*off-\\>stop" in l for l in lines)
    assert any("post driver-start-stop" in l and "--no-preload" in l and "-p faultline_pytest.plugin" in l for l in lines)
    assert all("exec --repeat" in l for l in lines)
    assert "nothing run" in r.stdout
    assert not (tmp_path / "out").exists()  # a dry run leaves nothing behind


def test_faultline_refuses_a_spec_before_run_1(tmp_path):
    # A faultline that refuses every spec stands in for a point this build does not know.
    fake = tmp_path / "faultline"
    fake.write_text("#!/bin/sh\necho 'faults spec: column 1: unknown point' >&2\nexit 2\n")
    fake.chmod(0o755)
    r = seed("--dry-run", "--specs", "import-stop", make_trees(tmp_path / "trees"), tmp_path / "out",
             faultline=str(fake))
    assert r.returncode == 2
    assert "faultline refuses spec import-stop" in r.stderr and "unknown point" in r.stderr


@needs_build
@pytest.mark.skipif(not os.path.isdir(SHARED_TREES), reason="no ../shared/cuda-python beside the repository")
def test_dry_run_against_the_shared_trees(tmp_path):
    r = seed("--dry-run", SHARED_TREES, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "trees, options and specs checked" in r.stdout


def campaign(root, name, runs):
    folder = root / "campaigns" / name
    (folder / "logs").mkdir(parents=True)
    with open(folder / "results.jsonl", "w") as f:
        for i, (outcome, summary, extra) in enumerate(runs):
            log = f"logs/run{i}.log"
            (folder / log).write_text(f"...\n{summary}\n" if summary else "No module named pytest\n")
            f.write(json.dumps({"run_id": f"run{i}", "outcome": outcome, "log": log, "duration_ms": 40000,
                                "faults": "" if name.endswith("none") else "cuda/cuMemPoolImportPointer=stop",
                                "points_reached": [] if name.endswith("none") else ["cuda/cuMemPoolImportPointer"],
                                "leaked_pids": [], **extra}) + "\n")


def test_table_judges_each_tree_against_the_issue(tmp_path):
    passed, failed = "1 passed in 3.1s", "1 failed, 4 warnings in 31.2s"
    campaign(tmp_path, "pre-none", [("pass", passed, {})] * 2)
    campaign(tmp_path, "post-none", [("pass", passed, {}), ("fail", None, {})])  # never ran its tests
    campaign(tmp_path, "pre-import-stop", [("hang", None, {})] * 19 + [("fail", failed, {})])
    campaign(tmp_path, "post-import-stop", [("fail", failed, {})] * 19 + [("fail", failed, {"leaked_pids": [7]})])
    campaign(tmp_path, "pre-import-kill", [("fail", None, {})] * 20)  # exit 1 before the tests: no catch
    text = table.table(tmp_path, 75)
    rows = {tuple(c.strip() for c in l.split("|")[1:3]): l for l in text.splitlines() if l.startswith("| pre") or l.startswith("| post")}
    assert "| green | yes |" in rows[("pre", "none")]
    assert "NOT green" in rows[("post", "none")]
    assert "caught 20/20 (100%) | yes" in rows[("pre", "import-stop")]
    assert "clean failure 19/20 | NO" in rows[("post", "import-stop")]
    assert "caught 0/20 (0%) | NO" in rows[("pre", "import-kill")]
    assert "| none printed x19; 1 failed x1 |" in rows[("pre", "import-stop")]
    assert "| 1 failed x20 |" in rows[("post", "import-stop")]  # grouped, warnings left out
    assert "Not met:" in text and "post none" in text


def test_table_refuses_an_out_without_campaigns(tmp_path):
    r = subprocess.run(["python3", os.path.join(GPU, "cuda-python-table.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "holds no campaigns/" in r.stderr
