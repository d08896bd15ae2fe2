"""Shared helpers of the plugin's tests: /proc probes, and running an inner pytest session."""

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def proc_state(pid: int):
    """The process's state letter, or None when it is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def proc_ppid(pid: int):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2 :].split()[1])


def children_of(pid: int):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and proc_ppid(int(name)) == pid:
            out.append(int(name))
    return out


def running(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture(autouse=True)
def _unscaled_inner_sessions(monkeypatch):
    """Inner sessions (inline and subprocess) see timeouts as written: CI=true, or a sanitizer in
    the environment, would scale them, and the tests check exact values and durations."""
    monkeypatch.setenv("FAULTLINE_CHILD_TIMEOUT_SCALE", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


@pytest.fixture
def run_inner(pytester):
    """Run pytest in a subprocess on the pytester directory, the plugin loaded through its entry
    point as users get it."""

    def run(*args, timeout: float = 30.0):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)

    return run


@pytest.fixture
def faultline_bin():
    binary = Path(os.environ.get("FAULTLINE_BIN") or REPO / "build" / "bin" / "faultline")
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.skip(f"faultline is not built ({binary}); ci/setup.sh builds it")
    return binary


@pytest.fixture(scope="session", autouse=True)
def _no_process_outlives_the_suite():
    """The suite's own check that it leaves nothing behind: every process created during the session
    that is still running at its end is killed here, and the session fails saying which."""
    from faultline_pytest import track_children

    with track_children() as tracker:
        yield
        leftovers = tracker.kill_leftovers()
    assert not leftovers, "processes outlived the test suite:\n" + "\n".join(map(str, leftovers))
