// One registration (private): its generation, lifecycle state, buffers, leases and workers, and
// the teardown result its unregister callers share.
//
// Locking: the registry's map mutex is taken before an instance's `mu`, never after. `mu` guards
// the state, the submit gate (`inflight`), buffer slots, leases and waiter count; it is never held
// across a device call, a worker join or a fault point.
//
// Thread safety: as above; the fields marked const are fixed at registration.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/registry/detail/worker.h"
#include "core/registry/registry.h"

namespace faultline::core::registry::detail {

enum class slot_state : std::uint8_t { live, released, leaked };

struct buffer_slot {
  std::byte* ptr = nullptr;
  std::size_t bytes = 0;
  int device = 0;
  slot_state state = slot_state::live;
};

struct instance {
  instance(std::string i, std::uint64_t gen, std::vector<int> devs)
      : id(std::move(i)), generation(gen), devices(std::move(devs)) {}
  /// Workers that were never torn down (only a bug path drops an instance that way) are given a
  /// barrier and joined within the registry's join bound, like an unregister's; only a worker
  /// still running then is abandoned (it ends after its last task and destroys its own stream).
  /// A dropped instance so never leaves a thread that outlives `main` racing the device's teardown.
  ~instance();
  instance(const instance&) = delete;
  instance& operator=(const instance&) = delete;

  const std::string id;
  const std::uint64_t generation;
  const std::vector<int> devices;
  /// Per entry of `devices`: its save worker and its load worker. Fixed after registration.
  std::vector<std::shared_ptr<worker_state>> save_workers;
  std::vector<std::shared_ptr<worker_state>> load_workers;

  mutable std::mutex mu;
  std::condition_variable gate_cv;        // inflight reached 0
  instance_state state = instance_state::open;
  int inflight = 0;                       // submits past their check, task not yet queued
  std::size_t waiters = 0;                // unregister calls waiting for the owner
  std::vector<buffer_slot> buffers;
  std::unordered_map<std::uint64_t, std::uint32_t> leases;  // key -> count held

  // The shared teardown result.
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;                      // guarded by done_mu
  unregister_result outcome;              // guarded by done_mu; final once done

  [[nodiscard]] std::vector<std::shared_ptr<worker_state>> workers() const {
    std::vector<std::shared_ptr<worker_state>> all(save_workers);
    all.insert(all.end(), load_workers.begin(), load_workers.end());
    return all;
  }
};

/// What the owner of a teardown carries from its first half (mark, barriers) to its second (join,
/// release, remove). Bug-point decisions are taken once, at the start.
struct teardown_plan {
  std::shared_ptr<instance> inst;
  std::chrono::steady_clock::time_point started;
  bool bug_release_before_drain = false;
  bool bug_cleanup_by_id = false;
  bool released_early = false;   // bug/registry/release-before-drain took its path
  bool removed_early = false;    // bug/registry/cleanup-by-id erased the id before the join
  unregister_result result;
};

}  // namespace faultline::core::registry::detail
