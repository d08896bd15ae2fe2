"""The pool fixture: closed at teardown, which waits for every handle the test exported (real device
memory shared through CUDA IPC with IPC_SUITE_DEVICE=cuda)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cuda_ipc import CudaPool, cuda_requested  # noqa: E402
from ipc_pool import SharedPool  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _resource_tracker():
    """multiprocessing's resource tracker, started once for the session before any test: started
    by a test's first spawn instead, it would carry that test's fault spec (a delayed start) and
    outlive the session."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    yield


@pytest.fixture
def pool(tmp_path):
    p = CudaPool(tmp_path / "pool") if cuda_requested() else SharedPool(tmp_path / "pool")
    yield p
    p.close()
