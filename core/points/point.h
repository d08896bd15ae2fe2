// Fault points: the one header code under test includes (like libfiu's fiu.h).
//
//   if (int err = FAULTLINE_POINT("alloc/upstream/allocate")) return status::injected_fault(..., err);
//   if (FAULTLINE_BUG("bug/alloc/no-exit-guard")) { /* the historical, pre-fix behaviour */ }
//
// A point is named hierarchically ("accounting/lock/held"); specs enable points by name or by a
// trailing wildcard ("sim/*"). With FAULTLINE_FAULTS=OFF both macros compile to constants. With
// faults compiled in and nothing enabled, a point costs one relaxed load and a predictable branch:
// the engine (libfiu plus faultline's actions, in faultline::faults) is consulted only while
// `armed` is set, which the engine does when it enables a point or remote control.
//
// FAULTLINE_POINT evaluates to 0 when the point did not fire or fired an action that lets the
// caller go on (delay, pause, print, teardown, off); otherwise to the failure code of a
// `fail(code)` action (an errno value, or 1 when none was given).
// FAULTLINE_BUG evaluates to true when the bug point fired with any action.
//
// This floor depends on nothing; it holds the armed flag and the hook the engine installs.
// Thread safety: points may be hit from any thread, including while the engine is reconfigured.
#pragma once

#include <atomic>

namespace faultline::points {

/// What a hit produced: whether a term fired, and the failure code (0 when the caller goes on).
struct outcome {
  bool fired = false;
  int code = 0;
};

/// The engine's entry point: evaluates `name`'s spec and runs its action.
using hook_fn = outcome (*)(const char* name) noexcept;

namespace detail {
extern std::atomic<bool> armed;
outcome hit(const char* name) noexcept;
}  // namespace detail

/// Installs the engine's hook (nullptr uninstalls) and arms or disarms every point.
/// Called by faultline::faults; code under test never calls it.
void install_hook(hook_fn hook) noexcept;
void set_armed(bool armed) noexcept;
[[nodiscard]] bool is_armed() noexcept;

}  // namespace faultline::points

#if defined(FAULTLINE_FAULTS_ENABLED) && FAULTLINE_FAULTS_ENABLED
#define FAULTLINE_POINT(name)                                                               \
  (__builtin_expect(::faultline::points::detail::armed.load(std::memory_order_relaxed), 0) \
       ? ::faultline::points::detail::hit(name).code                                        \
       : 0)
#define FAULTLINE_BUG(name)                                                                 \
  (__builtin_expect(::faultline::points::detail::armed.load(std::memory_order_relaxed), 0) \
       ? ::faultline::points::detail::hit(name).fired                                       \
       : false)
#else
#define FAULTLINE_POINT(name) 0
#define FAULTLINE_BUG(name) false
#endif
