// Private to core/device/ipc: how each backend shares the bytes of an IPC pool. The registry,
// the handle and the close protocol are common (ipc.cc, ipc_registry.h); only this differs:
//
//   sim   the arena is the registry's memfd after the header (sim/ipc_sim.cc): an allocation is
//         an offset in it, an importer maps the pages of its allocation from its copy of the fd.
//   cuda  a cudaMemPool with POSIX file descriptor handles (cuda/ipc_cuda.cc): an allocation is
//         cudaMallocFromPoolAsync, its export data cudaMemPoolExportPointer, and an importer
//         imports the pool from its copy of the pool's fd, then the pointer.
//
// Thread safety: none; the owning pool or mapping serialises every call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device/device.h"
#include "core/device/ipc.h"
#include "core/status.h"

namespace faultline::core::device::ipc::detail {

/// The exporter's side: the pool's device memory.
class exported_bytes {
 public:
  virtual ~exported_bytes() = default;
  /// A new allocation; `offset` receives where it lies in the memory a handle names (sim: in the
  /// arena; cuda: 0). out_of_memory when the pool has no room.
  virtual result<void*> allocate(std::size_t bytes, std::uint64_t& offset) noexcept = 0;
  /// Frees an allocation this object returned.
  virtual status deallocate(void* ptr) noexcept = 0;
  /// Fills in the backend's part of a handle for the allocation at `ptr`: memory_fd and
  /// export_data (cuda); nothing for the sim.
  virtual status describe(void* ptr, handle& h) noexcept = 0;
  /// Frees every allocation and the pool (the registry is empty). Called once.
  virtual status destroy() noexcept = 0;
  /// Gives the memory up without freeing it (importers may still read it): it stays allocated
  /// until the process ends. Called instead of destroy().
  virtual void abandon() noexcept = 0;
};

/// An importer's side: one imported allocation.
class imported_bytes {
 public:
  virtual ~imported_bytes() = default;
  /// The allocation's first byte in this process.
  [[nodiscard]] virtual void* data() const noexcept = 0;
  /// The descriptor a re-export names as memory_fd (cuda: this process's copy of the pool's
  /// fd), or -1 (sim: the registry's fd is the memory).
  [[nodiscard]] virtual int memory_fd() const noexcept = 0;
  /// Unmaps (sim) or frees (cuda) the imported allocation. Called once.
  virtual status release() noexcept = 0;
};

/// sim: the arena [arena_offset, arena_offset + bytes) of memfd `fd` (which the caller keeps open).
result<std::unique_ptr<exported_bytes>> sim_export(int fd, std::uint64_t arena_offset, std::size_t bytes) noexcept;
/// sim: maps the allocation `h` names from memfd `fd` (the registry's; kept open by the caller).
result<std::unique_ptr<imported_bytes>> sim_import(int fd, std::uint64_t arena_offset, const handle& h) noexcept;

/// cuda: a new IPC-capable pool of `bytes` on `device`. unavailable without the cuda backend.
result<std::unique_ptr<exported_bytes>> cuda_export(int device, std::size_t bytes) noexcept;
/// cuda: imports the pool and the pointer `h` names (the pool's fd is fetched from the source).
result<std::unique_ptr<imported_bytes>> cuda_import(const handle& h) noexcept;
/// cuda: cudaLaunchHostFunc(s, fn, arg).
status cuda_launch_host_func(stream s, void (*fn)(void*), void* arg) noexcept;

}  // namespace faultline::core::device::ipc::detail
