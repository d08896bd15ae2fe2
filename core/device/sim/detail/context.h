// Per-device state of the sim backend (private): what outlives contexts (`device_state`, in
// static storage) and what a context reset destroys (`context`, in its own mapping).
//
// A context is one anonymous mapping: the header below, then the stream table (each stream a
// ring of queued ops served by its own worker thread), the event table, and the arena
// allocator's records and owner table. Stream and event handles are pointers into it. Nothing in
// it owns heap memory, so dropping the mapping leaks nothing. Killing a context stops and joins
// its workers, waits for other threads blocked on its condition variables to leave, then maps a
// PROT_NONE reservation over the same range (MAP_FIXED: one step, no window in which another
// mapping could take the address), so stale handles and calls in flight fault.
//
//   auto c = create_context(dev);             // under dev.create_mutex
//   auto s = open_stream(**c);
//   enqueue(**s, op{...});
//   signal_stop(**c); join_workers(**c); kill_context(*c);
//
// Thread safety: as documented per function; the lifecycle functions (create, signal_stop,
// join_workers, kill_context) are serialised by the caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include "core/device/device.h"
#include "core/device/sim/detail/block_allocator.h"
#include "core/status.h"

namespace faultline::core::device::detail {

inline constexpr std::size_t granule_bytes = 256;
inline constexpr int max_devices = 16;
inline constexpr std::uint32_t max_streams = 1024;
inline constexpr std::uint32_t ring_ops = 512;
inline constexpr std::uint32_t max_events = 65536;
inline constexpr std::uint32_t max_block_records = 1u << 21;
inline constexpr std::size_t commit_step_bytes = std::size_t{64} << 20;

inline constexpr std::uint64_t context_magic = 0x53494d4354585431;  // "SIMCTXT1"
inline constexpr std::uint32_t stream_magic = 0x5354524d;           // "STRM"
inline constexpr std::uint32_t event_magic = 0x45564e54;            // "EVNT"
inline constexpr std::uint32_t free_magic = 0x46524545;             // "FREE"

struct context;
struct stream_slot;

/// Knobs and process-wide counters shared by every device (static storage, sim_backend.cc).
struct shared_state {
  std::atomic<runtime_state> state{runtime_state::uninitialized};
  std::atomic<bool> strict{false};
  std::atomic<std::uint32_t> query_latency_ms{1};
  std::atomic<std::uint64_t> calls_after_teardown{0};
  std::atomic<std::uint64_t> contexts_created{0};
  std::atomic<std::uint64_t> context_resets{0};
  std::atomic<std::uint64_t> streams_created{0};
};
shared_state& shared() noexcept;

/// One simulated device: its arena and the pointer to its current context. Never destroyed.
struct device_state {
  int index = 0;
  std::byte* arena = nullptr;  ///< reserved PROT_NONE, committed in commit_step_bytes steps
  std::size_t arena_bytes = 0;
  std::size_t committed_bytes = 0;  ///< guarded by the live context's alloc_mutex
  bool pages_protected = false;     ///< some free pages are PROT_NONE; same guard
  std::mutex create_mutex;          ///< creation and killing of the context
  std::atomic<context*> ctx{nullptr};
  std::atomic<std::uint64_t> epoch{0};
  std::atomic<std::uint64_t> busy_ns{0};  ///< time workers spent running ops
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> deallocations{0};
  std::atomic<std::uint64_t> ops_executed{0};
  std::atomic<std::uint64_t> ops_dropped{0};
  std::mutex util_mutex;  ///< utilization()'s sampling window
  std::uint64_t util_wall_ns = 0;
  std::uint64_t util_busy_ns = 0;
};

enum class op_kind : std::uint8_t { copy, fill, free, wait, host_fn };

/// One queued stream operation.
struct op {
  op_kind kind;
  int value;                   ///< fill byte
  void* dst;                   ///< copy/fill destination; free: the block
  const void* src;             ///< copy source
  std::size_t bytes;
  stream_slot* wait_on;        ///< wait: the stream whose ticket to wait for
  std::uint64_t ticket;
  void (*fn)(void*);           ///< host_fn
  void* arg;
};

/// A stream: a ring of ops and the worker thread that runs them in order.
struct alignas(64) stream_slot {
  std::atomic<std::uint32_t> magic{stream_magic};
  std::uint32_t index = 0;
  std::uint32_t next_free = 0;  ///< table free list: index + 1, 0 = end
  context* ctx = nullptr;
  std::mutex mutex;
  std::condition_variable work_cv;  ///< worker: ops queued or stop
  std::condition_variable done_cv;  ///< waiters: ops completed, ring space, or stop
  bool stop = false;                ///< guarded by mutex
  std::atomic<std::uint64_t> enqueued{0};   ///< ops ever queued (written under mutex)
  std::atomic<std::uint64_t> completed{0};  ///< ops finished (written under mutex)
  std::atomic<stream_slot*> waiting_on{nullptr};  ///< the stream a wait op is blocked on
  std::mutex join_mutex;  ///< one joiner of `worker`: a destroy and the context's teardown may race
  std::thread worker;
  op ring[ring_ops];
};

/// An event: the ticket of the stream it was last recorded on.
struct event_slot {
  std::atomic<std::uint32_t> magic{event_magic};
  std::uint32_t next_free = 0;
  context* ctx = nullptr;
  /// (stream index + 1) << 48 | ticket; 0 = never recorded.
  std::atomic<std::uint64_t> mark{0};
};

/// The header at the start of a context's mapping.
struct context {
  std::uint64_t magic = context_magic;
  device_state* device = nullptr;
  std::size_t region_bytes = 0;
  std::atomic<bool> stopping{false};
  /// Threads blocked on its streams' done_cv: synchronising calls, producers waiting for ring
  /// space, wait ops of any stream. Killing the context waits for them to leave.
  std::atomic<int> waiters{0};
  std::mutex table_mutex;  ///< stream and event slot allocation
  std::uint32_t stream_free = 0;
  std::atomic<std::uint32_t> stream_high{0};
  std::uint32_t event_free = 0;
  std::uint32_t event_high = 0;
  stream_slot* streams = nullptr;  ///< streams[0] is the default stream
  event_slot* events = nullptr;
  std::mutex alloc_mutex;  ///< guards blocks and the device's commit/protection state
  block_allocator blocks;
};

/// Monotonic clock in nanoseconds.
std::uint64_t now_ns() noexcept;
/// Aborts with `what` (and errno text when err != 0) without allocating: a broken invariant.
[[noreturn]] void fatal(const char* what, int err = 0) noexcept;
/// Maps a PROT_NONE reservation over [addr, addr + bytes), replacing what was there.
void reserve_none(void* addr, std::size_t bytes) noexcept;
/// A fresh PROT_NONE reservation; nullptr on failure.
std::byte* reserve_fresh(std::size_t bytes) noexcept;

/// Maps and initialises a context for `dev` with its default stream. Errors: out_of_memory.
/// Caller holds dev.create_mutex.
result<context*> create_context(device_state& dev) noexcept;
/// Step 1 of killing: marks the context stopping and wakes its workers, its waiters, and the
/// streams its workers are blocked on.
void signal_stop(context& c) noexcept;
/// Step 2: joins every worker (a worker killing its own context detaches itself instead).
void join_workers(context& c) noexcept;
/// Step 3: waits for released waiters to leave, then replaces the mapping. `c` dangles after.
void kill_context(context* c) noexcept;
/// The error a waiter released by a stop reports: context_reset, or runtime_unloading.
status stopped_status() noexcept;

/// A new stream with a running worker. Errors: out_of_memory (table full), internal (thread).
result<stream_slot*> open_stream(context& c) noexcept;
/// Waits for the stream's queued work, joins its worker and frees the slot.
status close_stream(stream_slot& s) noexcept;
/// Queues `o`, waiting for ring space. Errors: stopped_status() when the context is stopping.
status enqueue(stream_slot& s, const op& o) noexcept;
/// Blocks until `s` completed `ticket` ops. Errors: stopped_status().
status wait_ticket(stream_slot& s, std::uint64_t ticket) noexcept;
/// Waits for every stream of `c`.
status synchronize_context(context& c) noexcept;

result<event_slot*> open_event(context& c) noexcept;
void close_event(event_slot& e) noexcept;

/// Allocates from the context's arena (commits pages, restores protection in strict mode).
result<void*> allocate_bytes(context& c, std::size_t bytes) noexcept;
/// The granule of `ptr` in c's arena, checked to start a block in `expected` state.
result<std::uint32_t> block_of(context& c, const void* ptr, block_state expected) noexcept;
/// Frees a live block now (deallocate). Errors: invalid_argument.
status free_now(context& c, void* ptr) noexcept;
/// Marks a live block pending for a queued free. Errors: invalid_argument.
status mark_free_pending(context& c, void* ptr) noexcept;
/// After a reset in strict mode: decommits the arena so stale pointers fault.
void decommit_arena(device_state& dev) noexcept;

}  // namespace faultline::core::device::detail
