// Counts what passes through a resource: bytes and allocations now, at peak, and in total.
//
// The adaptor wraps an upstream resource (not owned) and forwards every call. Numbers change only
// when the upstream succeeded, so a refused allocation or a failed free leaves them exact (and a
// refusal is counted in `failed_allocations`). Byte counts are the sizes callers passed.
//
//   alloc::statistics_adaptor stats(pool);
//   auto p = stats.allocate(1000, stream);
//   stats.counts().current_bytes;   // 1000
//   stats.counts().peak_bytes;      // 1000
//
// Thread safety: every member may be called from any thread; counts() is a consistent snapshot.
// The destructor makes no device call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "core/alloc/device_memory_resource.h"

namespace faultline::core::alloc {

/// A snapshot of a statistics_adaptor's counters.
struct allocation_counts {
  std::size_t current_bytes = 0;   ///< allocated and not yet freed
  std::size_t peak_bytes = 0;      ///< highest current_bytes seen
  std::size_t total_bytes = 0;     ///< every successful allocation, summed
  std::size_t current_count = 0;
  std::size_t peak_count = 0;
  std::size_t total_count = 0;
  std::size_t failed_allocations = 0;  ///< allocations the upstream refused
};

/// Forwards to an upstream and counts. See the file comment.
class statistics_adaptor final : public device_memory_resource {
 public:
  /// Wraps `upstream`, which must outlive the adaptor.
  explicit statistics_adaptor(device_memory_resource& upstream) noexcept : upstream_(upstream) {}

  /// A consistent snapshot of the counters.
  [[nodiscard]] allocation_counts counts() const noexcept;

  /// The wrapped resource.
  [[nodiscard]] device_memory_resource& upstream() const noexcept { return upstream_; }

 private:
  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  device_memory_resource& upstream_;
  mutable std::mutex mu_;
  allocation_counts counts_;
};

}  // namespace faultline::core::alloc
