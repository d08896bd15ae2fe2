"""A device memory pool shared with child processes through IPC handles, in the shape of
cuda-python's memory_ipc tests, without a GPU: the pool's close() returns only once every handle it
exported was released by its importer, as a pool cannot be destroyed while another process still
maps its memory.

    pool = SharedPool(tmp_path)
    handle = pool.export()                 # picklable: goes to a child with any start method
    buf = import_handle(handle)            # in the child: it now holds the import
    buf.close()                            # released
    pool.close()                           # waits for every exported handle
    pool.revoke(handle)                    # the importer is known dead: stop waiting for it

A handle is a file; importing takes a shared flock on it, releasing removes it. With
IPC_SUITE_DEVICE=cuda the pool is cuda_ipc.CudaPool: the same bookkeeping over real device memory
shared through CUDA IPC handles.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from pathlib import Path


class SharedPool:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def export(self) -> str:
        handle = self.root / f"handle-{uuid.uuid4().hex}"
        handle.write_bytes(b"")
        return str(handle)

    def outstanding(self) -> list:
        return sorted(p.name for p in self.root.glob("handle-*"))

    def revoke(self, handle: str) -> None:
        Path(handle).unlink(missing_ok=True)

    def close(self) -> None:
        """Blocks, with no bound, while a handle is still exported: the hang this suite is about."""
        while self.outstanding():
            time.sleep(0.01)


class Imported:
    def __init__(self, handle: str) -> None:
        self.handle = handle
        self.fd = os.open(handle, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def close(self) -> None:
        os.unlink(self.handle)
        os.close(self.fd)


def import_handle(handle) -> Imported:
    """A handle of SharedPool (a path) or of cuda_ipc.CudaPool (a path, a CUDA IPC handle, a value)."""
    if isinstance(handle, tuple):
        from cuda_ipc import CudaImported

        return CudaImported(handle)
    return Imported(handle)


def child_imports(handle, imported, done) -> None:
    """The child: import, say so, keep the buffer until the parent is done with it, release."""
    buf = import_handle(handle)
    imported.set()
    done.wait(60)
    buf.close()
