#include "core/alloc/statistics_adaptor.h"

#include <algorithm>

namespace faultline::core::alloc {

allocation_counts statistics_adaptor::counts() const noexcept {
  std::lock_guard lock(mu_);
  return counts_;
}

// Counting after the upstream answered (rather than before, with a rollback) keeps the peak
// exact: a failed allocation never shows up in it, not even transiently.
result<void*> statistics_adaptor::do_allocate(std::size_t bytes, device::stream s) noexcept {
  auto p = upstream_.allocate(bytes, s);
  std::lock_guard lock(mu_);
  if (!p) {
    ++counts_.failed_allocations;
    return p;
  }
  counts_.current_bytes += bytes;
  counts_.total_bytes += bytes;
  ++counts_.current_count;
  ++counts_.total_count;
  counts_.peak_bytes = std::max(counts_.peak_bytes, counts_.current_bytes);
  counts_.peak_count = std::max(counts_.peak_count, counts_.current_count);
  return p;
}

status statistics_adaptor::do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept {
  auto st = upstream_.deallocate(ptr, bytes, s);
  if (!st) return st;
  std::lock_guard lock(mu_);
  // Clamped: freeing more than was counted is the caller's error, reported by a tracking
  // upstream if there is one; the counters must not wrap around.
  counts_.current_bytes -= std::min(counts_.current_bytes, bytes);
  if (counts_.current_count > 0) --counts_.current_count;
  return st;
}

}  // namespace faultline::core::alloc
