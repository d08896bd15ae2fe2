#include "core/alloc/device_resource.h"

#include "core/alloc/detail/exit_state.h"
#include "core/points/point.h"

namespace faultline::core::alloc {

namespace {

// Resolved lazily so that constructing a resource (possibly as a static) never initialises the
// device runtime: the order in which the runtime registers its teardown matters at exit.
result<device::backend*> resolve(std::atomic<device::backend*>& slot) noexcept {
  device::backend* b = slot.load(std::memory_order_acquire);
  if (b != nullptr) return b;
  auto chosen = device::select_backend();
  if (!chosen) return chosen.error();
  slot.store(*chosen, std::memory_order_release);
  return *chosen;
}

}  // namespace

result<void*> device_resource::do_allocate(std::size_t bytes, device::stream /*s*/) noexcept {
  auto b = resolve(backend_);
  if (!b) return b.error();
  detail::device_call_scope scope;
  if (!scope) return detail::device_call_scope::refusal("device_resource: allocate");
  // Inside the call, admitted by the exit guard: a delay here is a slow device call (a loaded
  // GPU), the case the exit drain must outwait.
  if (int err = FAULTLINE_POINT("alloc/device/call")) return status::injected_fault("alloc/device/call", err);
  return (*b)->allocate(bytes);
}

status device_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, device::stream /*s*/) noexcept {
  auto b = resolve(backend_);
  if (!b) return b.error();
  detail::device_call_scope scope;
  if (!scope) return detail::device_call_scope::refusal("device_resource: deallocate");
  // Inside the call, admitted by the exit guard: a delay here is a slow device call (a loaded
  // GPU), the case the exit drain must outwait.
  if (int err = FAULTLINE_POINT("alloc/device/call")) return status::injected_fault("alloc/device/call", err);
  return (*b)->deallocate(ptr);
}

result<void*> async_resource::do_allocate(std::size_t bytes, device::stream s) noexcept {
  auto b = resolve(backend_);
  if (!b) return b.error();
  detail::device_call_scope scope;
  if (!scope) return detail::device_call_scope::refusal("async_resource: allocate");
  return (*b)->allocate_async(bytes, s);
}

status async_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, device::stream s) noexcept {
  auto b = resolve(backend_);
  if (!b) return b.error();
  detail::device_call_scope scope;
  if (!scope) return detail::device_call_scope::refusal("async_resource: deallocate");
  return (*b)->deallocate_async(ptr, s);
}

}  // namespace faultline::core::alloc
