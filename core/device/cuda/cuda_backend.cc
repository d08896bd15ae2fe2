// The cuda device backend: core::device::backend over the CUDA runtime (linked statically),
// driver entry points found through cudart, and NVML opened at run time. See DESIGN.md §4.2, §13.2.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>

#include "core/device/cuda/detail/cuda_status.h"
#include "core/device/cuda/detail/driver_api.h"
#include "core/device/device.h"

namespace faultline::core::device {

namespace detail {

namespace {

// Per-device state lives in fixed arrays so that context_epoch() stays lock-free and
// allocation-free; no machine this project targets has more devices.
constexpr int max_cuda_devices = 64;

// context_epoch() packs two numbers: the backend's own reset count in the high bits and a
// context-identity part in the low bits. 44 bits of identity hold 2^43 context ids (ids count
// up from 1 per process); 20 bits hold a million resets of one device.
constexpr unsigned epoch_identity_bits = 44;
constexpr std::uint64_t epoch_identity_mask = (std::uint64_t{1} << epoch_identity_bits) - 1;

cudaStream_t native(stream s) noexcept { return static_cast<cudaStream_t>(s.native); }
cudaEvent_t native(event e) noexcept { return static_cast<cudaEvent_t>(e.native); }

status invalid(std::string message) { return status(errc::invalid_argument, std::move(message)); }

void store_max(std::atomic<std::uint64_t>& slot, std::uint64_t value) noexcept {
  std::uint64_t seen = slot.load(std::memory_order_relaxed);
  while (seen < value && !slot.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

class cuda_backend final : public backend {
 public:
  [[nodiscard]] backend_kind kind() const noexcept override { return backend_kind::cuda; }
  [[nodiscard]] std::string_view name() const noexcept override { return "cuda"; }

  result<int> device_count() noexcept override {
    if (auto s = enter("cudaGetDeviceCount"); !s) return s;
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) return rt_.fail(e, "cudaGetDeviceCount");
    return n;
  }

  status set_device(int device) noexcept override {
    if (device < 0) return invalid("set_device: device " + std::to_string(device) + " is negative");
    if (auto s = enter("cudaSetDevice"); !s) return s;
    return rt_.check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }

  result<int> current_device() noexcept override {
    if (auto s = enter("cudaGetDevice"); !s) return s;
    int d = -1;
    if (cudaError_t e = cudaGetDevice(&d); e != cudaSuccess) return rt_.fail(e, "cudaGetDevice");
    return d;
  }

  result<memory_info> memory(int device) noexcept override {
    if (device < 0) return invalid("memory: device " + std::to_string(device) + " is negative");
    if (auto s = enter("cudaMemGetInfo"); !s) return s;
    // cudaMemGetInfo answers for the calling thread's current device; switch to `device` for
    // the query and back, so the caller's current device is unchanged.
    int previous = -1;
    if (cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) return rt_.fail(e, "cudaGetDevice");
    if (previous != device) {
      if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
        return rt_.fail(e, "cudaSetDevice(" + std::to_string(device) + ")");
      }
    }
    memory_info info;
    cudaError_t e = cudaMemGetInfo(&info.bytes_free, &info.bytes_total);
    if (previous != device) {
      cudaError_t back = cudaSetDevice(previous);
      if (e == cudaSuccess && back != cudaSuccess) {
        return rt_.fail(back, "cudaSetDevice(" + std::to_string(previous) + ") restoring the current device");
      }
    }
    if (e != cudaSuccess) return rt_.fail(e, "cudaMemGetInfo on device " + std::to_string(device));
    return info;
  }

  result<int> utilization(int device) noexcept override {
    if (device < 0) return invalid("utilization: device " + std::to_string(device) + " is negative");
    if (auto s = enter("utilization"); !s) return s;
    // NVML numbers devices its own way (all GPUs, PCI order); CUDA's ordinals follow
    // CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER. The PCI bus id is the one name both share.
    char bus_id[32] = {};
    if (cudaError_t e = cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device); e != cudaSuccess) {
      return rt_.fail(e, "cudaDeviceGetPCIBusId(" + std::to_string(device) + ")");
    }
    std::call_once(nvml_once_, [this] { nvml_ = load_nvml_api(); });
    if (!nvml_) return nvml_.error();
    nvml_api::device_handle handle = nullptr;
    if (int rc = nvml_->device_by_pci_bus_id(bus_id, &handle); rc != 0) {
      return nvml_->error(rc, std::string("nvmlDeviceGetHandleByPciBusId_v2(") + bus_id + ")");
    }
    nvml_utilization rates;
    if (int rc = nvml_->utilization_rates(handle, &rates); rc != 0) {
      return nvml_->error(rc, std::string("nvmlDeviceGetUtilizationRates(") + bus_id + ")");
    }
    return static_cast<int>(rates.gpu);
  }

  result<void*> allocate(std::size_t bytes) noexcept override {
    if (bytes == 0) return invalid("allocate: bytes must be greater than 0");
    if (auto s = enter("cudaMalloc"); !s) return s;
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      return rt_.fail(e, "cudaMalloc of " + std::to_string(bytes) + " bytes");
    }
    return p;
  }

  status deallocate(void* ptr) noexcept override {
    // Freeing nothing makes no device call (as free() and cudaFree define it), so it neither
    // initialises the runtime nor counts after teardown.
    if (ptr == nullptr) return status::ok();
    if (auto s = enter("cudaFree"); !s) return s;
    return rt_.check(cudaFree(ptr), "cudaFree");
  }

  result<void*> allocate_async(std::size_t bytes, stream s) noexcept override {
    if (bytes == 0) return invalid("allocate_async: bytes must be greater than 0");
    if (auto st = enter("cudaMallocAsync"); !st) return st;
    void* p = nullptr;
    if (cudaError_t e = cudaMallocAsync(&p, bytes, native(s)); e != cudaSuccess) {
      return rt_.fail(e, "cudaMallocAsync of " + std::to_string(bytes) + " bytes");
    }
    return p;
  }

  status deallocate_async(void* ptr, stream s) noexcept override {
    if (ptr == nullptr) return status::ok();
    if (auto st = enter("cudaFreeAsync"); !st) return st;
    return rt_.check(cudaFreeAsync(ptr, native(s)), "cudaFreeAsync");
  }

  status copy_async(void* dst, const void* src, std::size_t bytes, stream s) noexcept override {
    if (bytes == 0) return status::ok();
    if (dst == nullptr || src == nullptr) return invalid("copy_async: null pointer with bytes > 0");
    if (auto st = enter("cudaMemcpyAsync"); !st) return st;
    return rt_.check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(s)),
                     "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
  }

  status fill_async(void* dst, int value, std::size_t bytes, stream s) noexcept override {
    if (bytes == 0) return status::ok();
    if (dst == nullptr) return invalid("fill_async: null pointer with bytes > 0");
    if (auto st = enter("cudaMemsetAsync"); !st) return st;
    return rt_.check(cudaMemsetAsync(dst, value, bytes, native(s)),
                     "cudaMemsetAsync of " + std::to_string(bytes) + " bytes");
  }

  result<stream> create_stream() noexcept override {
    if (auto st = enter("cudaStreamCreateWithFlags"); !st) return st;
    // Non-blocking: no implicit ordering against the legacy default stream. The sim's streams
    // are independent queues too, so an ordering bug shows on both backends instead of being
    // hidden by implicit synchronisation on one of them.
    cudaStream_t s = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
      return rt_.fail(e, "cudaStreamCreateWithFlags");
    }
    return stream{s};
  }

  status destroy_stream(stream s) noexcept override {
    if (s.native == nullptr) return invalid("destroy_stream: the default stream cannot be destroyed");
    if (auto st = enter("cudaStreamDestroy"); !st) return st;
    return rt_.check(cudaStreamDestroy(native(s)), "cudaStreamDestroy");
  }

  status synchronize_stream(stream s) noexcept override {
    if (auto st = enter("cudaStreamSynchronize"); !st) return st;
    return rt_.check(cudaStreamSynchronize(native(s)), "cudaStreamSynchronize");
  }

  status synchronize_device() noexcept override {
    if (auto st = enter("cudaDeviceSynchronize"); !st) return st;
    return rt_.check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  result<event> create_event() noexcept override {
    if (auto st = enter("cudaEventCreateWithFlags"); !st) return st;
    // Events here only order and signal; timing would cost a timestamp per record.
    cudaEvent_t e = nullptr;
    if (cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
      return rt_.fail(err, "cudaEventCreateWithFlags");
    }
    return event{e};
  }

  status destroy_event(event e) noexcept override {
    if (!e) return invalid("destroy_event: null event");
    if (auto st = enter("cudaEventDestroy"); !st) return st;
    return rt_.check(cudaEventDestroy(native(e)), "cudaEventDestroy");
  }

  status record_event(event e, stream s) noexcept override {
    if (!e) return invalid("record_event: null event");
    if (auto st = enter("cudaEventRecord"); !st) return st;
    return rt_.check(cudaEventRecord(native(e), native(s)), "cudaEventRecord");
  }

  status query_event(event e) noexcept override {
    if (!e) return invalid("query_event: null event");
    if (auto st = enter("cudaEventQuery"); !st) return st;
    return rt_.check(cudaEventQuery(native(e)), "cudaEventQuery");
  }

  status synchronize_event(event e) noexcept override {
    if (!e) return invalid("synchronize_event: null event");
    if (auto st = enter("cudaEventSynchronize"); !st) return st;
    return rt_.check(cudaEventSynchronize(native(e)), "cudaEventSynchronize");
  }

  status stream_wait_event(stream s, event e) noexcept override {
    if (!e) return invalid("stream_wait_event: null event");
    if (auto st = enter("cudaStreamWaitEvent"); !st) return st;
    return rt_.check(cudaStreamWaitEvent(native(s), native(e), cudaEventWaitDefault), "cudaStreamWaitEvent");
  }

  status reset_context(int device) noexcept override {
    if (device < 0 || device >= max_cuda_devices) {
      return invalid("reset_context: device " + std::to_string(device) + " is out of range");
    }
    if (auto st = enter("cuDevicePrimaryCtxReset"); !st) return st;
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) return rt_.fail(e, "cudaGetDeviceCount");
    if (device >= n) {
      return invalid("reset_context: device " + std::to_string(device) + " of " + std::to_string(n));
    }
    if (!driver_) return driver_.error();
    const std::string what = "cuDevicePrimaryCtxReset(" + std::to_string(device) + ")";
    device_slot& slot = slots_[device];
    CUdevice dev = 0;
    if (CUresult r = cu_device(slot, device, dev); r != CUDA_SUCCESS) return driver_failure(r, what);
    if (CUresult r = driver_->primary_ctx_reset(dev); r != CUDA_SUCCESS) return driver_failure(r, what);
    // Counted after success only: a failed reset invalidated nothing.
    slot.own_resets.fetch_add(1, std::memory_order_acq_rel);
    return status::ok();
  }

  // The epoch is (own resets << 44) | identity, where identity comes from the driver on every
  // call, so a reset made by anyone (this backend, cudaDeviceReset, a direct
  // cuDevicePrimaryCtxReset) changes it:
  //   - context active: identity = 2 * cuCtxGetId(primary context). Context ids are unique for
  //     the life of the process, whereas the CUcontext pointer is not: measured on driver 580,
  //     the primary context comes back at the same address after a reset.
  //   - context inactive: identity = 2 * (largest id this backend has seen) + 1, or 0 when it
  //     has seen none: "no context yet" is 0, as device.h defines, and "no context since
  //     context N" differs from "context N".
  //   - own resets: a reset while no context exists destroys nothing new but must still change
  //     the epoch, so the backend's own count is part of it.
  // The common query is one driver call: cuCtxGetId on the primary context's handle, kept from
  // the first time the query below found the context active. The handle names the device's
  // primary context object, which the driver keeps for the life of the process and reuses
  // across resets (measured on driver 580: same address after a reset), so keeping it never
  // dangles. cuCtxGetId on it answers the live context's id (a recreated context's is new), or
  // an error while a reset has left the context destroyed (measured:
  // CUDA_ERROR_CONTEXT_IS_DESTROYED, reading nothing and creating nothing); both facts are
  // pinned by the GPU tests. So a reset that happens-before a query changes its answer either
  // way. Any error goes on to the full query, which tells "inactive" from "recreated since":
  // cuDevicePrimaryCtxGetState (only reads) and, only when the context is active, a retain to
  // name it for cuCtxGetId and a release, leaving the reference count as it was. The one window
  // is a concurrent reset or final release between those two calls, in which the retain
  // recreates a context and the release destroys it again. cuDeviceGet's answer is kept too
  // (ordinals do not change within a process). Measured on an H100 (driver 580): the
  // five-call query cost ~140 ns, ~650 ns a call with four threads at it; cuCtxGetId alone
  // ~17 ns, and four threads do not slow it (records/gpu/epoch).
  // Once teardown has been seen (cudaErrorCudartUnloading anywhere, or the driver answering
  // CUDA_ERROR_DEINITIALIZED, measured after cudart's teardown; the first query after it, with
  // a kept handle, answers the last epoch too, pinned by a death test) the last epoch is
  // returned and nothing is called or counted.
  [[nodiscard]] std::uint64_t context_epoch(int device) const noexcept override {
    if (device < 0 || device >= max_cuda_devices) return 0;
    device_slot& slot = slots_[device];
    if (rt_.torn_down()) return slot.last_epoch.load(std::memory_order_acquire);
    initialise();
    if (!driver_ || rt_.torn_down()) return slot.last_epoch.load(std::memory_order_acquire);
    const driver_api& drv = *driver_;

    unsigned long long id = 0;
    if (CUcontext cached = slot.primary.load(std::memory_order_acquire); cached != nullptr) {
      const CUresult r = drv.ctx_get_id(cached, &id);
      if (r == CUDA_SUCCESS) return publish_epoch(slot, 2 * active_context(slot, id));
      if (r == CUDA_ERROR_DEINITIALIZED) return epoch_unreadable(r, slot);
      // Destroyed and not recreated (or recreated since the call): the state says which.
    }

    CUdevice dev = 0;
    unsigned int flags = 0;
    int active = 0;
    CUresult r = cu_device(slot, device, dev);
    if (r == CUDA_SUCCESS) r = drv.primary_ctx_get_state(dev, &flags, &active);
    if (r != CUDA_SUCCESS) return epoch_unreadable(r, slot);

    std::uint64_t identity = 0;
    if (active != 0) {
      CUcontext ctx = nullptr;
      if ((r = drv.primary_ctx_retain(&ctx, dev)) != CUDA_SUCCESS) return epoch_unreadable(r, slot);
      r = drv.ctx_get_id(ctx, &id);
      drv.primary_ctx_release(dev);
      if (r != CUDA_SUCCESS) return epoch_unreadable(r, slot);
      slot.primary.store(ctx, std::memory_order_release);
      identity = 2 * active_context(slot, id);
    } else if (std::uint64_t seen = slot.seen_context_id.load(std::memory_order_relaxed); seen != 0) {
      identity = 2 * seen + 1;
    }
    return publish_epoch(slot, identity);
  }

  [[nodiscard]] runtime_state state() const noexcept override { return rt_.state(); }
  [[nodiscard]] std::uint64_t calls_after_teardown() const noexcept override { return rt_.calls_after_teardown(); }

 private:
  // First call of any member: find the driver entry points. That lookup is a runtime call and
  // initialises the driver, which is when CUDA registers its exit teardown with atexit
  // (measured: the registration happens at the process's first cuInit, whoever makes it), so a
  // process whose first CUDA use is this backend gets the lazy-init order device.h promises.
  // The flag spares every later call std::call_once, which is not free (libstdc++ stores the
  // callable in thread-locals before it asks pthread_once), on context_epoch()'s hot path.
  void initialise() const noexcept {
    if (initialised_.load(std::memory_order_acquire)) return;
    std::call_once(init_once_, [this] {
      cudaError_t err = cudaSuccess;
      driver_ = load_driver_api(err);
      if (err == cudaErrorCudartUnloading) {
        rt_.mark_torn_down();
      } else {
        rt_.mark_running();
      }
      initialised_.store(true, std::memory_order_release);
    });
  }

  // Every member that reaches the runtime passes here. After teardown has been seen the call
  // is answered (and counted) without entering cudart: it can only say unloading, and not
  // entering it keeps a late call from touching a runtime that is being unmapped.
  status enter(std::string_view what) noexcept {
    initialise();
    if (rt_.torn_down()) return rt_.unloading(what);
    return status::ok();
  }

  status driver_failure(CUresult r, const std::string& what) {
    if (r == CUDA_ERROR_DEINITIALIZED) {
      rt_.mark_torn_down();
      return rt_.unloading(what);
    }
    return driver_->error(r, what);
  }

  // What context_epoch() keeps per device, one cache line each so that queries for different
  // devices from different threads do not contend.
  struct alignas(64) device_slot {
    std::atomic<bool> cu_device_known{false};
    std::atomic<CUdevice> cu_device{0};
    std::atomic<CUcontext> primary{nullptr};  // the primary context's handle, once seen active
    std::atomic<std::uint64_t> own_resets{0};
    std::atomic<std::uint64_t> seen_context_id{0};  // the largest context id seen
    std::atomic<std::uint64_t> last_epoch{0};       // answered after teardown
  };

  // cuDeviceGet once per ordinal: the answer never changes within a process.
  CUresult cu_device(device_slot& slot, int device, CUdevice& out) const noexcept {
    if (slot.cu_device_known.load(std::memory_order_acquire)) {
      out = slot.cu_device.load(std::memory_order_relaxed);
      return CUDA_SUCCESS;
    }
    const CUresult r = driver_->device_get(&out, device);
    if (r == CUDA_SUCCESS) {
      slot.cu_device.store(out, std::memory_order_relaxed);
      slot.cu_device_known.store(true, std::memory_order_release);
    }
    return r;
  }

  static std::uint64_t active_context(device_slot& slot, unsigned long long id) noexcept {
    store_max(slot.seen_context_id, id);
    return static_cast<std::uint64_t>(id);
  }

  // Written only when it changes: the common query then writes no shared cache line.
  static std::uint64_t publish_epoch(device_slot& slot, std::uint64_t identity) noexcept {
    const std::uint64_t epoch =
        (slot.own_resets.load(std::memory_order_acquire) << epoch_identity_bits) | (identity & epoch_identity_mask);
    if (slot.last_epoch.load(std::memory_order_relaxed) != epoch) {
      slot.last_epoch.store(epoch, std::memory_order_release);
    }
    return epoch;
  }

  std::uint64_t epoch_unreadable(CUresult r, const device_slot& slot) const noexcept {
    if (r == CUDA_ERROR_DEINITIALIZED) rt_.mark_torn_down();
    return slot.last_epoch.load(std::memory_order_acquire);
  }

  // context_epoch() is const to callers but loads the driver table on first use and records
  // what it observes; hence the mutable members.
  mutable std::once_flag init_once_;
  mutable std::atomic<bool> initialised_{false};
  mutable runtime_tracker rt_;
  mutable result<driver_api> driver_{status(errc::unavailable, "the CUDA driver has not been loaded")};
  std::once_flag nvml_once_;
  result<nvml_api> nvml_{status(errc::unavailable, "NVML has not been loaded")};
  mutable device_slot slots_[max_cuda_devices];
};

}  // namespace detail

result<backend*> cuda() noexcept {
  // Never destroyed: static destructors and atexit handlers that run after cudart's teardown
  // must still reach the backend, and it answers them with runtime_unloading.
  static detail::cuda_backend* const instance = new (std::nothrow) detail::cuda_backend();
  if (instance == nullptr) return status(errc::out_of_memory, "cuda(): cannot allocate the backend");
  return static_cast<backend*>(instance);
}

}  // namespace faultline::core::device
