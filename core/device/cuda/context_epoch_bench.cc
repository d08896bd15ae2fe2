// What each way of reading a device's context identity costs: the driver calls that
// context_epoch() could be built from, one by one and in the combinations considered, beside
// the backend's context_epoch() itself. The pool reads the epoch on every allocate and
// deallocate, so this sets the floor of its hot path on a GPU.
//
// Every benchmark runs with device 0's primary context active (as the pool sees it) and calls
// the driver through the entry points cudart hands out, as the backend does. Candidates:
//   device_get                  cuDeviceGet
//   primary_ctx_get_state       cuDevicePrimaryCtxGetState
//   primary_ctx_retain_release  cuDevicePrimaryCtxRetain + cuDevicePrimaryCtxRelease
//   ctx_get_id_cached           cuCtxGetId on the primary context's handle, kept from a retain
//   ctx_get_current             cuCtxGetCurrent
//   current_then_get_id         cuCtxGetCurrent + cuCtxGetId (when current is the primary)
//   get_state_then_get_id       cuDevicePrimaryCtxGetState + cuCtxGetId on the kept handle
//   five_call_query             the query before the cache: get, state, retain, id, release
//   backend_context_epoch       core::device::backend::context_epoch(0)
//
// Always the cuda backend (each benchmark skips with the reason where no GPU answers):
//
//   context_epoch_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/device/cuda/detail/driver_api.h"
#include "core/device/device.h"

namespace {

namespace device = faultline::core::device;

struct fixture {
  device::detail::driver_api drv;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUdevice dev = 0;
  CUcontext primary = nullptr;
  std::string error;
};

// Loads the entry points, makes device 0's primary context active and current on this thread
// (one allocation through the backend), and keeps its handle. Built once per process.
const fixture& setup() {
  static const fixture f = [] {
    fixture out;
    auto b = device::cuda();
    if (!b) {
      out.error = b.error().to_string();
      return out;
    }
    auto p = (*b)->allocate(256);  // the context exists from here to process exit
    if (!p) {
      out.error = p.error().to_string();
      return out;
    }
    cudaError_t err = cudaSuccess;
    auto drv = device::detail::load_driver_api(err);
    if (!drv) {
      out.error = drv.error().to_string();
      return out;
    }
    out.drv = *drv;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, device::detail::driver_api_version,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      out.error = "no cuCtxGetCurrent";
      return out;
    }
    out.ctx_get_current = reinterpret_cast<CUresult (*)(CUcontext*)>(fn);
    if (out.drv.device_get(&out.dev, 0) != CUDA_SUCCESS ||
        out.drv.primary_ctx_retain(&out.primary, out.dev) != CUDA_SUCCESS) {
      out.error = "cannot name device 0's primary context";
      return out;
    }
    out.drv.primary_ctx_release(out.dev);
    return out;
  }();
  return f;
}

// Skips the benchmark with the reason when there is no GPU (or a call fails).
bool ready(benchmark::State& state) {
  const fixture& f = setup();
  if (!f.error.empty()) state.SkipWithError(f.error.c_str());
  return f.error.empty();
}

void fail(benchmark::State& state, const char* what, CUresult r) {
  state.SkipWithError((std::string(what) + " answered CUresult " + std::to_string(static_cast<int>(r))).c_str());
}

void device_get(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    CUdevice d = 0;
    if (CUresult r = f.drv.device_get(&d, 0); r != CUDA_SUCCESS) return fail(state, "cuDeviceGet", r);
    benchmark::DoNotOptimize(d);
  }
}

void primary_ctx_get_state(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    unsigned int flags = 0;
    int active = 0;
    if (CUresult r = f.drv.primary_ctx_get_state(f.dev, &flags, &active); r != CUDA_SUCCESS) {
      return fail(state, "cuDevicePrimaryCtxGetState", r);
    }
    benchmark::DoNotOptimize(active);
  }
}

void primary_ctx_retain_release(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    CUcontext c = nullptr;
    if (CUresult r = f.drv.primary_ctx_retain(&c, f.dev); r != CUDA_SUCCESS) {
      return fail(state, "cuDevicePrimaryCtxRetain", r);
    }
    f.drv.primary_ctx_release(f.dev);
    benchmark::DoNotOptimize(c);
  }
}

void ctx_get_id_cached(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    unsigned long long id = 0;
    if (CUresult r = f.drv.ctx_get_id(f.primary, &id); r != CUDA_SUCCESS) return fail(state, "cuCtxGetId", r);
    benchmark::DoNotOptimize(id);
  }
}

void ctx_get_current(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    CUcontext c = nullptr;
    if (CUresult r = f.ctx_get_current(&c); r != CUDA_SUCCESS) return fail(state, "cuCtxGetCurrent", r);
    benchmark::DoNotOptimize(c);
  }
}

void current_then_get_id(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  // Threads other than the main one have no current context until a runtime call gives them
  // one; one allocation does.
  auto b = device::cuda();
  if (auto p = (*b)->allocate(256); p) (void)(*b)->deallocate(*p);
  for (auto _ : state) {
    CUcontext c = nullptr;
    unsigned long long id = 0;
    if (CUresult r = f.ctx_get_current(&c); r != CUDA_SUCCESS) return fail(state, "cuCtxGetCurrent", r);
    if (c != f.primary) return state.SkipWithError("the current context is not the primary context");
    if (CUresult r = f.drv.ctx_get_id(c, &id); r != CUDA_SUCCESS) return fail(state, "cuCtxGetId", r);
    benchmark::DoNotOptimize(id);
  }
}

void get_state_then_get_id(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    unsigned int flags = 0;
    int active = 0;
    unsigned long long id = 0;
    if (CUresult r = f.drv.primary_ctx_get_state(f.dev, &flags, &active); r != CUDA_SUCCESS) {
      return fail(state, "cuDevicePrimaryCtxGetState", r);
    }
    if (active != 0) {
      if (CUresult r = f.drv.ctx_get_id(f.primary, &id); r != CUDA_SUCCESS) return fail(state, "cuCtxGetId", r);
    }
    benchmark::DoNotOptimize(id);
  }
}

void five_call_query(benchmark::State& state) {
  if (!ready(state)) return;
  const fixture& f = setup();
  for (auto _ : state) {
    CUdevice d = 0;
    unsigned int flags = 0;
    int active = 0;
    unsigned long long id = 0;
    if (CUresult r = f.drv.device_get(&d, 0); r != CUDA_SUCCESS) return fail(state, "cuDeviceGet", r);
    if (CUresult r = f.drv.primary_ctx_get_state(d, &flags, &active); r != CUDA_SUCCESS) {
      return fail(state, "cuDevicePrimaryCtxGetState", r);
    }
    if (active != 0) {
      CUcontext c = nullptr;
      if (CUresult r = f.drv.primary_ctx_retain(&c, d); r != CUDA_SUCCESS) {
        return fail(state, "cuDevicePrimaryCtxRetain", r);
      }
      CUresult r = f.drv.ctx_get_id(c, &id);
      f.drv.primary_ctx_release(d);
      if (r != CUDA_SUCCESS) return fail(state, "cuCtxGetId", r);
    }
    benchmark::DoNotOptimize(id);
  }
}

void backend_context_epoch(benchmark::State& state) {
  if (!ready(state)) return;
  device::backend& b = **device::cuda();
  for (auto _ : state) benchmark::DoNotOptimize(b.context_epoch(0));
}

BENCHMARK(device_get);
BENCHMARK(primary_ctx_get_state);
BENCHMARK(primary_ctx_retain_release);
BENCHMARK(ctx_get_id_cached);
BENCHMARK(ctx_get_current);
BENCHMARK(current_then_get_id);
BENCHMARK(get_state_then_get_id);
BENCHMARK(five_call_query);
BENCHMARK(backend_context_epoch);
// Contention: the pool of each thread (or one pool's callers) reading one device's epoch.
BENCHMARK(ctx_get_id_cached)->Threads(4)->UseRealTime();
BENCHMARK(five_call_query)->Threads(4)->UseRealTime();
BENCHMARK(backend_context_epoch)->Threads(4)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
