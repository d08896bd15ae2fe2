"""ci/exit-hunt.sh, the CI step that runs test executables over and over under faultline: it fails
on a planted exit race and prints the race's signature, top frames and repro line; it passes a
program that always passes; it refuses a program that is not there before anything runs. It
needs a build (build/bin/faultline and the test programs): skipped without one."""
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HUNT = os.path.join(REPO, "ci", "exit-hunt.sh")
BUILD = os.path.join(REPO, "build")

needs_build = pytest.mark.skipif(not os.access(os.path.join(BUILD, "bin", "faultline"), os.X_OK),
                                 reason="no build/bin/faultline (bash ci/setup.sh)")


def hunt(*args, tmp_path):
    return subprocess.run(["bash", HUNT, "--build", BUILD, "--out", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=120)


@needs_build
def test_a_planted_exit_race_fails_the_step_with_its_signature_and_repro(tmp_path):
    # fl_race_static_dtor: a worker thread still writes a static that exit() destroys: SIGSEGV at
    # exit in a share of runs (harness/testdata/race).
    r = hunt("--budget", "6s", "--jobs", "2", "fl_race_static_dtor", tmp_path=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "crash/exit" in r.stderr, r.stderr
    assert "SIGSEGV: " in r.stderr, r.stderr  # named by frames, not the signal alone
    assert "repro: faultline exec --seed " in r.stderr, r.stderr
    assert "FAILED: a run of faultline's own tests was not a pass" in r.stderr, r.stderr
    row = [line for line in r.stdout.splitlines() if "fl_race_static_dtor" in line]
    assert row and " runs, " in row[0] and "crash " in row[0], r.stdout


@needs_build
def test_a_program_that_always_passes_passes(tmp_path):
    r = hunt("--budget", "2s", "fl_testdata_pass", tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    row = [line for line in r.stdout.splitlines() if "fl_testdata_pass" in line]
    assert row and "pass " in row[0] and "fail" not in row[0].split(";")[0], r.stdout


@needs_build
def test_bad_input_is_refused_before_anything_runs(tmp_path):
    r = hunt("--budget", "2s", "fl_testdata_pass", "no_such_test", tmp_path=tmp_path)
    assert r.returncode == 2
    assert "no_such_test: not an executable" in r.stderr
    assert not (tmp_path / "out").exists()
    r = hunt("--budget", "soon", "fl_testdata_pass", tmp_path=tmp_path)
    assert r.returncode == 2 and "--budget soon" in r.stderr
    r = hunt("--jobs", "0", "fl_testdata_pass", tmp_path=tmp_path)
    assert r.returncode == 2 and "--jobs 0" in r.stderr
