// The items of FAULTLINE_FAULTS that the preloaded agent's call points (cuda/, spawn/, process/)
// have met, each with its plan and whether this process reached it: one item's counts are shared
// by every call it covers, as one item's are in the fault engine. Private to the agent;
// allocation-free, thread-safe (a spin lock, never held while acting).
#pragma once

#include <atomic>
#include <cstring>

#include "faults/preload/detail/points.h"

namespace faultline::agent::detail {

template <unsigned Capacity>
class plan_table {
 public:
  /// The index of the item that `plan_point(spec, point, …, programs)` finds, added on first
  /// use; -1 when none applies or the table is full.
  int find(const char* spec, const char* point, const char* const* programs = nullptr) noexcept {
    point_plan plan;
    plan_point(spec, point, plan, programs);
    if (!plan.enabled) return -1;
    guard g(busy_);
    for (unsigned i = 0; i < count_; ++i) {
      if (std::strcmp(items_[i].plan.pattern, plan.pattern) == 0) return static_cast<int>(i);
    }
    if (count_ == Capacity) return -1;
    items_[count_].plan = plan;
    return static_cast<int>(count_++);
  }

  /// The item's name as written (points.PID's line).
  const char* pattern(int item) const noexcept { return items_[item].plan.pattern; }

  /// One hit of item `item`: records it reached the first time (through `record`), evaluates its
  /// chain once and returns the term that fires (action off when none).
  /// With `claim`, the item's N* counts are the run's (evaluate_plan's claim), not this process's.
  point_term hit(int item, std::uint64_t (*draw)(), void (*record)(const char*) noexcept,
                 run_count_claim claim = nullptr) noexcept {
    entry& e = items_[item];
    if (!e.reached.load(std::memory_order_relaxed) && !e.reached.exchange(true, std::memory_order_relaxed)) {
      record(e.plan.pattern);
    }
    guard g(busy_);
    return evaluate_plan(e.plan, draw, claim);
  }

 private:
  struct entry {
    point_plan plan;
    std::atomic<bool> reached{false};
  };
  struct guard {
    explicit guard(std::atomic_flag& f) noexcept : flag(f) {
      while (flag.test_and_set(std::memory_order_acquire)) {
      }
    }
    ~guard() { flag.clear(std::memory_order_release); }
    std::atomic_flag& flag;
  };

  entry items_[Capacity];
  unsigned count_ = 0;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};

}  // namespace faultline::agent::detail
