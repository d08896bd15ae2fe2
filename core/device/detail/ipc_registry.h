// Private to core/device/ipc: the shared registry of an exported pool (its layout in a memfd and
// the operations on it), the identity of processes, and how a descriptor travels from a source
// process to an importer. See ipc.h for the design; this file is its mechanics.
//
// The registry header is plain data in a MAP_SHARED memfd, read and written by every process of
// the pool. Cross-process ordering comes from std::atomic members (lock-free, address-free).
// Two Dekker-style handshakes, both sequentially consistent, keep the close and the free exact:
//   importer: publish its slot (ready = 1), then read the pool state and the allocation's
//             generation; back off when either changed.
//   exporter: change the state (closing) or the generation (free), then scan the slots.
// At least one side sees the other, so an importer never keeps bytes that a close or a free is
// about to release.
//
//   auto reg = registry::create(backend_kind::sim, 0, pool_id, arena_bytes);   // exporter
//   auto slot = (*reg)->add_allocation(offset, bytes);
//   auto peer = registry::attach(fd, handle);                                  // importer
//   auto mine = (*peer)->register_importer(h.allocation, h.generation);
//   (*reg)->begin_close();  (*reg)->wait_for_importers(500ms);
//
// Thread safety: every member may be called from any thread of any process mapping the header.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/device/ipc.h"
#include "core/status.h"

namespace faultline::core::device::ipc::detail {

inline constexpr std::uint64_t registry_magic = 0x3147455243504946;  // "FIPCREG1"
inline constexpr std::uint32_t registry_version = 1;
inline constexpr std::uint32_t max_allocations = 256;
inline constexpr std::uint32_t max_importers = 128;
/// How often a closer re-checks the liveness of importers that never released.
inline constexpr std::chrono::milliseconds liveness_slice{5};

enum class pool_state : std::uint32_t { open = 1, closing = 2, closed = 3 };

/// One allocation of the pool. generation: odd while live, even while free (0: never used).
/// The system's page size: the header mapping and the arenas are aligned to it.
std::size_t page_size() noexcept;

struct allocation_record {
  std::atomic<std::uint64_t> generation;
  std::uint64_t offset;  ///< sim: in the arena
  std::uint64_t bytes;
  std::uint64_t reserved;
};

/// One importer. owner: 0 when free, else the claimer's identity (pid | low 32 bits of its start
/// time << 32), set by the claim itself so a claimer that dies at once is still identifiable.
struct importer_record {
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint32_t> ready;  ///< 1 once the fields below are written
  std::uint32_t ns_pid;
  std::uint64_t start_time;
  std::uint32_t allocation;
  std::uint32_t reserved;
  std::uint64_t generation;
};

struct registry_header {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_bytes;  ///< sizeof(registry_header)
  std::uint32_t backend;       ///< backend_kind
  std::uint32_t allocation_slots;
  std::uint32_t importer_slots;
  std::int32_t device;
  std::uint64_t pool_id;
  std::int32_t exporter_pid;
  std::uint32_t reserved;
  std::uint64_t exporter_start;
  std::uint64_t arena_offset;  ///< sim: where the arena starts in the memfd; cuda: 0
  std::uint64_t arena_bytes;   ///< sim: the arena's size; cuda: 0
  std::atomic<std::uint32_t> state;
  std::atomic<std::uint32_t> wake;  ///< futex word, bumped by every release
  allocation_record allocations[max_allocations];
  importer_record importers[max_importers];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "the registry's atomics must be address-free to work across processes");

/// "pool 0x1f2e3d4c5b6a7980".
std::string pool_name(std::uint64_t pool_id);

/// The calling process's identity (host pid as /proc names it, getpid(), start time).
struct process_identity {
  pid_t pid = 0;
  pid_t ns_pid = 0;
  std::uint64_t start_time = 0;
};
process_identity self_identity() noexcept;

/// Whether (pid, start_time) is a live process (not gone, zombie or exiting, not a reuse).
bool process_alive(pid_t pid, std::uint64_t start_time) noexcept;

/// A copy, in this process, of descriptor `fd` of the handle's source process. With
/// `prefer_pidfd`, pidfd_getfd is tried before /proc/PID/fd/N (a device file or an anonymous
/// inode cannot be reopened through /proc). Errors: not_found (source gone or pid reused, no such
/// descriptor), io_error (permission and the rest, naming both ways tried).
result<int> fetch_descriptor(const handle& h, int fd, bool prefer_pidfd) noexcept;

/// FNV-1a 64 of the handle's bytes before its checksum.
std::uint64_t handle_checksum(const handle& h) noexcept;

/// A mapping of a pool's registry header and the memfd it lives in.
class registry {
 public:
  /// Exporter: a new memfd holding a fresh header (and, with arena_bytes > 0, a zeroed arena
  /// after it at arena_offset()), sealed against shrinking and growing.
  static result<std::unique_ptr<registry>> create(backend_kind kind, int device, std::uint64_t pool_id,
                                                  std::size_t arena_bytes) noexcept;
  /// Importer: maps the header of memfd `fd` (taking ownership of the descriptor) and validates
  /// it against `h`: magic, version, sizes, backend, pool id. Errors: corrupt, invalid_argument.
  static result<std::unique_ptr<registry>> attach(int fd, const handle& h) noexcept;

  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] registry_header& header() const noexcept { return *header_; }
  [[nodiscard]] pool_state state() const noexcept;

  /// Where an arena starts in the memfd (page aligned, after the header).
  static std::uint64_t arena_offset() noexcept;

  // --- allocations (exporter) ----------------------------------------------------------------
  /// A free slot made live for [offset, offset + bytes). out_of_memory when the table is full.
  result<std::uint32_t> add_allocation(std::uint64_t offset, std::uint64_t bytes) noexcept;
  /// Frees the slot unless an importer holds it: busy, naming the holders.
  status remove_allocation(std::uint32_t slot) noexcept;
  /// Frees the slot unconditionally (at close, once no importer is left).
  void drop_allocation(std::uint32_t slot) noexcept;

  // --- importers -----------------------------------------------------------------------------
  /// Registers this process as an importer of `allocation` at `generation`. refused when the
  /// pool is not open, not_found when the allocation is not (or no longer) that generation,
  /// out_of_memory when every slot is taken, invalid_argument for an index out of range.
  result<std::uint32_t> register_importer(std::uint32_t allocation, std::uint64_t generation) noexcept;
  /// Frees the slot and wakes every waiting closer.
  void unregister_importer(std::uint32_t slot) noexcept;
  /// Live importers (of `allocation` only, when given); slots of dead ones are reclaimed.
  std::vector<holder> holders(std::optional<std::uint32_t> allocation = std::nullopt) noexcept;

  // --- closing (exporter) --------------------------------------------------------------------
  /// open -> closing: imports are refused from now on.
  void begin_close() noexcept;
  /// Waits until no importer is left or `timeout` passed. ok, or busy (timeout 0) / timeout
  /// naming the holders.
  status wait_for_importers(std::chrono::milliseconds timeout) noexcept;
  /// closing -> closed.
  void mark_closed() noexcept;

 private:
  registry(int fd, registry_header* header, std::size_t mapped) : fd_(fd), header_(header), mapped_(mapped) {}
  int fd_;
  registry_header* header_;
  std::size_t mapped_;
};

}  // namespace faultline::core::device::ipc::detail
