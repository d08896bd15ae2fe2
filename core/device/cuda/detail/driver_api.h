// Private to the cuda backend: the CUDA driver and NVML functions it needs, found at run time.
//
// faultline binaries must start on machines with no GPU and no driver (CI), so nothing links
// libcuda.so or libnvidia-ml.so. Driver functions come from cudart
// (cudaGetDriverEntryPointByVersion, which loads the driver itself when one exists), NVML from
// dlopen("libnvidia-ml.so.1").
//
//   auto drv = detail::load_driver_api();          // a runtime call: initialises cudart
//   if (!drv) return drv.error();                  // unavailable without a driver
//   CUdevice dev;  drv->device_get(&dev, 0);
//
// Thread safety: loading is a pure function of the process (call it once and keep the table);
// the tables are plain function pointers, safe to share.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"

namespace faultline::core::device::detail {

/// Driver entry points, all requested at the CUDA 12.0 ABI (cuCtxGetId is the newest used).
struct driver_api {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice) = nullptr;
  CUresult (*primary_ctx_reset)(CUdevice) = nullptr;
  CUresult (*ctx_get_id)(CUcontext, unsigned long long*) = nullptr;
  CUresult (*event_synchronize)(CUevent) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;

  /// Converts a driver error with its name and text ("cuDevicePrimaryCtxReset: CUDA_ERROR_...").
  [[nodiscard]] status error(CUresult err, std::string_view what) const;
};

/// The ABI version every entry point is requested at.
inline constexpr unsigned int driver_api_version = 12000;

/// Looks up every driver_api entry point through cudaGetDriverEntryPointByVersion. On failure
/// returns the cudaError_t of the first failed lookup in `err` (so the caller can see
/// cudaErrorCudartUnloading) and a status: unavailable without a driver, internal when the
/// driver lacks a symbol. Does not create a device context.
result<driver_api> load_driver_api(cudaError_t& err) noexcept;

/// NVML's utilisation counters (declared here: the toolkit ships no nvml.h).
struct nvml_utilization {
  unsigned int gpu = 0;     ///< percent of time a kernel ran over the last sample period
  unsigned int memory = 0;  ///< percent of time device memory was read or written
};

struct nvml_device_opaque;

/// The NVML functions the backend uses, from dlopen("libnvidia-ml.so.1") (never unloaded).
struct nvml_api {
  using device_handle = nvml_device_opaque*;
  int (*init)() = nullptr;                                              // nvmlInit_v2
  int (*device_by_pci_bus_id)(const char*, device_handle*) = nullptr;   // ..._v2
  int (*utilization_rates)(device_handle, nvml_utilization*) = nullptr;
  const char* (*error_string)(int) = nullptr;

  /// "<what>: <nvmlErrorString>"; NVML_ERROR_NOT_SUPPORTED and friends are unavailable.
  [[nodiscard]] status error(int nvml_return, std::string_view what) const;
};

/// Opens NVML and initialises it. unavailable (with dlerror's text) when the library is absent.
result<nvml_api> load_nvml_api() noexcept;

}  // namespace faultline::core::device::detail
