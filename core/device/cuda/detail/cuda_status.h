// Private to the cuda backend: how CUDA runtime and driver errors become core::status values,
// and how the backend follows the runtime's life (first call, teardown at exit).
//
// Every CUDA error converts here and only here, so each status carries the CUDA error name and
// text ("cudaMalloc of 1024 bytes: cudaErrorMemoryAllocation (out of memory)") and the code
// mapping is written once:
//
//   detail::runtime_tracker rt;
//   cudaError_t e = cudaMalloc(&p, bytes);
//   if (e != cudaSuccess) return rt.fail(e, "cudaMalloc");   // counts a post-teardown call
//
// Thread safety: from_cuda and code_for are pure; runtime_tracker is lock-free and may be used
// from any thread.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/device/device.h"
#include "core/status.h"

namespace faultline::core::device::detail {

/// The errc a CUDA runtime error maps to. cudaErrorMemoryAllocation is out_of_memory,
/// cudaErrorCudartUnloading is runtime_unloading, cudaErrorNotReady is not_ready, errors that
/// say "no usable device or driver" are unavailable, a destroyed context is context_reset,
/// malformed arguments are invalid_argument, everything else is internal.
errc code_for(cudaError_t err) noexcept;

/// "<what>: <cudaErrorName> (<cudaGetErrorString>)" with code_for(err). err must not be
/// cudaSuccess (that returns ok). Pure: does not touch the runtime's state.
status from_cuda(cudaError_t err, std::string_view what);

/// The errc a CUDA driver error maps to (same policy as code_for; CUDA_ERROR_DEINITIALIZED,
/// which the driver answers once the process's CUDA teardown has run, is runtime_unloading).
errc code_for_driver(CUresult err) noexcept;

/// "<what>: <CUDA_ERROR_NAME> (<text>)". `name` and `text` come from cuGetErrorName and
/// cuGetErrorString when the driver is loaded; null falls back to the number.
status from_driver(CUresult err, std::string_view what, const char* name, const char* text);

/// Follows the runtime's life as the backend observes it: uninitialized until the first call,
/// running after, torn_down once any call answered cudaErrorCudartUnloading (cudart's atexit
/// teardown has run; it never comes back). Counts every backend call that returned
/// runtime_unloading.
class runtime_tracker {
 public:
  /// Moves uninitialized -> running (no effect later).
  void mark_running() noexcept;
  /// Records that teardown was seen (state becomes torn_down) without counting a call.
  void mark_torn_down() noexcept;
  [[nodiscard]] bool torn_down() const noexcept {
    return state_.load(std::memory_order_acquire) == runtime_state::torn_down;
  }
  [[nodiscard]] runtime_state state() const noexcept { return state_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint64_t calls_after_teardown() const noexcept {
    return after_teardown_.load(std::memory_order_relaxed);
  }

  /// Counts one call made after teardown and returns its runtime_unloading status.
  status unloading(std::string_view what);
  /// The status for a failed runtime call: cudaErrorCudartUnloading marks teardown and counts
  /// (via unloading()); any other error converts with from_cuda. err != cudaSuccess.
  status fail(cudaError_t err, std::string_view what);
  /// ok for cudaSuccess, else fail(err, what).
  status check(cudaError_t err, std::string_view what) {
    return err == cudaSuccess ? status::ok() : fail(err, what);
  }

 private:
  std::atomic<runtime_state> state_{runtime_state::uninitialized};
  std::atomic<std::uint64_t> after_teardown_{0};
};

}  // namespace faultline::core::device::detail
