"""Parents share a pool with multiprocessing children that import it, as cuda-python's memory_ipc
tests do. Each test waits for the child's import with a timeout (IMPORT_TIMEOUT_S) and runs under
an outer timeout (faultline_timeout).

- test_child_imports: the unguarded shape. When the child starts late (faultline's
  process/start=delay(...) for the test's processes), the timed-out wait fails the test, its child
  still holds an exported handle, and the pool fixture's close blocks in teardown: the outer
  timeout ends it, with the stacks of the test and of the child.
- test_child_imports_guarded: the same, guarded with the driver's child helpers: after the
  timed-out wait, kill_survivors(child) kills and reaps it, its handle is revoked, and the test
  fails at once with the reason; close returns.
"""

import multiprocessing as mp

import pytest

from faultline_pytest import kill_survivors
from ipc_pool import child_imports

IMPORT_TIMEOUT_S = 3.0


def start_child(pool):
    ctx = mp.get_context("spawn")
    imported, done = ctx.Event(), ctx.Event()
    handle = pool.export()
    child = ctx.Process(target=child_imports, args=(handle, imported, done))
    child.start()
    return child, handle, imported, done


@pytest.mark.faultline_timeout(6)
def test_child_imports(pool):
    child, _, imported, done = start_child(pool)
    assert imported.wait(IMPORT_TIMEOUT_S), "the child did not import the pool in time"
    done.set()
    child.join(10)
    assert child.exitcode == 0


@pytest.mark.faultline_timeout(6)
def test_child_imports_guarded(pool):
    child, handle, imported, done = start_child(pool)
    if not imported.wait(IMPORT_TIMEOUT_S):
        killed = kill_survivors(child)
        pool.revoke(handle)
        pytest.fail(f"the child did not import the pool within {IMPORT_TIMEOUT_S:g} s (killed: {killed})")
    done.set()
    child.join(10)
    assert child.exitcode == 0
