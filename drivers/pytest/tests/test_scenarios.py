"""faultline's scenario catalog as pytest tests (--faultline-scenarios).

Goal: each scenario is a test per backend, run through the real harness; its outcome, failure rate
and a repro command that really replays the failure reach the failure message and the JUnit
properties; bug point variants must be detected; a harness that hangs, fails to start or is not
there gives a clear failure, never a hang. Method: inner pytest sessions against the built
`faultline` (skipped when it is not built), and against a small stand-in script for the harness's
failure modes (a hang, a usage error, a bug point never detected).
"""

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import running, wait_until
from faultline_pytest.harness import HarnessError, find_faultline
from faultline_pytest.plugin import cuda_absence_reason


def _properties(xml: Path) -> dict:
    """JUnit testcase name -> its properties."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        out[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    return out


def _case(props: dict, name: str) -> dict:
    matches = [v for k, v in props.items() if k.endswith(name)]
    assert len(matches) == 1, (name, list(props))
    return matches[0]


def test_a_scenario_runs_per_backend_and_records_its_properties(pytester, faultline_bin):
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--faultline-scenarios", "-k", "exit/static-pool", f"--faultline-bin={faultline_bin}",
        "--faultline-repeat=3", "--faultline-seed=1", f"--junitxml={xml}", "-rs",
    )  # fmt: skip
    no_gpu = cuda_absence_reason()
    if no_gpu:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines([f"SKIPPED*{no_gpu}*"])
    else:
        result.assert_outcomes(passed=2)
    sim = _case(_properties(xml), "exit/static-pool[sim]")
    assert sim["faultline_scenario"] == "exit/static-pool"
    assert sim["faultline_variant"] == "clean" and sim["faultline_backend"] == "sim"
    assert sim["faultline_env_FAULTLINE_DEVICE"] == "sim"
    assert sim["faultline_outcome"] == "passed" and sim["faultline_outcomes"] == "pass=3"
    assert (sim["faultline_runs"], sim["faultline_failures"], sim["faultline_failure_rate"]) == ("3", "0", "0.0")
    assert 0.6 < float(sim["faultline_failure_rate_upper95"]) < 0.7  # 1 - 0.05^(1/3)
    assert sim["faultline_seed"] == "1" and sim["faultline_repro"] == ""
    assert float(sim["faultline_timeout_s"]) > 0, "the test ran under an outer timeout"
    assert Path(sim["faultline_results"]).is_file()


def test_a_failing_variant_reports_its_rate_and_a_repro_that_replays_it(pytester, faultline_bin, tmp_path):
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--faultline-scenarios", "-k", "exit/static-pool", f"--faultline-bin={faultline_bin}",
        "--faultline-backends=sim", "--faultline-repeat=3", "--faultline-seed=1",
        "--faultline-faults=bug/alloc/no-exit-guard=print", f"--junitxml={xml}",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    repro = f"FAULTLINE_DEVICE=sim {faultline_bin} run exit/static-pool --seed 1 --repeat 1 --out faultline-repro --replace --faults bug/alloc/no-exit-guard=print"
    result.stdout.fnmatch_lines(
        [
            "exit/static-pool [[]sim[]]: 3 of 3 runs failed (failure rate 100.0%, 95% interval 43.9%-100.0%); expected none",
            "outcomes: fail=3",
            "signature: fail in phase exit: no-device-call-after-teardown x3 (first run exit-static-pool.s1, log *)",
            f"repro: {repro}",
        ]
    )
    props = _case(_properties(xml), "exit/static-pool[sim]")
    assert props["faultline_outcome"] == "failed" and props["faultline_failure_rate"] == "1.0"
    assert props["faultline_repro"] == repro and props["faultline_faults"] == "bug/alloc/no-exit-guard=print"

    replay = subprocess.run(
        f"{repro} --json --out {shlex.quote(str(tmp_path))}", shell=True, capture_output=True, text=True, timeout=60
    )
    assert replay.returncode == 1, replay.stderr
    summary = json.loads(replay.stdout.splitlines()[-1])
    assert (summary["runs"], summary["failures"], summary["seed"]) == (1, 1, 1)


def test_bug_points_are_collected_and_must_be_detected(pytester, faultline_bin):
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--faultline-bug-points", "-k", "exit/static-pool and sim",
        f"--faultline-bin={faultline_bin}", "--faultline-repeat=3", f"--junitxml={xml}",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    props = _case(_properties(xml), "exit/static-pool@bug/alloc/no-exit-guard[sim]")
    assert props["faultline_variant"] == "bug/alloc/no-exit-guard"
    assert props["faultline_outcome"] == "detected" and props["faultline_required_rate"] == "0.95"
    assert props["faultline_failures"] == "3" and "--faults bug/alloc/no-exit-guard=print" in props["faultline_repro"]


# --------------------------------------------------------------------------------------------
# The harness's failure modes, through a stand-in
# --------------------------------------------------------------------------------------------

FAKE = """#!{python}
import json, os, subprocess, sys, time
args = sys.argv[1:]
if args[:2] == ["list", "--json"]:
    print(json.dumps([{{"name": "fake/one", "description": "a stand-in", "timeout_ms": 100,
                       "bug_points": [{{"point": "bug/fake/x", "faults": "bug/fake/x=print", "detect_rate": 0.95}}]}}]))
    sys.exit(0)
mode = os.environ["FAKE_FAULTLINE"]
if mode == "usage":
    print("faultline: error: the stand-in refuses", file=sys.stderr)
    sys.exit(2)
if mode == "hang":
    child = subprocess.Popen(["sleep", "600"])
    with open("fake.pids", "w") as f:
        f.write(f"{{os.getpid()}} {{child.pid}}")
    time.sleep(600)
n = int(args[args.index("--repeat") + 1])
print(json.dumps({{"name": args[1], "runs": n, "outcomes": {{"pass": n, "fail": 0}}, "failures": 0,
                  "failure_rate": 0.0, "failure_rate_lower95": 0.0, "failure_rate_upper95": 0.5,
                  "repro": None, "seed": 5, "signatures": []}}))
"""


@pytest.fixture
def fake_bin(pytester, monkeypatch):
    path = pytester.path / "fake-faultline"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv("FAULTLINE_BIN", str(path))
    return path


def test_a_hung_harness_is_killed_at_the_campaign_timeout(pytester, fake_bin, monkeypatch):
    monkeypatch.setenv("FAKE_FAULTLINE", "hang")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--faultline-scenarios", "--faultline-backends=sim", "--faultline-campaign-timeout=1"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fake/one [[]sim[]]: faultline did not finish within its outer timeout of 1 s and was killed.*"])
    harness, its_child = map(int, (pytester.path / "fake.pids").read_text().split())
    # Signalled with its group; the pipes close early in a process's exit, before it is a zombie,
    # so a child can still read as running the instant the harness returns (a fresh-clone CI saw
    # it): it must be gone within moments, not at once.
    assert wait_until(lambda: not running(harness) and not running(its_child), timeout_s=5.0), \
        "the harness's process group outlived it"


def test_a_harness_usage_error_is_reported_with_its_stderr(pytester, fake_bin, monkeypatch):
    monkeypatch.setenv("FAKE_FAULTLINE", "usage")
    result = pytester.runpytest("-p", "no:cacheprovider", "--faultline-scenarios", "--faultline-backends=sim")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*fake/one [[]sim[]]: faultline exited 2 without a summary it could be judged by.*", "*the stand-in refuses*"]
    )


def test_a_bug_point_that_is_never_detected_fails(pytester, fake_bin, monkeypatch):
    monkeypatch.setenv("FAKE_FAULTLINE", "pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--faultline-bug-points", "--faultline-backends=sim", "--faultline-repeat=4")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["fake/one [[]sim[]] with bug point bug/fake/x: the bug point was detected in 0 of 4 runs (rate 0.0%*); required 95.0%"]
    )


def test_a_missing_binary_is_a_collection_error(pytester, monkeypatch):
    monkeypatch.delenv("FAULTLINE_BIN", raising=False)
    result = pytester.runpytest("-p", "no:cacheprovider", "--faultline-scenarios", "--faultline-bin=/nonexistent/faultline")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*faultline: --faultline-bin=/nonexistent/faultline: not an executable file*"])


def test_bad_backends_are_a_usage_error(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--faultline-scenarios", "--faultline-backends=sim,rocm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--faultline-backends=sim,rocm: expected a comma-separated list of sim, cuda*"])


def test_the_binary_is_found_by_option_variable_path_then_build_bin(tmp_path):
    def exe(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    repo_bin = exe(tmp_path / "repo" / "build" / "bin" / "faultline")
    rootdir = tmp_path / "repo" / "drivers" / "pytest"
    rootdir.mkdir(parents=True)
    on_path = exe(tmp_path / "path" / "faultline")
    chosen = exe(tmp_path / "chosen")

    assert find_faultline(None, rootdir, {"PATH": "/nonexistent"}) == (repo_bin, "build/bin above the rootdir")
    assert find_faultline(None, rootdir, {"PATH": str(on_path.parent)}) == (on_path, "PATH")
    assert find_faultline(None, rootdir, {"FAULTLINE_BIN": str(chosen), "PATH": str(on_path.parent)}) == (chosen, "FAULTLINE_BIN")
    assert find_faultline(str(chosen), rootdir, {"FAULTLINE_BIN": str(on_path)}) == (chosen, "--faultline-bin")
    with pytest.raises(HarnessError, match="FAULTLINE_BIN=.*not an executable file"):
        find_faultline(None, rootdir, {"FAULTLINE_BIN": str(tmp_path / "missing")})
    with pytest.raises(HarnessError, match="faultline binary not found"):
        find_faultline(None, tmp_path / "elsewhere", {"PATH": "/nonexistent"})
