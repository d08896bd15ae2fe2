#include "core/device/cuda/detail/driver_api.h"

#include <dlfcn.h>

#include "core/device/cuda/detail/cuda_status.h"

namespace faultline::core::device::detail {

namespace {

template <class Fn>
cudaError_t lookup(const char* symbol, Fn& out, status& why) noexcept {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, driver_api_version, cudaEnableDefault, &found);
  if (err != cudaSuccess) {
    why = from_cuda(err, std::string("cudaGetDriverEntryPointByVersion(") + symbol + ")");
    return err;
  }
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    why = status(errc::internal, std::string("the CUDA driver has no ") + symbol + " at ABI " +
                                     std::to_string(driver_api_version));
    return cudaErrorSymbolNotFound;
  }
  out = reinterpret_cast<Fn>(fn);
  return cudaSuccess;
}

// NVML's return codes that mean "this machine cannot answer" rather than "something broke".
constexpr int nvml_error_not_supported = 3;
constexpr int nvml_error_no_permission = 4;
constexpr int nvml_error_not_found = 6;
constexpr int nvml_error_driver_not_loaded = 9;
constexpr int nvml_error_library_not_found = 12;
constexpr int nvml_error_function_not_found = 13;
constexpr int nvml_error_gpu_is_lost = 15;
constexpr int nvml_error_invalid_argument = 2;

}  // namespace

status driver_api::error(CUresult err, std::string_view what) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (get_error_name) get_error_name(err, &name);
  if (get_error_string) get_error_string(err, &text);
  return from_driver(err, what, name, text);
}

result<driver_api> load_driver_api(cudaError_t& err) noexcept {
  driver_api api;
  status why;
  // The first lookup initialises cudart and the driver; the driver's cuInit is when CUDA
  // registers its atexit teardown.
  if ((err = lookup("cuDeviceGet", api.device_get, why)) != cudaSuccess ||
      (err = lookup("cuDevicePrimaryCtxGetState", api.primary_ctx_get_state, why)) != cudaSuccess ||
      (err = lookup("cuDevicePrimaryCtxRetain", api.primary_ctx_retain, why)) != cudaSuccess ||
      (err = lookup("cuDevicePrimaryCtxRelease", api.primary_ctx_release, why)) != cudaSuccess ||
      (err = lookup("cuDevicePrimaryCtxReset", api.primary_ctx_reset, why)) != cudaSuccess ||
      (err = lookup("cuCtxGetId", api.ctx_get_id, why)) != cudaSuccess ||
      (err = lookup("cuEventSynchronize", api.event_synchronize, why)) != cudaSuccess ||
      (err = lookup("cuGetErrorName", api.get_error_name, why)) != cudaSuccess ||
      (err = lookup("cuGetErrorString", api.get_error_string, why)) != cudaSuccess) {
    return why;
  }
  return api;
}

status nvml_api::error(int nvml_return, std::string_view what) const {
  const char* text = error_string ? error_string(nvml_return) : nullptr;
  std::string message(what);
  message += ": ";
  message += text ? std::string(text) : "NVML error " + std::to_string(nvml_return);
  errc code = errc::internal;
  switch (nvml_return) {
    case nvml_error_not_supported:
    case nvml_error_no_permission:
    case nvml_error_driver_not_loaded:
    case nvml_error_library_not_found:
    case nvml_error_function_not_found:
    case nvml_error_gpu_is_lost:
      code = errc::unavailable;
      break;
    case nvml_error_not_found:
      code = errc::not_found;
      break;
    case nvml_error_invalid_argument:
      code = errc::invalid_argument;
      break;
    default:
      break;
  }
  return status(code, std::move(message));
}

result<nvml_api> load_nvml_api() noexcept {
  // Never dlclose'd: NVML keeps state for the life of the process, and utilization() may be
  // called until exit.
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return status(errc::unavailable, std::string("NVML is not available: ") + (why ? why : "dlopen failed"));
  }
  nvml_api api;
  struct wanted {
    const char* symbol;
    void** slot;
  };
  void* init = nullptr;
  void* by_pci = nullptr;
  void* rates = nullptr;
  void* text = nullptr;
  for (wanted w : {wanted{"nvmlInit_v2", &init}, wanted{"nvmlDeviceGetHandleByPciBusId_v2", &by_pci},
                   wanted{"nvmlDeviceGetUtilizationRates", &rates}, wanted{"nvmlErrorString", &text}}) {
    *w.slot = dlsym(lib, w.symbol);
    if (*w.slot == nullptr) {
      return status(errc::unavailable, std::string("NVML lacks ") + w.symbol);
    }
  }
  api.init = reinterpret_cast<int (*)()>(init);
  api.device_by_pci_bus_id = reinterpret_cast<int (*)(const char*, nvml_api::device_handle*)>(by_pci);
  api.utilization_rates = reinterpret_cast<int (*)(nvml_api::device_handle, nvml_utilization*)>(rates);
  api.error_string = reinterpret_cast<const char* (*)(int)>(text);
  if (int rc = api.init(); rc != 0) return api.error(rc, "nvmlInit_v2");
  return api;
}

}  // namespace faultline::core::device::detail
