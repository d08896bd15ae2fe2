// Remembers every live allocation that passes through a resource, to find leaks and bad frees.
//
// The adaptor wraps an upstream resource (not owned). It records each allocation's pointer, size,
// stream and a sequence number; `outstanding()` lists what is still live, oldest first. A free of
// a pointer it does not know, or with a different size, is rejected with invalid_argument before
// the upstream sees it (double frees and foreign pointers stop here). When the adaptor is
// destroyed with allocations outstanding it reports them on stderr (one "faultline:" summary line
// and the oldest few); it makes no device call.
//
//   alloc::tracking_adaptor tracked(pool, "scenario buffers");
//   auto p = tracked.allocate(4096, stream);
//   tracked.outstanding();          // [{ptr, 4096, stream, 0}]
//   tracked.deallocate(*p, 4096, stream);
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/alloc/device_memory_resource.h"

namespace faultline::core::alloc {

/// One live allocation seen by a tracking_adaptor.
struct tracked_allocation {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  device::stream stream;
  std::uint64_t sequence = 0;  ///< 0 for the adaptor's first allocation, then counting up
};

/// Forwards to an upstream and tracks live allocations. See the file comment.
class tracking_adaptor final : public device_memory_resource {
 public:
  /// Wraps `upstream` (must outlive the adaptor); `name` appears in reports.
  explicit tracking_adaptor(device_memory_resource& upstream, std::string name = "tracking_adaptor");
  /// Reports outstanding allocations on stderr, if any. Makes no device call.
  ~tracking_adaptor() override;

  /// Live allocations, oldest first.
  [[nodiscard]] std::vector<tracked_allocation> outstanding() const;
  [[nodiscard]] std::size_t outstanding_count() const noexcept;
  [[nodiscard]] std::size_t outstanding_bytes() const noexcept;
  /// A human-readable listing: a summary line and the oldest `max_lines` allocations.
  [[nodiscard]] std::string report(std::size_t max_lines = 10) const;

  /// The wrapped resource.
  [[nodiscard]] device_memory_resource& upstream() const noexcept { return upstream_; }

 private:
  struct entry {
    std::size_t bytes = 0;
    device::stream stream;
    std::uint64_t sequence = 0;
  };

  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  device_memory_resource& upstream_;
  const std::string name_;
  mutable std::mutex mu_;
  std::unordered_map<void*, entry> live_;
  std::size_t live_bytes_ = 0;
  std::uint64_t next_sequence_ = 0;
};

}  // namespace faultline::core::alloc
