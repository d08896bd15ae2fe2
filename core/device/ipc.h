// Device memory shared between processes (DESIGN.md §4.4): a pool whose allocations
// one process exports as small handles and others import, and a close that waits for the
// importers, bounded by the caller, and names who still holds a handle.
//
//   auto& dev = core::device::current();
//   auto pool = core::device::ipc::pool::create(dev, {.device = 0, .bytes = 1 << 20});
//   void* p = *(*pool)->allocate(4096);
//   ... fill p on stream s, record event e ...
//   auto h = (*pool)->export_handle(p, e);                 // waits for e: no stale bytes
//   spawn_child(core::device::ipc::to_string(*h));         // text; the child does:
//       auto m = core::device::ipc::open_import(dev, *core::device::ipc::parse_handle(text));
//       read((*m)->data(), (*m)->size()); (*m)->close();
//   if (auto s = (*pool)->close(500ms); !s) {              // timeout: "... pid 4242 holds ..."
//     kill_children();                                     // a dead importer no longer counts
//     (*pool)->close(500ms);
//   }
//
// Why faultline closes by itself. Real CUDA does not wait: cuMemPoolDestroy (and even a primary
// context reset) returns at once while a child holds an imported pointer, and the child runs on
// (DESIGN.md §13.2); CUDA only says the importers must free first. The anchor's multi-hour CI wedge
// came from the close protocol around such a pool while a stuck child still held an import. So
// this pool keeps the importers in a registry of its own and never frees bytes an importer may
// still read: close() waits for the importers, bounded by the caller's timeout, and on expiry
// fails with errc::timeout naming them (pid and what they hold), freeing nothing. The wait a
// careless protocol turns into a wedge is thus explicit, bounded, and diagnosable.
//
// Design, the same on both backends; only how the bytes are shared differs:
// - The registry is a small header in a memfd (never a file name, so a killed run leaves nothing
//   in /dev/shm): a magic and version, the pool id, the pool state (open, closing, closed), an
//   allocation table (offset, size, generation) and an importer table. An importer claims a slot
//   with its pid and start time (the pid as /proc names it, so the pair survives pid namespaces
//   and pid reuse) before it touches the bytes, and frees it on close. A process whose slot is
//   live but which is dead (gone, zombie, exiting, or a later process with the same pid) is not
//   counted: whoever scans (holders(), close()) reclaims its slot. Releases wake a closer at once
//   (a futex in the header); dead importers are noticed within one scan slice (5 ms).
// - sim: the arena lives in the same memfd, after the header; an importer maps just the pages
//   of its allocation. cuda: a cudaMemPool created with POSIX file descriptor handles
//   (cudaMemPoolExportToShareableHandle), allocations from cudaMallocFromPoolAsync, exported
//   with cudaMemPoolExportPointer (the 64 bytes travel in the handle) and imported with
//   cudaMemPoolImportFromShareableHandle + cudaMemPoolImportPointer; importers free with
//   cudaFree before releasing their slot, and the exporter frees and destroys the pool only once
//   the registry is empty, as CUDA requires.
// - A handle names a source process (exporter or re-exporter) and descriptor numbers in it; the
//   importer takes its own copy of each descriptor: pidfd_getfd first (needs ptrace-attach
//   permission over the source, as any same-user process has unless Yama restricts it), else
//   /proc/PID/fd/N (enough for the memfd, a regular file). The source must be alive while the
//   importer opens the handle; afterwards the importer depends on nobody. The pool id in the
//   header must match the handle's, so a descriptor number reused by the source is refused.
// - A handle of a freed allocation (generation changed), of a closing pool, of a dead source, or
//   one that does not parse is an error value, never a crash. Limits: 256 allocations and 128
//   importer slots per pool.
// - Publication: export_handle(ptr, ready) and mapping::reexport(ready) wait for event `ready`
//   before the handle exists, so no importer can read bytes the exporter's stream has not yet
//   written (numba-cuda #930: a handle exported before the filling stream was synchronised; the
//   child read stale bytes). Bug point bug/ipc/dropped-event-wait: the wait's result is dropped
//   (a query whose not_ready is ignored), the pre-fix behaviour.
//
// Errors: invalid_argument (bad handle, foreign pointer), not_found (source process gone, freed
// allocation), refused (pool closing or closed), out_of_memory (arena or table full), busy (a
// deallocation or a zero-timeout close with importers), timeout (close), runtime_unloading
// (after the device runtime's teardown), io_error (a system call), unavailable (cuda not built
// or no device). Nothing here exits or aborts on a bad input.
//
// Thread safety: a pool and a mapping may be used from any thread (each serialises itself; a
// pool's close holds it for the whole wait, so its other calls wait for the close).
// Fork: an importer registers the pid that opened it; a forked child is not an importer.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/device/device.h"
#include "core/status.h"

namespace faultline::core::device::ipc {

namespace detail {
class registry;
class exported_bytes;
class imported_bytes;
}  // namespace detail

/// A shareable reference to one allocation of an exported pool: plain bytes, trivially copyable.
/// Pass it to another process as text (to_string / parse_handle); the fields are for inspection.
struct handle {
  std::uint32_t magic = 0;       ///< handle_magic
  std::uint16_t version = 0;     ///< handle_version
  std::uint8_t backend = 0;      ///< backend_kind of the exporter
  std::uint8_t reserved = 0;
  std::uint64_t pool_id = 0;     ///< the pool's registry must carry the same id
  std::int32_t source_pid = 0;   ///< the process holding the descriptors, as /proc names it
  std::int32_t source_ns_pid = 0;  ///< the same process as its own getpid() (for pidfd_open)
  std::uint64_t source_start = 0;  ///< its start time (clock ticks since boot): pid reuse check
  std::int32_t registry_fd = -1;   ///< in the source: the registry memfd (sim: also the arena)
  std::int32_t memory_fd = -1;     ///< in the source: cuda: the pool's POSIX fd; sim: -1
  std::uint32_t allocation = 0;    ///< index in the registry's allocation table
  std::int32_t device = 0;
  std::uint64_t generation = 0;    ///< the allocation's generation when exported
  std::uint64_t offset = 0;        ///< sim: byte offset in the arena; cuda: 0
  std::uint64_t bytes = 0;         ///< size of the allocation
  std::uint8_t export_data[64] = {};  ///< cuda: cudaMemPoolPtrExportData
  std::uint64_t checksum = 0;      ///< FNV-1a 64 over every byte above
};

inline constexpr std::uint32_t handle_magic = 0x43504946;  // "FIPC"
inline constexpr std::uint16_t handle_version = 1;

/// "flipc1:" followed by the handle's bytes in hex (checksum included). Never fails.
std::string to_string(const handle& h);
/// The handle `text` encodes. invalid_argument (naming what is wrong) for anything else:
/// wrong prefix or length, bad hex, magic, version, backend or checksum.
result<handle> parse_handle(std::string_view text) noexcept;

/// A process holding an import, as the pool's registry records it.
struct holder {
  pid_t pid = 0;                 ///< as /proc names it
  pid_t ns_pid = 0;              ///< its own getpid()
  std::uint64_t start_time = 0;  ///< clock ticks since boot
  std::uint32_t allocation = 0;  ///< which allocation it imported
};

/// "pid 4242 (allocation 0)", joined with ", ".
std::string describe(const std::vector<holder>& holders);

struct pool_options {
  int device = 0;
  std::size_t bytes = std::size_t{64} << 20;  ///< capacity; 1 KiB .. 64 GiB
};

/// An exportable pool of device memory on one device (see the file comment).
class pool {
 public:
  /// A new, open pool on `dev` (sim or cuda). Initialises the device runtime if needed.
  /// Errors: invalid_argument (size or device), unavailable, io_error, out_of_memory.
  static result<std::unique_ptr<pool>> create(backend& dev, const pool_options& options) noexcept;

  /// Closes without waiting (close(0)); when importers still hold handles, nothing is freed and
  /// the device bytes stay allocated until the process ends (never freed under a reader).
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  /// An allocation of `bytes` (rounded up to 256), device memory of the pool's device.
  /// Errors: invalid_argument (0 bytes), out_of_memory, refused (closing), runtime_unloading.
  result<void*> allocate(std::size_t bytes) noexcept;
  /// Frees an allocation. busy (naming the holders) while importers hold it; invalid_argument
  /// for a pointer that does not start an allocation of this pool.
  status deallocate(void* ptr) noexcept;

  /// A handle for the allocation starting at `ptr`. With `ready`, first waits until the event
  /// has completed (the work that filled the bytes), so importers never read stale bytes.
  /// Errors: invalid_argument, refused (closing), the wait's error, the backend's export error.
  result<handle> export_handle(void* ptr, event ready = {}) noexcept;

  /// Live importers (dead ones are reclaimed first). Errors only for a closed pool (refused).
  result<std::vector<holder>> holders() noexcept;

  /// Stops exporting (new imports and exports are refused from now on) and waits at most
  /// `timeout` for every importer to release or die; then frees every allocation and the pool.
  /// Errors: busy (timeout 0) or timeout, naming the holders; the pool then stays closing, nothing
  /// is freed, and close may be called again (after the caller killed its children, say).
  /// A second close of a closed pool is ok.
  status close(std::chrono::milliseconds timeout) noexcept;

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  pool(backend& dev, int device, std::size_t capacity, std::uint64_t id);
  struct allocation_entry {
    void* ptr;
    std::uint32_t slot;
  };
  backend& dev_;
  int device_;
  std::size_t capacity_;
  std::uint64_t id_;
  std::mutex mu_;
  std::unique_ptr<detail::registry> registry_;
  std::unique_ptr<detail::exported_bytes> bytes_;
  std::vector<allocation_entry> allocations_;
  bool closed_ = false;
};

/// One imported allocation, mapped into this process. Releases its import on close() or
/// destruction.
class mapping {
 public:
  ~mapping();
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;

  /// The allocation's first byte (device memory: sim's is host-addressable, cuda's is not).
  [[nodiscard]] void* data() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept { return handle_.bytes; }
  /// The handle this mapping was opened from.
  [[nodiscard]] const ipc::handle& source() const noexcept { return handle_; }

  /// A handle to the same allocation with this process as its source (its own descriptors), for
  /// a process this one starts: the chain A -> B -> C. Importers of it count in the same
  /// registry as A's own importers. With `ready`, first waits for the event (bytes this process
  /// wrote). Errors: refused (closed mapping, or the pool is closing), the wait's error.
  result<handle> reexport(event ready = {}) noexcept;

  /// Releases the import: frees the backend's mapping, then the registry slot (which wakes a
  /// waiting close). Idempotent.
  status close() noexcept;

 private:
  friend result<std::unique_ptr<mapping>> open_import(backend& dev, const handle& h) noexcept;
  mapping(backend& dev, const handle& h);
  backend& dev_;
  ipc::handle handle_;
  std::mutex mu_;
  std::unique_ptr<detail::registry> registry_;
  std::unique_ptr<detail::imported_bytes> bytes_;
  std::uint32_t slot_ = 0;
  bool closed_ = false;
};

/// Imports `h` in this process: takes copies of the source's descriptors, registers as an
/// importer (refused when the pool is closing), checks the allocation is still the exported one,
/// and maps it. Errors: invalid_argument (foreign backend, malformed), not_found (source gone,
/// allocation freed), refused (closing), corrupt (the registry fails validation), out_of_memory
/// (importer table full), io_error, unavailable.
result<std::unique_ptr<mapping>> open_import(backend& dev, const handle& h) noexcept;

/// Queues on `s` a host function that sleeps `duration`: work of a known length, a stand-in for a
/// long kernel (sim_launch_host_func on the sim, cudaLaunchHostFunc on cuda). Lets a test hold a
/// stream busy so that reading before synchronising is observable. Errors: the backend's.
status launch_host_sleep(backend& dev, stream s, std::chrono::milliseconds duration) noexcept;

/// A gate for launch_host_gate: work on a stream that lasts until someone opens it.
struct host_gate {
  std::atomic<bool> open{false};
  std::chrono::milliseconds bound{0};  ///< the work ends after this long even if never opened
};

/// Queues on `s` a host function that waits until `gate->open` or `gate->bound` has passed: a
/// long kernel whose end the caller decides (e.g. "once the reader has looked"), so that a read
/// made before synchronising is seen early on every run, however slowly the reader started.
/// `gate` must outlive the stream's work (synchronise the stream before destroying it).
/// Errors: the backend's; invalid_argument for a null gate or a negative bound.
status launch_host_gate(backend& dev, stream s, host_gate* gate) noexcept;

}  // namespace faultline::core::device::ipc
