// The process's memory resource for each device: what code that does not pass a resource
// around allocates from.
//
// The map is a function-local static. Its construction first initialises the device runtime
// (one cheap call), so the runtime's own atexit teardown is registered before the map exists;
// faultline's exit hook is registered right after the map is constructed. At exit the hook
// therefore runs first (process_is_exiting() becomes true, new device calls are refused, calls
// in flight are drained), then the map's destructor (which makes no device call: it leaks the
// default pools and reports the bytes), and the runtime's teardown last.
//
// Unless set otherwise, a device's resource is a pool_resource over a device_resource, created on
// first use and owned by the map.
//
//   auto r = alloc::get_per_device_resource(0);
//   if (!r) return r.error();
//   auto p = (*r)->allocate(1 << 20, stream);
//
//   alloc::statistics_adaptor stats(**alloc::get_per_device_resource(0));
//   alloc::set_per_device_resource(0, &stats);   // later gets return &stats
//   ...
//   alloc::set_per_device_resource(0, nullptr);  // back to the default pool
//
// Bug point "bug/alloc/no-exit-guard" (read when the map is constructed): the map is built
// without initialising the runtime first and the exit hook is not registered, so at exit the
// runtime is torn down before the map's destructor, which then frees through the device
// (RMM #2367's class: calls after teardown, counted by the backend).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include "core/alloc/device_memory_resource.h"
#include "core/status.h"

namespace faultline::core::alloc {

/// Devices the map can hold (device ids 0 .. max_per_device_resources - 1).
inline constexpr int max_per_device_resources = 64;

/// The resource for `device`: the one set last, else the default pool, created now if needed.
/// The pointer stays valid until process exit (the default pool is never destroyed before then)
/// or, for a set resource, for as long as its owner keeps it alive.
/// Errors: invalid_argument for a device outside [0, device count); unavailable when no backend
/// can be selected; refused when the default must be created after exit began.
result<device_memory_resource*> get_per_device_resource(int device) noexcept;

/// The resource for the calling thread's current device (see get_per_device_resource).
result<device_memory_resource*> get_current_device_resource() noexcept;

/// Makes `resource` (not owned; must outlive its use) the resource for `device`; nullptr restores
/// the default pool. Returns the previous resource (the default pool, if that was in place).
/// Errors: invalid_argument for a bad device; refused after exit began.
result<device_memory_resource*> set_per_device_resource(int device, device_memory_resource* resource) noexcept;

}  // namespace faultline::core::alloc
