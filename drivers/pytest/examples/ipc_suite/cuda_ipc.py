"""The pool of ipc_pool.py backed by real device memory: each export allocates a buffer with the
CUDA driver (through ctypes, no other package), fills it with a value and hands out its CUDA IPC
handle with the bookkeeping file; the importer opens the handle in its own context
(cuIpcOpenMemHandle), reads the value back and keeps the mapping until it releases it
(cuIpcCloseMemHandle). close() still waits for every exported handle to be released, as the
model's does, and then frees the buffers. The suite uses it when IPC_SUITE_DEVICE=cuda.
"""

from __future__ import annotations

import ctypes
import os

from ipc_pool import Imported, SharedPool

BUFFER_BYTES = 1 << 20
IPC_LAZY_ENABLE_PEER_ACCESS = 1


class IpcMemHandle(ctypes.Structure):
    # Bytes, not c_char: a c_char array reads back only up to its first zero byte.
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


_driver = None


def driver():
    """libcuda, initialised, with the calling process's primary context of device 0 current."""
    global _driver
    if _driver is None:
        cu = ctypes.CDLL("libcuda.so.1")
        cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), IpcMemHandle, ctypes.c_uint]
        check(cu.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        _driver = cu
    return _driver


def check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"{what}: CUDA error {result}")


class CudaPool(SharedPool):
    def __init__(self, root) -> None:
        super().__init__(root)
        self.buffers = []

    def export(self) -> tuple:
        cu = driver()
        ptr = ctypes.c_uint64()
        check(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(BUFFER_BYTES)), "cuMemAlloc")
        value = len(self.buffers) + 0x5EED
        check(cu.cuMemsetD32_v2(ptr, ctypes.c_uint(value), ctypes.c_size_t(BUFFER_BYTES // 4)), "cuMemsetD32")
        check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        handle = IpcMemHandle()
        check(cu.cuIpcGetMemHandle(ctypes.byref(handle), ptr), "cuIpcGetMemHandle")
        self.buffers.append(ptr)
        return (super().export(), bytes(handle), value)

    def revoke(self, handle) -> None:
        super().revoke(handle[0])

    def close(self) -> None:
        super().close()
        cu = driver() if self.buffers else None
        for ptr in self.buffers:
            check(cu.cuMemFree_v2(ptr), "cuMemFree")
        self.buffers.clear()


class CudaImported(Imported):
    def __init__(self, handle: tuple) -> None:
        path, raw, value = handle
        cu = driver()
        self.ptr = ctypes.c_uint64()
        check(cu.cuIpcOpenMemHandle_v2(ctypes.byref(self.ptr), IpcMemHandle.from_buffer_copy(raw), IPC_LAZY_ENABLE_PEER_ACCESS),
              "cuIpcOpenMemHandle")
        seen = ctypes.c_uint()
        check(cu.cuMemcpyDtoH_v2(ctypes.byref(seen), self.ptr, ctypes.c_size_t(4)), "cuMemcpyDtoH")
        if seen.value != value:
            raise RuntimeError(f"imported buffer holds {seen.value:#x}, exported {value:#x}")
        super().__init__(path)

    def close(self) -> None:
        check(driver().cuIpcCloseMemHandle(self.ptr), "cuIpcCloseMemHandle")
        super().close()


def cuda_requested() -> bool:
    return os.environ.get("IPC_SUITE_DEVICE") == "cuda"
