// A pool of device memory over an upstream resource: the allocator faultline's scenarios drive.
//
// The pool takes large blocks from its upstream (cudaMalloc through `device_resource`, or any
// other resource) and serves requests from them:
//   - sizes are rounded up to 256 bytes; every pointer handed out is 256-byte aligned;
//   - every upstream block is tiled, in address order, by a chain of blocks linked to their
//     neighbours (boundary tags); a freed block coalesces at once with free neighbours of the
//     same stream, so free space stays address-ordered and coalesced;
//   - free space is kept per stream; a request takes the best fit (the smallest free block that
//     holds it, lowest address among equals), found through size-class bins;
//   - free blocks never coalesce across two upstream blocks, even when the upstream happened to
//     return adjacent addresses (chains never link two upstream blocks);
//   - growth doubles the pool (the first upstream block is `initial_size_bytes`), never past
//     `maximum_size_bytes`; when the upstream refuses, the request is halved down to what the
//     allocation needs before the pool reports out_of_memory;
//   - reuse is stream-ordered: a block freed on stream A serves a request on stream A at once;
//     a request on stream B takes it only after B waits (stream_wait_event) on an event recorded
//     on A. The event is recorded when the block changes hands rather than at every free, which
//     captures all work queued on A up to then, including everything queued before the free, and
//     keeps same-stream reuse free of device calls.
//   - a request its own stream's list cannot serve takes the best fit among the other streams'
//     lists (B waits on that list's stream, as above), else grows the pool. Only when growth
//     fails for lack of memory (the upstream refuses, or the maximum is reached) does it merge
//     the other streams' lists into B's, one at a time, B waiting on each (free neighbours then
//     coalesce across what were separate lists), until one block holds the request; that is
//     skipped when all free bytes together are too few. Failing that, it returns every upstream
//     block that is entirely free (after a device synchronisation: no queued work may still use
//     them; not when the maximum would leave no room anyway) and grows once more, before it
//     reports out_of_memory.
//
// Survival rules (DESIGN.md §5.1):
//   - at process exit (process_is_exiting()) the destructor makes no device call: it leaks the
//     upstream blocks and reports them (bytes_leaked_at_exit(), one "faultline:" stderr line);
//   - every device call is made inside the allocator's exit guard: after the exit hook ran,
//     calls are refused with errc::refused instead of reaching a runtime being torn down;
//   - the pool records its device's context epoch when it first touches the device and checks it
//     at every allocate (and release, and in its destructor), so before it hands out memory and
//     before any call on a stream, event or upstream block (the backend's context_epoch() is on
//     the hot path: it must stay cheap, as device.h promises). After a reset (by anyone) it makes
//     no call on the stale handles: it drops its free lists and events, counts the old context's
//     upstream bytes in `bytes_leaked_on_reset`, rebinds to the new epoch and serves from fresh
//     upstream memory. A deallocation makes no device call and reads no epoch: a block of a reset
//     context freed before the pool saw the reset goes back to its list, which the next allocate
//     drops; one freed after is accepted and dropped (`stale_deallocations`).
//
// Fault points: "alloc/pool/allocate" (fails the allocation with the injected code) and
// "alloc/pool/grow" (fails one upstream attempt as if the upstream had refused it).
// Bug point: "bug/alloc/no-epoch-guard" (ignore the epoch; touch stale handles after a reset).
//
//   alloc::device_resource upstream;
//   alloc::pool_resource pool(upstream, {.initial_size_bytes = 64 << 20});
//   auto p = pool.allocate(1000, stream_a);      // 1024 bytes from a 64 MiB upstream block
//   pool.deallocate(*p, 1000, stream_a);
//   auto q = pool.allocate(1000, stream_b);      // same block: stream_b now waits on stream_a
//   ...
//   if (auto s = pool.check_invariants(); !s) std::puts(s.message().c_str());
//
// Streams passed to allocate/deallocate must stay valid while the pool may still hand their free
// blocks to another stream (until the pool is released or destroyed), as with any stream-ordered
// pool. The upstream must outlive the pool. A pool serves one device (`pool_options::device`);
// call it with that device current.
//
// Thread safety: every member may be called from any thread (one lock; the device calls made
// under it are the rare ones: growth, cross-stream hand-over or merge, returning free upstream
// blocks, release). Steady-state allocate and deallocate allocate no host memory and make no
// device call besides allocate's context-epoch read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/alloc/detail/address_map.h"
#include "core/alloc/detail/free_list.h"
#include "core/alloc/detail/pool_lock.h"
#include "core/alloc/device_memory_resource.h"
#include "core/device/device.h"
#include "core/status.h"

namespace faultline::core::alloc {

namespace detail {
struct pool_test_access;
}  // namespace detail

/// How a pool grows and which device it serves.
struct pool_options {
  /// Bytes of the first upstream allocation (rounded up to 256), or the first request's size
  /// when that is larger. Must be > 0.
  std::size_t initial_size_bytes = std::size_t{2} << 20;
  /// Upper bound on the pool's upstream bytes; 0 means unbounded. Must be 0 or
  /// >= initial_size_bytes.
  std::size_t maximum_size_bytes = 0;
  /// The device whose context epoch the pool watches; -1 means the calling thread's current
  /// device at the first allocation.
  int device = -1;
  /// Backend for events, stream waits and context epochs; nullptr means the process's backend
  /// (device::select_backend()), resolved at the first allocation. Must outlive the pool.
  device::backend* backend = nullptr;
};

/// A snapshot of a pool's numbers (see pool_resource::statistics()).
struct pool_statistics {
  std::size_t pool_bytes = 0;                 ///< usable bytes of all upstream blocks (current epoch)
  std::size_t upstream_blocks = 0;            ///< upstream blocks held
  std::size_t live_bytes = 0;                 ///< bytes handed out and not yet returned
  std::size_t live_blocks = 0;
  std::size_t free_bytes = 0;                 ///< bytes on the free lists (all streams)
  std::size_t free_blocks = 0;
  std::size_t largest_free_block_bytes = 0;
  std::size_t streams = 0;                    ///< streams the pool keeps a free list for
  std::uint64_t upstream_allocations = 0;     ///< successful growths
  std::uint64_t upstream_refusals = 0;        ///< refused growth attempts (each halving retry counts)
  std::uint64_t upstream_blocks_returned = 0; ///< entirely free upstream blocks returned when growth failed
  std::uint64_t cross_stream_waits = 0;       ///< hand-overs and merges that issued stream_wait_event
  std::uint64_t free_list_merges = 0;         ///< other streams' free lists merged into a requester's
  std::uint64_t context_resets_seen = 0;      ///< epoch changes that made the pool rebind
  std::uint64_t bytes_leaked_on_reset = 0;    ///< upstream bytes of old contexts dropped unfreed
  std::uint64_t stale_deallocations = 0;      ///< frees of blocks from an old epoch after the pool saw the reset, dropped
};

/// The pool. See the file comment for its rules.
class pool_resource final : public device_memory_resource {
 public:
  /// Every pointer the pool returns is aligned to this, and sizes are rounded up to it.
  static constexpr std::size_t alignment_bytes = 256;

  /// A pool over `upstream` (not owned; must outlive the pool). Makes no device call. With
  /// invalid `options` (see validate) the pool is unusable: allocate returns the validation
  /// error.
  explicit pool_resource(device_memory_resource& upstream, pool_options options = {}) noexcept;

  /// Returns every upstream block (after a device synchronisation) and destroys the pool's
  /// events. Blocks still allocated are reported on stderr and returned upstream anyway. At
  /// process exit it makes no device call and leaks instead (see the file comment); after a
  /// context reset it makes no call on the old context's handles.
  ~pool_resource() override;

  pool_resource(const pool_resource&) = delete;
  pool_resource& operator=(const pool_resource&) = delete;

  /// Checks `options`: initial_size_bytes > 0, maximum 0 or >= initial, device >= -1.
  /// Errors: invalid_argument naming the bad field.
  static status validate(const pool_options& options) noexcept;

  /// Synchronises the device and returns every upstream block. Errors: busy when blocks are
  /// still allocated (nothing is released); refused at process exit; the first failing device
  /// call's error otherwise (the pool still forgets every block it could not return).
  status release() noexcept;

  /// Verifies the pool's invariants: free + live bytes = pool bytes; free blocks never overlap
  /// each other or live blocks; every live and free block lies inside exactly one upstream
  /// block; every free list is address-ordered and coalesced. Errors: internal, naming the
  /// violated invariant. Takes the pool's lock; cost is linear in the number of blocks.
  [[nodiscard]] status check_invariants() const noexcept;

  /// A consistent snapshot of the pool's numbers (takes the lock).
  [[nodiscard]] pool_statistics statistics() const noexcept;

  /// Upstream bytes the pool holds now, read without the lock (for reporting from exit paths).
  [[nodiscard]] std::size_t upstream_bytes() const noexcept {
    return upstream_bytes_.load(std::memory_order_acquire);
  }

  /// Upstream blocks the pool holds now, read without the lock.
  [[nodiscard]] std::size_t upstream_block_count() const noexcept {
    return upstream_block_count_.load(std::memory_order_acquire);
  }

  /// The resource the pool grows from.
  [[nodiscard]] device_memory_resource& upstream() const noexcept { return upstream_; }

 private:
  friend struct detail::pool_test_access;

  struct upstream_block {
    void* base = nullptr;           // what the upstream returned (and takes back)
    std::size_t bytes = 0;          // what was asked of the upstream
    std::uintptr_t begin = 0;       // first 256-byte aligned address inside
    std::size_t usable_bytes = 0;   // usable from begin, a multiple of 256
    detail::block_node* first = nullptr;  // the chain of blocks tiling [begin, begin + usable)
  };
  struct stream_state {
    device::stream stream;
    device::event event;  // recorded on `stream` when its free blocks change hands; lazy
    detail::free_list free;
  };

  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  status bind_locked() noexcept;
  // The epoch read of every call; the rare change is handled out of line.
  void check_epoch_locked() noexcept {
    const std::uint64_t now = backend_->context_epoch(device_);
    if (now != epoch_) [[unlikely]] epoch_changed_locked(now);
  }
  void epoch_changed_locked(std::uint64_t now) noexcept;
  void drop_for_reset_locked(std::uint64_t new_epoch) noexcept;
  bool holds_device_state_locked() const noexcept;
  // Most calls repeat the stream of the call before.
  stream_state& state_for_locked(device::stream s) {
    if (last_state_ != nullptr && last_state_->stream == s) [[likely]] return *last_state_;
    return find_or_add_state_locked(s);
  }
  stream_state& find_or_add_state_locked(device::stream s);
  void* hand_out_locked(detail::block_node* n) {
    live_.insert(n);
    live_bytes_ += n->bytes;
    // The address is live again in the new context; a later free of it means this block.
    if (!stale_live_.empty()) [[unlikely]] stale_live_.erase(n->address);
    return reinterpret_cast<void*>(n->address);
  }
  result<void*> allocate_slow_locked(stream_state& mine, std::size_t bytes) noexcept;
  status order_after_locked(stream_state& mine, stream_state& other) noexcept;
  result<detail::block_node*> take_from_other_stream_locked(stream_state& mine, std::size_t bytes) noexcept;
  result<detail::block_node*> merge_other_streams_locked(stream_state& mine, std::size_t bytes) noexcept;
  result<detail::block_node*> grow_locked(stream_state& mine, std::size_t bytes) noexcept;
  std::size_t return_free_upstream_blocks_locked(std::size_t bytes) noexcept;
  status bad_deallocate_locked(std::uintptr_t address, detail::block_node* n, std::size_t bytes,
                               std::size_t size) noexcept;
  status release_locked(bool ignore_live) noexcept;
  void forget_blocks_locked() noexcept;

  device_memory_resource& upstream_;
  const pool_options options_;
  const status options_status_;

  mutable detail::pool_lock mu_;
  device::backend* backend_ = nullptr;  // resolved at the first allocation
  int device_ = -1;
  std::uint64_t epoch_ = 0;             // 0: not bound to a context yet
  std::uint64_t next_upstream_id_ = 1;
  std::unordered_map<std::uint64_t, upstream_block> upstream_blocks_;
  detail::node_pool nodes_;
  detail::address_map live_;
  std::unordered_map<std::uintptr_t, std::size_t> stale_live_;  // handed out before a reset
  std::vector<std::unique_ptr<stream_state>> streams_;           // in the order first seen
  std::unordered_map<void*, stream_state*> stream_index_;        // by native handle
  stream_state* last_state_ = nullptr;  // the stream used last: most calls repeat it
  std::size_t pool_bytes_ = 0;
  std::size_t live_bytes_ = 0;
  std::atomic<std::size_t> upstream_bytes_{0};        // mirrors upstream_blocks_ for exit paths
  std::atomic<std::size_t> upstream_block_count_{0};  // that read without the lock

  std::uint64_t upstream_allocations_ = 0;
  std::uint64_t upstream_refusals_ = 0;
  std::uint64_t upstream_blocks_returned_ = 0;
  std::uint64_t cross_stream_waits_ = 0;
  std::uint64_t free_list_merges_ = 0;
  std::uint64_t context_resets_seen_ = 0;
  std::uint64_t bytes_leaked_on_reset_ = 0;
  std::uint64_t stale_deallocations_ = 0;
};

}  // namespace faultline::core::alloc
