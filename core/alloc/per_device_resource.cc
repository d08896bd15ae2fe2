#include "core/alloc/per_device_resource.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "core/alloc/detail/exit_state.h"
#include "core/alloc/device_resource.h"
#include "core/alloc/pool_resource.h"
#include "core/alloc/process_exit.h"
#include "core/device/device.h"
#include "core/points/point.h"

namespace faultline::core::alloc {

namespace {

class resource_map {
 public:
  resource_map() noexcept {
    exit_guard_bug_ = FAULTLINE_BUG("bug/alloc/no-exit-guard");
    if (exit_guard_bug_) {
      // Pre-fix: the runtime initialises later, at the first allocation, so its teardown is
      // registered after this map's destructor and runs before it; and destructors ignore exit.
      detail::disable_exit_guard_for_bug();
      return;
    }
    // The runtime must register its teardown before this map is fully constructed (and so
    // before the map's destructor is registered): any call initialises it. A failure here is
    // reported again by the first get, so it is not kept.
    if (auto b = device::select_backend()) {
      detail::device_call_scope scope;
      if (scope) (void)(*b)->device_count();
    }
  }

  ~resource_map() {
    if (detail::destructors_skip_device_calls()) {
      // Threads may still hold (and call) the default pools: keep them alive, make no device
      // call, report what stays unreturned.
      std::uint64_t bytes = 0;
      std::uint64_t blocks = 0;
      for (auto& d : defaults_) {
        if (d.pool) {
          bytes += d.pool->upstream_bytes();
          blocks += d.pool->upstream_block_count();
        }
        (void)d.pool.release();
        (void)d.upstream.release();
      }
      detail::note_leaked_at_exit("per-device resource map (default pools kept alive)", bytes, blocks);
      return;
    }
    for (auto& slot : current_) slot.store(nullptr, std::memory_order_release);
    for (auto& d : defaults_) {
      d.pool.reset();
      d.upstream.reset();
    }
  }

  resource_map(const resource_map&) = delete;
  resource_map& operator=(const resource_map&) = delete;

  [[nodiscard]] bool exit_guard_bug() const noexcept { return exit_guard_bug_; }

  result<device_memory_resource*> get(int device) noexcept {
    if (auto st = check_range(device); !st) return st;
    if (auto* r = current_[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) return r;
    std::lock_guard lock(mu_);
    if (auto st = check_present_locked(device); !st) return st;
    auto& slot = current_[static_cast<std::size_t>(device)];
    if (auto* r = slot.load(std::memory_order_acquire)) return r;
    auto made = default_locked(device);
    if (!made) return made;
    slot.store(*made, std::memory_order_release);
    return made;
  }

  result<device_memory_resource*> set(int device, device_memory_resource* resource) noexcept {
    if (auto st = check_range(device); !st) return st;
    if (process_is_exiting()) {
      return status(errc::refused, "set_per_device_resource: process exit has begun; the map no longer changes");
    }
    std::lock_guard lock(mu_);
    if (auto st = check_present_locked(device); !st) return st;
    auto& slot = current_[static_cast<std::size_t>(device)];
    device_memory_resource* previous = slot.load(std::memory_order_acquire);
    if (previous == nullptr || resource == nullptr) {
      auto made = default_locked(device);
      if (!made) return made;
      if (previous == nullptr) previous = *made;
      if (resource == nullptr) resource = *made;
    }
    slot.store(resource, std::memory_order_release);
    return previous;
  }

  result<int> current_device() noexcept {
    {
      std::lock_guard lock(mu_);
      if (auto st = resolve_backend_locked(); !st) return st;
    }
    detail::device_call_scope scope;
    if (!scope) return detail::device_call_scope::refusal("get_current_device_resource: current_device");
    return backend_->current_device();
  }

 private:
  struct owned_default {
    std::unique_ptr<device_resource> upstream;
    std::unique_ptr<pool_resource> pool;
  };

  static status check_range(int device) {
    if (device < 0 || device >= max_per_device_resources) {
      return status(errc::invalid_argument, "per-device resource: device " + std::to_string(device) +
                                                " is outside [0, " + std::to_string(max_per_device_resources) +
                                                ")");
    }
    return status::ok();
  }

  status resolve_backend_locked() {
    if (backend_ != nullptr) return status::ok();
    auto b = device::select_backend();
    if (!b) return b.error();
    backend_ = *b;
    return status::ok();
  }

  status check_present_locked(int device) {
    if (device_count_ < 0) {
      if (auto st = resolve_backend_locked(); !st) return st;
      detail::device_call_scope scope;
      if (!scope) return detail::device_call_scope::refusal("per-device resource: device_count");
      auto n = backend_->device_count();
      if (!n) return n.error();
      device_count_ = *n;
    }
    if (device >= device_count_) {
      return status(errc::invalid_argument, "per-device resource: device " + std::to_string(device) +
                                                " is not present (" + std::to_string(device_count_) +
                                                " device(s))");
    }
    return status::ok();
  }

  result<device_memory_resource*> default_locked(int device) {
    auto& d = defaults_[static_cast<std::size_t>(device)];
    if (d.pool) return d.pool.get();
    if (process_is_exiting() && !exit_guard_bug_) {
      return status(errc::refused, "get_per_device_resource: process exit has begun; no default pool for device " +
                                       std::to_string(device) + " is created now");
    }
    d.upstream = std::make_unique<device_resource>(*backend_);
    pool_options options;
    options.device = device;
    options.backend = backend_;
    d.pool = std::make_unique<pool_resource>(*d.upstream, options);
    return d.pool.get();
  }

  bool exit_guard_bug_ = false;
  std::mutex mu_;
  device::backend* backend_ = nullptr;
  int device_count_ = -1;
  std::array<std::atomic<device_memory_resource*>, max_per_device_resources> current_{};
  std::array<owned_default, max_per_device_resources> defaults_;
};

resource_map& the_map() noexcept {
  static resource_map map;
  // A second static, initialised only after `map` is constructed: its atexit registration
  // follows the map's destructor registration, so at exit the hook runs first.
  static const bool hooked = [] {
    if (map.exit_guard_bug()) return false;  // pre-fix: no exit hook at all
    if (auto st = install_exit_hook(); !st) {
      std::fprintf(stderr, "faultline: per-device resource map: %s\n", st.to_string().c_str());
      return false;
    }
    return true;
  }();
  (void)hooked;
  return map;
}

}  // namespace

result<device_memory_resource*> get_per_device_resource(int device) noexcept { return the_map().get(device); }

result<device_memory_resource*> get_current_device_resource() noexcept {
  resource_map& map = the_map();
  auto device = map.current_device();
  if (!device) return device.error();
  return map.get(*device);
}

result<device_memory_resource*> set_per_device_resource(int device, device_memory_resource* resource) noexcept {
  return the_map().set(device, resource);
}

}  // namespace faultline::core::alloc
