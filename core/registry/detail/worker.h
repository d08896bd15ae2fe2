// A registry worker (private): one task queue and one device stream, serving one device of one
// registration, either its saves or its loads. Two threads share it: the *starter* takes tasks in
// order, checks them and queues their copies on the stream, each followed by an event; the
// *completer* waits for each copy's event in the same order, then hashes and stores the block (a
// save) and completes the task. Up to `pipeline_depth` tasks are between the two, so a save costs
// about the longer of its copy and its hash rather than both (on CUDA a copy to pageable host
// memory returns only once done, so the starter's thread is busy copying while the completer
// hashes). Tasks complete in submission order.
//
//   auto w = std::make_shared<worker_state>(core, device, worker_role::save, stream, "engine-0", gen);
//   if (auto s = start_worker(w); !s) ...
//   enqueue(*w, task{...});                          // run in submission order
//   enqueue(*w, task{.kind = task_kind::barrier});   // the in-band drain barrier: the threads end
//   if (wait_exited(*w, deadline)) w->thread.join(); // ...after every task queued before it
//
// A task that fails because of the worker itself (a device call failed, or the injected
// registry/worker/task failure) makes the worker *failed*: it records its first error and fails
// every later task with it instead of running it, so every waiter gets an answer and the drain
// barrier is still reached.
//
// Thread safety: enqueue, wait_exited, take_pending, error_of and queued may be called from any
// thread. The thread and its state are shared_ptr-owned, so a worker abandoned by a timed-out
// teardown keeps everything it touches alive until it finishes, then destroys its own stream and
// events.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device/device.h"
#include "core/registry/detail/block_store.h"
#include "core/status.h"

namespace faultline::core::registry::detail {

/// Tasks whose copies may be queued on the stream at once (one event each).
inline constexpr std::size_t pipeline_depth = 4;

/// Counters and the host store, shared by the registry and every worker (outlives both).
struct shared_core {
  explicit shared_core(std::size_t host_cache_bytes) : pool(host_cache_bytes) {}
  device::backend* backend = nullptr;
  std::chrono::milliseconds join_timeout{10000};  ///< the registry's join bound (options.join_timeout)
  host_pool pool;  // declared before the store: blocks give their buffers back to it
  block_store store;
  std::atomic<std::uint64_t> registrations{0};
  std::atomic<std::uint64_t> buffers_live{0};
  std::atomic<std::uint64_t> bytes_live{0};
  std::atomic<std::uint64_t> buffers_leaked{0};
  std::atomic<std::uint64_t> bytes_leaked{0};
  std::atomic<std::uint64_t> saves_completed{0};
  std::atomic<std::uint64_t> loads_completed{0};
  std::atomic<std::uint64_t> tasks_failed{0};
  std::atomic<std::uint64_t> tasks_abandoned{0};
  std::atomic<std::uint64_t> submits_refused{0};
  std::atomic<std::uint64_t> checksum_mismatches{0};
  std::atomic<std::uint64_t> worker_errors{0};
  std::atomic<std::uint64_t> workers_running{0};
};

/// The completion of one task; operation is a view of it.
struct op_state {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool done = false;  // guarded by mu
  status result;      // guarded by mu; written once, before done
  void complete(status s);
};

enum class task_kind : std::uint8_t { save, load, barrier };
enum class worker_role : std::uint8_t { save, load };

struct task {
  task_kind kind = task_kind::barrier;
  std::shared_ptr<op_state> op;
  std::byte* device_ptr = nullptr;  ///< buffer + offset, resolved from a checked handle
  std::size_t bytes = 0;            ///< save: bytes to copy; load: room left in the buffer
  std::uint64_t key = 0;
  std::optional<std::uint64_t> checksum;
};

/// A task whose copy is queued on the stream, with an event recorded behind it.
struct in_flight {
  task t;
  std::shared_ptr<stored_block> saved;         ///< save: the host block being filled
  std::shared_ptr<const stored_block> loaded;  ///< load: the block being copied to the device
  std::size_t slot = 0;                        ///< its event
};

struct worker_state {
  worker_state(std::shared_ptr<shared_core> c, int dev, worker_role r, device::stream s, std::string inst_id,
               std::uint64_t gen)
      : core(std::move(c)), device(dev), role(r), stream(s), id(std::move(inst_id)), generation(gen) {}
  /// A worker whose thread was neither joined nor detached (a teardown that never ran) detaches it
  /// rather than terminate: the thread holds its own reference and ends at its barrier.
  ~worker_state();
  worker_state(const worker_state&) = delete;
  worker_state& operator=(const worker_state&) = delete;

  const std::shared_ptr<shared_core> core;
  const int device;
  const worker_role role;
  const device::stream stream;
  const std::string id;
  const std::uint64_t generation;
  /// pipeline_depth events on `stream`'s device, created with it; used by the two threads.
  std::vector<device::event> events;
  std::thread thread;     ///< the starter; it joins the completer at the barrier
  std::thread completer;

  std::mutex mu;
  std::condition_variable cv;    // any change below (both threads and the teardown wait on it)
  std::deque<task> queue;        // guarded by mu: accepted, not yet started
  std::deque<in_flight> flights; // guarded by mu: started, not yet completed (in order)
  bool flights_closed = false;   // guarded by mu: the starter passed its barrier
  bool exited = false;           // guarded by mu: both threads are done with every task
  bool abandoned = false;        // guarded by mu: no teardown will join it; it cleans up itself
  status error;                  // guarded by mu: the first worker failure
};

/// A name for messages: "save worker (device 0) of 'engine-0' generation 7".
std::string describe(const worker_state& w);
/// Starts the threads. Errors: internal (a thread could not be created; none is left running).
status start_worker(const std::shared_ptr<worker_state>& w);
void enqueue(worker_state& w, task t);
/// Waits until the thread passed its barrier or `deadline`; true when it did.
bool wait_exited(worker_state& w, std::chrono::steady_clock::time_point deadline);
/// Gives a still-running worker up: when it ends, it destroys its own events and stream (the
/// buffers it may be copying are the caller's to leak). False when it already ended: then the
/// caller joins it and cleans up as usual. The caller detaches the thread after a true.
bool abandon(worker_state& w);
/// Removes every queued task except barriers (a teardown abandoning a stuck worker, or cleaning
/// up tasks that arrived after the barrier).
std::vector<task> take_pending(worker_state& w);
[[nodiscard]] status error_of(worker_state& w);
[[nodiscard]] std::size_t queued(worker_state& w);

}  // namespace faultline::core::registry::detail
