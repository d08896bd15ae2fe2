// Private: the allocator's exit guard around device calls, and leak reporting at exit.
//
// Every device call the allocator makes sits inside a `device_call_scope`:
//
//   detail::device_call_scope scope;
//   if (!scope) return scope.refusal("pool_resource: record_event");
//   backend.record_event(e, s);
//
// The scope increments a process-wide in-flight counter and then checks the refusing flag; the
// exit hook sets the flag and then waits for the counter to reach zero. Both sides use
// sequentially consistent operations, so either the caller sees the flag (and is refused) or the
// hook sees the caller (and waits for it): no call can slip past the hook unnoticed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace faultline::core::alloc::detail {

extern std::atomic<int> in_flight_device_calls;
extern std::atomic<bool> refusing_device_calls;

/// RAII: one allocator device call in flight, or a refusal when exit has begun.
class device_call_scope {
 public:
  device_call_scope() noexcept {
    in_flight_device_calls.fetch_add(1, std::memory_order_seq_cst);
    if (refusing_device_calls.load(std::memory_order_seq_cst)) {
      in_flight_device_calls.fetch_sub(1, std::memory_order_seq_cst);
      admitted_ = false;
      note_refused();
    }
  }
  ~device_call_scope() {
    if (admitted_) in_flight_device_calls.fetch_sub(1, std::memory_order_seq_cst);
  }
  device_call_scope(const device_call_scope&) = delete;
  device_call_scope& operator=(const device_call_scope&) = delete;

  explicit operator bool() const noexcept { return admitted_; }
  /// The status a refused call returns; `what` names the call ("device_resource: allocate").
  [[nodiscard]] static status refusal(std::string_view what);

 private:
  static void note_refused() noexcept;
  bool admitted_ = true;
};

/// True when a destructor must make no device call: exit has begun and the exit guard has not
/// been disabled by bug/alloc/no-exit-guard.
[[nodiscard]] bool destructors_skip_device_calls() noexcept;

/// Set by the per-device map when bug/alloc/no-exit-guard fires: destructors then ignore
/// process_is_exiting(), as they did before the fix.
void disable_exit_guard_for_bug() noexcept;

/// Counts `bytes` as leaked at exit and, when non-zero, writes one "faultline:" line naming
/// `what`, the bytes and the upstream blocks they span to stderr. Allocates nothing.
void note_leaked_at_exit(const char* what, std::uint64_t bytes, std::uint64_t blocks) noexcept;

}  // namespace faultline::core::alloc::detail
