// The base class of every faultline memory resource: device memory handed out in stream order.
//
// A resource is a small class with two operations, `allocate` and `deallocate`, both ordered on a
// device stream. Behaviour is composed by wrapping: a `pool_resource` over a `device_resource`,
// a `statistics_adaptor` over the pool, and so on (each adaptor takes its upstream by reference
// and never owns it). Errors are values: an allocation that cannot be served returns a status
// (out_of_memory, refused at process exit, injected by a fault point), never throws.
//
//   alloc::device_resource upstream;                  // cudaMalloc / cudaFree
//   alloc::pool_resource pool(upstream);              // the pool in front of it
//   core::result<void*> p = pool.allocate(4096, stream);
//   if (!p) return p.error();
//   ...
//   pool.deallocate(*p, 4096, stream);
//
// Thread safety: depends on the resource; every resource in core/alloc is safe to call from any
// thread unless its header says otherwise.
#pragma once

#include <cstddef>
#include <string>

#include "core/device/device.h"
#include "core/status.h"

namespace faultline::core::alloc {

/// Stream-ordered device memory. Subclasses implement `do_allocate` / `do_deallocate`; callers
/// use the non-virtual `allocate` / `deallocate`, which reject malformed arguments before the
/// subclass sees them.
class device_memory_resource {
 public:
  device_memory_resource() = default;
  virtual ~device_memory_resource() = default;
  device_memory_resource(const device_memory_resource&) = delete;
  device_memory_resource& operator=(const device_memory_resource&) = delete;

  /// Allocates `bytes` (> 0) usable by work queued on `s` after this call.
  /// Errors: invalid_argument for bytes == 0; otherwise whatever the resource reports
  /// (out_of_memory, refused during process exit, injected by a fault point, ...).
  result<void*> allocate(std::size_t bytes, device::stream s = {}) noexcept {
    if (bytes == 0) return status(errc::invalid_argument, "allocate: bytes must be greater than 0");
    return do_allocate(bytes, s);
  }

  /// Returns `ptr`, which this resource allocated with the same `bytes`, once work queued on `s`
  /// before this call has completed. Errors: invalid_argument for a null pointer or bytes == 0;
  /// resources that track their blocks also reject pointers they did not hand out.
  status deallocate(void* ptr, std::size_t bytes, device::stream s = {}) noexcept {
    if (ptr == nullptr) return status(errc::invalid_argument, "deallocate: null pointer");
    if (bytes == 0) return status(errc::invalid_argument, "deallocate: bytes must be greater than 0");
    return do_deallocate(ptr, bytes, s);
  }

 private:
  virtual result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept = 0;
  virtual status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept = 0;
};

}  // namespace faultline::core::alloc
