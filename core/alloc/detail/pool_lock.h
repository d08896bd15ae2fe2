// Private: the pool's lock — a small futex-style mutex (three states: free, held, held with
// sleepers) on std::atomic wait/notify, inlined into the pool's fast path.
//
// std::mutex costs two out-of-line calls per critical section; the pool takes its lock twice per
// allocate/free pair and holds it for well under a microsecond, so those calls were a third of
// the pool's own time. Contended waiters spin briefly, then sleep in the kernel (they never busy
// wait through a growth that holds the lock across cudaMalloc).
//
// Meets the Lockable requirements (std::lock_guard works). Not recursive.
#pragma once

#include <atomic>
#include <cstdint>

namespace faultline::core::alloc::detail {

class pool_lock {
 public:
  void lock() noexcept {
    std::uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    lock_contended();
  }

  bool try_lock() noexcept {
    std::uint32_t expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  void lock_contended() noexcept {
    for (int i = 0; i < 100; ++i) {
      std::uint32_t expected = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) {
        return;
      }
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // State 2 tells the holder someone sleeps; whoever takes the lock from here keeps it at 2.
    while (state_.exchange(2, std::memory_order_acquire) != 0) state_.wait(2, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{0};
};

}  // namespace faultline::core::alloc::detail
