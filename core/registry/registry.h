// The instance registry (DESIGN.md §5.2): instances of a KV-cache offload engine, each with a save
// and a load worker per device, device buffers referenced by generation-checked handles, a host
// block store shared by every instance, and leases that pin stored blocks for readers.
//
//   registry::instance_registry reg;                          // the process's backend and cudaMalloc
//   auto r = reg.register_instance("engine-0", {.devices = {0}, .buffers = {{0, 4 << 20}}});
//   if (!r) return r.error();
//   registry::buffer_handle kv = r->buffers[0];
//   ...the client writes its KV blocks into reg.buffer("engine-0", kv)->ptr...
//   auto op = reg.save("engine-0", {.buffer = kv, .offset = 0, .bytes = 1 << 20, .key = 42,
//                                   .checksum = registry::checksum(host_copy, 1 << 20)});
//   if (!op) return op.error();                               // refused once unregister began
//   if (auto st = op->wait(); !st) ...                        // corrupt: copied the wrong bytes
//   registry::unregister_result u = reg.unregister_instance("engine-0");
//   if (!u.status) std::puts(u.status.to_string().c_str());  // worker error, leaked on timeout
//
// The anchor is PegaFlow #329: an offload engine's cleanup released the device buffers before it
// unregistered the instance and never waited for its workers, so a save still queued copied from
// unmapped memory (the server aborted) or, once the address was reused, from another client's
// buffer. Its proposed fix removed the id before joining the workers (a same-id registration
// during the join had its new buffers released by the old teardown) and returned early on a worker
// error (leaking the leases and buffers of an instance already removed). This registry is the
// fixed design; the four bugs stay reachable as bug points (below) for the scenarios that prove
// they are caught.
//
// Lifecycle of one registration (a *generation*: a process-wide number, never reused, that grows
// with every registration): open -> draining -> drained -> removed.
// - register_instance() allocates the buffers, creates a save and a load worker per device (each
//   with its own stream and threads), then inserts the instance. An id whose instance is open is
//   taken (already_exists); an id whose instance is being unregistered is free: the new
//   registration gets a new generation that the old teardown never touches.
// - save()/load() check the handle (generation, index, bounds, buffer live) and the instance
//   state, then queue a task on the buffer's device's worker. Tasks run in submission order per
//   worker. A save copies device -> host through the worker's stream, hashes the host copy and,
//   when the client gave the checksum of what it wrote, compares: a mismatch is errc::corrupt and
//   nothing is stored (a copy from freed or reused memory is caught here, not missed). A load
//   verifies the stored block's checksum, then copies host -> device. A worker is two threads: one
//   checks tasks and queues their copies (up to four ahead), the other waits for each copy in
//   turn, hashes, stores and completes it, so hashing overlaps copying; tasks complete in
//   submission order.
// - unregister_instance() marks the instance draining (every later submit, lease or load fails
//   with errc::refused naming the instance), waits for submits already past their check, queues a
//   drain barrier behind every accepted task, joins the workers within a bound, synchronises and
//   destroys the streams, releases the buffers and leases of *that generation only*, and removes
//   the map entry only if it still holds that generation. When it returns, no task of that
//   generation can run any more, except after a timed-out join, which the result says.
//   - A worker that fails (a device error, or an injected registry/worker/task failure) fails the
//     rest of its queue with its error, so nobody waits forever; cleanup still completes and the
//     error is reported in the result.
//   - When the join bound expires, the stuck workers are detached (each destroys its own stream
//     when it finally ends), tasks still queued behind them fail with errc::timeout, and their
//     instance's buffers are leaked rather than freed under a running copy (counted in the result
//     and stats()).
//   - Concurrent unregisters of one id: one owner does the teardown, the others wait for its
//     result (owner == false in theirs).
// - unregister_all() marks every instance first (so drains overlap), then finishes each; best
//   effort: it goes on past errors and repeats until the map is empty (registrations made during
//   the call are torn down too, up to a few rounds).
//
// Errors are values. Handles are checked at submission; the buffer then stays allocated until every
// accepted task has run, which the teardown order above guarantees.
//
// Thread safety: every member may be called from any thread at any time, including concurrently
// with unregister of the same id. The destructor unregisters everything left (bounded by the
// default join timeout) and must not race other calls; workers it had to abandon keep what they use
// alive until they finish. Destroy the registry before the device runtime's teardown at exit.
//
// Fault points (core/points/point.h), placed where races and failures matter:
//   registry/register/after-insert     a registration is in the map, its call not yet returned
//   registry/save/after-check          a save passed its checks, its task not yet queued
//   registry/load/after-check          same for a load
//   registry/unregister/after-mark     the instance is marked draining, nothing else done yet (the
//                                      pre-fix release of bug/registry/release-before-drain follows)
//   registry/unregister/joining        the drain barriers are queued, the join not yet begun
//   registry/unregister/after-join     the workers are joined (or abandoned), nothing released
//   registry/unregister/after-remove   buffers and leases released, map entry removed
//   registry/unregister/concurrent     a second unregister found the teardown in progress
//   registry/unregister-all/after-mark unregister_all marked every instance, none joined yet
//   registry/worker/task               on a worker, before each task; fail(code) = worker error
//   registry/worker/drain              on a worker, at its drain barrier, before the final stream
//                                      synchronisation; fail(code) = worker error at shutdown
// Bug points, each re-creating one historical defect: bug/registry/release-before-drain,
// bug/registry/cleanup-by-id, bug/registry/early-return-on-worker-error,
// bug/registry/unsynchronized-concurrent-unregister (see faults/bug_points.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/alloc/device_memory_resource.h"
#include "core/alloc/device_resource.h"
#include "core/device/device.h"
#include "core/status.h"

namespace faultline::core::registry {

namespace detail {
struct instance;
struct shared_core;
struct op_state;
struct teardown_plan;
}  // namespace detail

/// The 64-bit checksum saves and loads carry: fast (several GB/s), deterministic on every
/// platform, sensitive to every byte and to the length. Not cryptographic.
[[nodiscard]] std::uint64_t checksum(const void* data, std::size_t bytes) noexcept;

/// Where one registration is in its life.
enum class instance_state : std::uint8_t {
  open,      ///< accepting work
  draining,  ///< unregister began: new work refused, accepted work running
  drained,   ///< workers joined; buffers and leases being released
  removed,   ///< torn down
};
std::string_view to_string(instance_state s) noexcept;

/// One device buffer to allocate at registration.
struct buffer_spec {
  int device = 0;
  std::size_t bytes = 0;  ///< > 0
};

/// What an instance is made of.
struct instance_config {
  /// Devices that get a save and a load worker (each with its own stream). Distinct, non-empty.
  std::vector<int> devices;
  /// Buffers allocated at registration, each on one of `devices`.
  std::vector<buffer_spec> buffers;
};

/// A buffer of one registration: the generation it belongs to and its index. Valid only while
/// that generation is registered and open; anything else is refused when work is submitted.
struct buffer_handle {
  std::uint64_t generation = 0;
  std::uint32_t index = 0;
  friend bool operator==(const buffer_handle&, const buffer_handle&) = default;
};

/// What register_instance() returns.
struct registration {
  std::uint64_t generation = 0;
  std::vector<buffer_handle> buffers;  ///< in instance_config::buffers order
};

/// A buffer's device memory, for the client to fill (its KV blocks) or read.
struct buffer_info {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  int device = 0;
};

/// Copy `bytes` at `offset` of `buffer` into the block store under `key`.
struct save_request {
  buffer_handle buffer;
  std::size_t offset = 0;
  std::size_t bytes = 0;  ///< > 0
  std::uint64_t key = 0;
  /// checksum() of the bytes the client wrote there; when given, a save whose copy hashes
  /// differently fails with errc::corrupt and stores nothing.
  std::optional<std::uint64_t> checksum;
};

/// Copy the block stored under `key` into `buffer` at `offset`.
struct load_request {
  buffer_handle buffer;
  std::size_t offset = 0;
  std::uint64_t key = 0;
  /// When given, the stored block must carry this checksum (else errc::corrupt, nothing copied).
  std::optional<std::uint64_t> checksum;
};

/// A queued save or load. Copyable; all copies observe the same completion.
class operation {
 public:
  operation() = default;
  /// Blocks until the task ran (or was failed by a teardown) and returns its outcome:
  /// ok; corrupt (checksum mismatch); not_found (no such block, for a load); the worker's error
  /// (device error or injected fault; message names the worker); timeout (abandoned by a
  /// teardown whose join bound expired); invalid_argument (a load larger than the room left).
  [[nodiscard]] status wait() const;
  /// The outcome if the task is done within `timeout`.
  [[nodiscard]] std::optional<status> wait_for(std::chrono::nanoseconds timeout) const;
  [[nodiscard]] bool ready() const noexcept;
  /// The generation of the instance that ran (or refused) it.
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

 private:
  friend class instance_registry;
  operation(std::shared_ptr<detail::op_state> s, std::uint64_t generation)
      : state_(std::move(s)), generation_(generation) {}
  std::shared_ptr<detail::op_state> state_;
  std::uint64_t generation_ = 0;
};

/// The outcome of one unregister. `status` sums it up: ok when the instance was drained, joined
/// and released cleanly; not_found (no such id); timeout (join bound expired: leaked); the
/// worker's error (cleanup completed anyway); or the first failed release.
struct unregister_result {
  core::status status;
  std::string id;
  std::uint64_t generation = 0;  ///< 0 when not found
  bool owner = false;    ///< this call did the teardown; false: it waited for the owner's result
  bool removed = false;  ///< the generation is no longer registered
  bool replaced = false; ///< a newer generation took the id during teardown (and kept it)
  bool drained = false;  ///< every worker reached its drain barrier and was joined
  core::status worker_error;  ///< the first worker failure of this generation (ok when none)
  std::size_t tasks_abandoned = 0;   ///< queued tasks failed with timeout (join bound expired)
  std::size_t buffers_released = 0;
  std::size_t bytes_released = 0;
  std::size_t buffers_leaked = 0;    ///< left allocated on purpose: a worker may still use them
  std::size_t bytes_leaked = 0;
  std::size_t leases_released = 0;
  std::chrono::nanoseconds elapsed{0};  ///< of the teardown (for waiters: of their wait)
};

/// The outcome of unregister_all(): one result per generation it tore down or waited for.
struct unregister_all_result {
  core::status status;  ///< ok, or the first non-ok result's status
  std::vector<unregister_result> results;
  std::size_t remaining = 0;  ///< instances still registered afterwards (0 unless registrations kept racing)
};

/// A live view of one registration.
struct instance_info {
  std::string id;
  std::uint64_t generation = 0;
  instance_state state = instance_state::open;
  std::vector<int> devices;
  std::size_t buffers_live = 0;
  std::size_t leases = 0;               ///< leases held (a key leased twice counts twice)
  std::size_t queued_tasks = 0;         ///< accepted and not yet started, all workers
  std::size_t unregister_waiters = 0;   ///< unregister calls waiting for the owner's teardown
};

/// A block in the host store.
struct block_info {
  std::uint64_t key = 0;
  std::size_t bytes = 0;
  std::uint64_t checksum = 0;
  std::uint64_t saved_by = 0;  ///< generation whose save stored it
  std::uint32_t leases = 0;    ///< outstanding leases over every instance
};

/// Counters and gauges of one registry.
struct registry_stats {
  std::size_t instances = 0;             ///< entries in the map (any state)
  std::uint64_t registrations = 0;       ///< successful register_instance calls
  std::uint64_t buffers_live = 0;        ///< allocated and not released, every generation
  std::uint64_t bytes_live = 0;
  std::uint64_t buffers_leaked = 0;      ///< left allocated by timed-out teardowns
  std::uint64_t bytes_leaked = 0;
  std::uint64_t blocks = 0;              ///< in the host store
  std::uint64_t block_bytes = 0;
  std::uint64_t leases_outstanding = 0;  ///< over every block
  std::uint64_t host_bytes_cached = 0;   ///< host buffers kept for reuse (options::host_cache_bytes)
  std::uint64_t saves_completed = 0;
  std::uint64_t loads_completed = 0;
  std::uint64_t tasks_failed = 0;        ///< ran (or were failed by a failed worker) with an error
  std::uint64_t tasks_abandoned = 0;     ///< failed by a teardown whose join timed out
  std::uint64_t submits_refused = 0;     ///< refused because their instance was draining
  std::uint64_t checksum_mismatches = 0;
  std::uint64_t worker_errors = 0;       ///< workers that failed
  std::uint64_t workers_running = 0;     ///< worker threads not yet finished (abandoned included)
};

struct options {
  /// The device backend; nullptr = device::select_backend() (its error is then returned by every
  /// call that needs the device). Must outlive the registry (backends live until exit).
  device::backend* backend = nullptr;
  /// Where buffers come from, called with the buffer's device current; nullptr = synchronous
  /// device memory from `backend` (cudaMalloc / cudaFree). Must outlive the registry.
  alloc::device_memory_resource* resource = nullptr;
  /// How long an unregister waits for the workers to reach their drain barrier.
  std::chrono::milliseconds join_timeout{10000};
  /// Host buffers of replaced or erased blocks kept for later saves of the same size, so steady
  /// saving writes into memory already mapped (0: none kept).
  std::size_t host_cache_bytes = std::size_t{256} << 20;
};

/// The registry. See the file comment.
class instance_registry {
 public:
  explicit instance_registry(options opts = {});
  /// unregister_all(); see the file comment.
  ~instance_registry();
  instance_registry(const instance_registry&) = delete;
  instance_registry& operator=(const instance_registry&) = delete;

  /// Registers `id` (non-empty) with `config`. Errors: invalid_argument (bad id, devices or
  /// buffers), already_exists (id open), the backend's or the resource's error (nothing is left
  /// allocated or running after a failure).
  result<registration> register_instance(std::string id, const instance_config& config);

  /// Tears `id` down (see the file comment) with the registry's join bound, or `join_timeout`.
  unregister_result unregister_instance(std::string_view id);
  unregister_result unregister_instance(std::string_view id, std::chrono::milliseconds join_timeout);

  /// Tears every instance down, best effort; the registry is empty afterwards unless
  /// registrations kept racing it (`remaining`).
  unregister_all_result unregister_all();
  unregister_all_result unregister_all(std::chrono::milliseconds join_timeout);

  /// Queues a save. Errors (nothing queued): not_found (no such id; a handle of another
  /// generation: "stale handle"; a released buffer), refused (instance draining),
  /// invalid_argument (bytes == 0, out of bounds).
  result<operation> save(std::string_view id, const save_request& request);
  /// Queues a load. Errors as save(); the block itself is looked up when the task runs.
  result<operation> load(std::string_view id, const load_request& request);

  /// The device memory behind `handle`. Errors as save().
  result<buffer_info> buffer(std::string_view id, buffer_handle handle) const;

  /// Pins the stored block `key` for `id` (a reader's lease): it cannot be erased while leased.
  /// Errors: not_found (no such id or block), refused (draining).
  status acquire_lease(std::string_view id, std::uint64_t key);
  /// Drops one lease `id` holds on `key`. Errors: not_found (no such id, or no lease on key).
  status release_lease(std::string_view id, std::uint64_t key);

  /// The stored block `key`. Errors: not_found.
  result<block_info> block(std::uint64_t key) const;
  /// A copy of the stored block's bytes, its checksum verified. Errors: not_found, corrupt.
  result<std::vector<std::byte>> read_block(std::uint64_t key) const;
  /// Erases the stored block. Errors: not_found, busy (leased).
  status erase_block(std::uint64_t key);

  /// The registration currently holding `id` (in any state). Errors: not_found.
  result<instance_info> find(std::string_view id) const;
  /// Every registration in the map.
  [[nodiscard]] std::vector<instance_info> instances() const;
  [[nodiscard]] registry_stats stats() const;

 private:
  using instance_ptr = std::shared_ptr<detail::instance>;

  result<operation> submit(std::string_view id, bool is_save, buffer_handle handle, std::size_t offset,
                           std::size_t bytes, std::uint64_t key, std::optional<std::uint64_t> sum);
  instance_ptr lookup(std::string_view id) const;
  void begin_teardown(detail::teardown_plan& plan, std::chrono::steady_clock::time_point deadline);
  unregister_result finish_teardown(detail::teardown_plan& plan, std::chrono::steady_clock::time_point deadline);
  unregister_result wait_for_owner(const instance_ptr& inst, std::chrono::steady_clock::time_point started);
  void release_buffers(detail::instance& inst, unregister_result& into);
  void leak_buffers(detail::instance& inst, unregister_result& into);
  std::size_t release_leases(detail::instance& inst);
  void erase_entry(const std::string& id, const detail::instance* only_if);
  void discard(detail::instance& inst);
  [[nodiscard]] static instance_info info_of(const detail::instance& inst);

  status backend_error_;
  device::backend* backend_ = nullptr;
  std::unique_ptr<alloc::device_resource> default_resource_;
  alloc::device_memory_resource* resource_ = nullptr;
  std::chrono::milliseconds join_timeout_;
  std::shared_ptr<detail::shared_core> core_;
  mutable std::mutex map_mu_;  // guards map_; taken before any instance's mutex, never after
  std::map<std::string, instance_ptr, std::less<>> map_;
};

}  // namespace faultline::core::registry
