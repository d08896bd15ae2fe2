"""The IPC suite in the shape of cuda-python's memory_ipc tests (drivers/pytest/examples/ipc_suite).

Goal: with no fault the suite passes; with its children's start delayed (--faultline-faults
'process/start@python3*=delay(8s)') the unguarded test reproduces "the fixture blocks in close while
a child holds an import": the outer timeout ends it, and its report holds the stacks of the test
and of the child (taken by faultline's agent in the child); the version guarded with the driver's
child helpers fails at once, cleanly. Method: the suite run by an inner pytest (a subprocess, the
plugin loaded through its entry point), read back from its output and JUnit XML. On a GPU machine,
IPC_SUITE_DEVICE=cuda runs the same suite over real CUDA IPC (examples/ipc_suite/cuda_ipc.py;
records/gpu/raw-2026-11-26-no-point/).
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import wait_until
from faultline_pytest import track_children

SUITE = Path(__file__).resolve().parents[1] / "examples" / "ipc_suite"


def run_suite(tmp_path, faultline_bin, *extra):
    xml = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_") and k != "LD_PRELOAD"}
    env["FAULTLINE_CHILD_TIMEOUT_SCALE"] = "1"
    with track_children() as tracker:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", f"--faultline-bin={faultline_bin}",
             f"--junitxml={xml}", f"--basetemp={tmp_path / 'tmp'}", "-o", "cache_dir=" + str(tmp_path / "cache"),
             *extra],
            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
        )
        # The inner session's multiprocessing resource tracker ends on its own once the session
        # has (after cleaning up what the killed children left): give it the time.
        assert wait_until(lambda: not tracker.children(), 10.0), tracker.children()
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    return proc, cases


def test_the_suite_passes_without_faults(tmp_path, faultline_bin):
    proc, cases = run_suite(tmp_path, faultline_bin)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(cases) == {"test_child_imports", "test_child_imports_guarded"}


def test_a_late_child_hangs_the_unguarded_close_and_fails_the_guarded_test_at_once(tmp_path, faultline_bin):
    proc, cases = run_suite(tmp_path, faultline_bin, "--faultline-faults=process/start@python3*=delay(8s)")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # Unguarded: the close in teardown blocked until the outer timeout, which took both stacks.
    assert "test_child_imports ran longer than 6 s" in out, out
    assert "in close" in out and "conftest.py" in out, out  # the test's stack: the pool's close
    assert "Stacks of the test's child processes at expiry (faultline's agent):" in out, out
    assert "libfaultline_agent.so" in out.split("Stacks of the test's child processes")[1], out  # the child's
    # Guarded: a clean failure after the import wait (3 s), well before the outer timeout (6 s).
    guarded = cases["test_child_imports_guarded"]
    failure = guarded.find("failure")
    assert failure is not None and "did not import the pool within 3 s" in failure.get("message", ""), ET.tostring(guarded)
    assert float(guarded.get("time")) < 5.5
