// The upstream resources: device memory straight from the backend, with no pooling.
//
// `device_resource` is synchronous allocation (cudaMalloc / cudaFree; the stream argument is
// ignored and a free waits for the device). `async_resource` is stream-ordered allocation
// (cudaMallocAsync / cudaFreeAsync on the given stream). Both are what a `pool_resource` grows
// from, and both are what the benchmarks compare the pool against.
//
//   alloc::device_resource upstream;                      // the process's backend, lazily chosen
//   alloc::pool_resource pool(upstream);
//
//   alloc::async_resource async(core::device::sim());     // an explicit backend
//   auto p = async.allocate(1 << 20, stream);
//
// Every backend call is made inside the allocator's exit guard (process_exit.h): once
// faultline's exit hook has run, calls are refused with errc::refused instead of reaching a
// runtime that is being torn down, and the hook waits (bounded) for calls already inside.
//
// Neither resource tracks its allocations: freeing a pointer it did not hand out is whatever the
// backend makes of it. Wrap one in a tracking_adaptor to catch that.
//
// Thread safety: all members may be called from any thread.
#pragma once

#include <atomic>

#include "core/alloc/device_memory_resource.h"
#include "core/device/device.h"

namespace faultline::core::alloc {

/// Synchronous device memory (cudaMalloc / cudaFree) from one backend.
class device_resource final : public device_memory_resource {
 public:
  /// Uses the process's backend (device::select_backend()), resolved at the first call; a bad
  /// FAULTLINE_DEVICE is then reported by allocate/deallocate as an error value.
  device_resource() noexcept = default;
  /// Uses `backend`, which must outlive this resource (backends live until process exit).
  explicit device_resource(device::backend& backend) noexcept : backend_(&backend) {}

 private:
  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  std::atomic<device::backend*> backend_{nullptr};
};

/// Stream-ordered device memory (cudaMallocAsync / cudaFreeAsync) from one backend.
class async_resource final : public device_memory_resource {
 public:
  /// Uses the process's backend, resolved at the first call (see device_resource()).
  async_resource() noexcept = default;
  /// Uses `backend`, which must outlive this resource.
  explicit async_resource(device::backend& backend) noexcept : backend_(&backend) {}

 private:
  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  std::atomic<device::backend*> backend_{nullptr};
};

}  // namespace faultline::core::alloc
