// Test-only helpers for the allocator's tests (not part of faultline::core).
//
// - recording_backend: forwards every call to a real backend (the sim here) and logs the calls
//   the pool makes on events and streams, so a test can see that stream_wait_event was issued;
// - test_upstream: an upstream resource over device memory that records the sizes asked of it,
//   can refuse requests above a size, fail frees, or hand out adjacent slices of one block;
// - arm_point / disarm_points: a tiny fault hook (core/points) that fires named points, so
//   tests can arm bug points and fault points without faultline::faults;
// - seeded_rng: splitmix64 with a hand-written range mapping (portable, deterministic).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/alloc/device_memory_resource.h"
#include "core/device/device.h"

namespace faultline::core::alloc::testing {

/// The process's current device backend (what the allocators under test draw from).
inline device::backend& dev() { return device::current(); }


/// Whether fault and bug points are compiled in (FAULTLINE_FAULTS); tests that arm one skip
/// without them.
#if defined(FAULTLINE_FAULTS_ENABLED) && FAULTLINE_FAULTS_ENABLED
inline constexpr bool faults_compiled_in = true;
#else
inline constexpr bool faults_compiled_in = false;
#endif

/// One call seen by a recording_backend.
struct recorded_call {
  std::string name;
  void* stream = nullptr;
  void* event = nullptr;
  std::size_t bytes = 0;
};

/// A backend that forwards to `inner` and records calls (thread-safe).
class recording_backend final : public device::backend {
 public:
  explicit recording_backend(device::backend& inner) : inner_(inner) {}

  std::vector<recorded_call> calls() const;
  void clear();
  std::size_t count(const std::string& name) const;
  /// While set, allocate() blocks (sleeping) until cleared: a thread stuck inside the device.
  std::atomic<bool> block_allocate{false};
  /// Set by allocate() while it is blocked.
  std::atomic<bool> allocate_blocked{false};

  device::backend_kind kind() const noexcept override { return inner_.kind(); }
  std::string_view name() const noexcept override { return "recording"; }
  result<int> device_count() noexcept override { return inner_.device_count(); }
  status set_device(int device) noexcept override { return inner_.set_device(device); }
  result<int> current_device() noexcept override { return inner_.current_device(); }
  result<device::memory_info> memory(int device) noexcept override { return inner_.memory(device); }
  result<int> utilization(int device) noexcept override { return inner_.utilization(device); }
  result<void*> allocate(std::size_t bytes) noexcept override;
  status deallocate(void* ptr) noexcept override;
  result<void*> allocate_async(std::size_t bytes, device::stream s) noexcept override;
  status deallocate_async(void* ptr, device::stream s) noexcept override;
  status copy_async(void* dst, const void* src, std::size_t bytes, device::stream s) noexcept override {
    return inner_.copy_async(dst, src, bytes, s);
  }
  status fill_async(void* dst, int value, std::size_t bytes, device::stream s) noexcept override {
    return inner_.fill_async(dst, value, bytes, s);
  }
  result<device::stream> create_stream() noexcept override { return inner_.create_stream(); }
  status destroy_stream(device::stream s) noexcept override { return inner_.destroy_stream(s); }
  status synchronize_stream(device::stream s) noexcept override;
  status synchronize_device() noexcept override;
  result<device::event> create_event() noexcept override;
  status destroy_event(device::event e) noexcept override;
  status record_event(device::event e, device::stream s) noexcept override;
  status query_event(device::event e) noexcept override { return inner_.query_event(e); }
  status synchronize_event(device::event e) noexcept override { return inner_.synchronize_event(e); }
  status stream_wait_event(device::stream s, device::event e) noexcept override;
  status reset_context(int device) noexcept override { return inner_.reset_context(device); }
  std::uint64_t context_epoch(int device) const noexcept override { return inner_.context_epoch(device); }
  device::runtime_state state() const noexcept override { return inner_.state(); }
  std::uint64_t calls_after_teardown() const noexcept override { return inner_.calls_after_teardown(); }

 private:
  void log(recorded_call c);
  device::backend& inner_;
  mutable std::mutex mu_;
  std::vector<recorded_call> calls_;
};

/// An upstream for pool tests. Thread-safe.
class test_upstream final : public device_memory_resource {
 public:
  /// Over `backend`'s synchronous allocation.
  explicit test_upstream(device::backend& backend) : backend_(backend) {}
  ~test_upstream() override;

  /// Requests above this many bytes are refused with out_of_memory (0: none refused).
  std::atomic<std::size_t> refuse_above_bytes{0};
  /// When set, deallocate fails with internal and frees nothing.
  std::atomic<bool> fail_deallocate{false};
  /// When > 0, allocations are carved one after another from one device block of this size, so
  /// consecutive upstream blocks are adjacent in memory (set before the first allocation).
  std::size_t adjacent_arena_bytes = 0;

  std::vector<std::size_t> requests() const;         ///< every size asked, refused ones too
  std::vector<std::size_t> granted() const;          ///< sizes handed out
  std::size_t deallocations() const;
  std::size_t live_bytes() const;

 private:
  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  device::backend& backend_;
  mutable std::mutex mu_;
  std::vector<std::size_t> requests_;
  std::vector<std::size_t> granted_;
  std::size_t deallocations_ = 0;
  std::size_t live_bytes_ = 0;
  void* arena_ = nullptr;
  std::size_t arena_used_ = 0;
};

/// Arms the fault-point floor with a test hook: `name` (exact) fires `times` times (-1: always),
/// sleeping `delay_ms` first and returning `code` (0: the caller goes on; bug points only look
/// at "fired"). With `marked_threads_only` it fires only on threads that called
/// mark_this_thread(). Up to 8 rules; arm before the threads that hit them start.
void arm_point(const char* name, int code = 0, int delay_ms = 0, int times = -1, bool marked_threads_only = false);
/// Marks the calling thread for rules armed with marked_threads_only.
void mark_this_thread();
/// How many times `name` fired so far.
int fired_count(const char* name);
/// Removes every rule and disarms the floor.
void disarm_points();

/// splitmix64 with a portable range mapping.
class seeded_rng {
 public:
  explicit seeded_rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  /// Uniform in [lo, hi] (hi - lo < 2^32), by multiply-shift rather than std distributions.
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi);

 private:
  std::uint64_t state_;
};

}  // namespace faultline::core::alloc::testing
