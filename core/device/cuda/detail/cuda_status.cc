#include "core/device/cuda/detail/cuda_status.h"

namespace faultline::core::device::detail {

errc code_for(cudaError_t err) noexcept {
  switch (err) {
    case cudaSuccess:
      return errc::ok;
    case cudaErrorMemoryAllocation:
      return errc::out_of_memory;
    case cudaErrorCudartUnloading:
      return errc::runtime_unloading;
    case cudaErrorNotReady:
      return errc::not_ready;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidHostPointer:
    case cudaErrorInvalidMemcpyDirection:
    // A stale stream after a reset also answers this; callers tell the two apart with
    // context_epoch(), since the handle alone cannot say which it is.
    case cudaErrorInvalidResourceHandle:
      return errc::invalid_argument;
    // Measured after cuDevicePrimaryCtxReset: an old event answers DeviceUninitialized, and
    // cudaEventSynchronize on it ContextIsDestroyed.
    case cudaErrorContextIsDestroyed:
    case cudaErrorDeviceUninitialized:
      return errc::context_reset;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorNotSupported:
    case cudaErrorInitializationError:
      return errc::unavailable;
    case cudaErrorTimeout:
    case cudaErrorLaunchTimeout:
      return errc::timeout;
    default:
      return errc::internal;
  }
}

status from_cuda(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return status::ok();
  // Both are table lookups inside cudart: safe without a driver and after teardown.
  const char* name = cudaGetErrorName(err);
  const char* text = cudaGetErrorString(err);
  std::string message(what);
  message += ": ";
  message += name ? name : "cudaError";
  message += " (";
  message += text ? text : "unknown";
  message += ")";
  return status(code_for(err), std::move(message));
}

errc code_for_driver(CUresult err) noexcept {
  switch (err) {
    case CUDA_SUCCESS:
      return errc::ok;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return errc::out_of_memory;
    case CUDA_ERROR_DEINITIALIZED:
      return errc::runtime_unloading;
    case CUDA_ERROR_NOT_READY:
      return errc::not_ready;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_HANDLE:
      return errc::invalid_argument;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_INVALID_CONTEXT:
      return errc::context_reset;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED:
      return errc::unavailable;
    case CUDA_ERROR_TIMEOUT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return errc::timeout;
    default:
      return errc::internal;
  }
}

status from_driver(CUresult err, std::string_view what, const char* name, const char* text) {
  if (err == CUDA_SUCCESS) return status::ok();
  std::string message(what);
  message += ": ";
  message += name ? std::string(name) : "CUresult " + std::to_string(static_cast<int>(err));
  if (text) {
    message += " (";
    message += text;
    message += ")";
  }
  return status(code_for_driver(err), std::move(message));
}

void runtime_tracker::mark_running() noexcept {
  auto expected = runtime_state::uninitialized;
  state_.compare_exchange_strong(expected, runtime_state::running, std::memory_order_acq_rel);
}

void runtime_tracker::mark_torn_down() noexcept {
  // Teardown is final: nothing moves the state back.
  state_.store(runtime_state::torn_down, std::memory_order_release);
}

status runtime_tracker::unloading(std::string_view what) {
  after_teardown_.fetch_add(1, std::memory_order_relaxed);
  std::string message(what);
  message += ": cudaErrorCudartUnloading (the CUDA runtime has been torn down at process exit)";
  return status(errc::runtime_unloading, std::move(message));
}

status runtime_tracker::fail(cudaError_t err, std::string_view what) {
  if (err == cudaErrorCudartUnloading) {
    mark_torn_down();
    return unloading(what);
  }
  return from_cuda(err, what);
}

}  // namespace faultline::core::device::detail
