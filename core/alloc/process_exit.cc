#include "core/alloc/process_exit.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/alloc/detail/exit_state.h"
#include "core/points/point.h"

namespace faultline::core::alloc {

namespace detail {
std::atomic<int> in_flight_device_calls{0};
std::atomic<bool> refusing_device_calls{false};
}  // namespace detail

namespace {

// When the drain says that it is still waiting (it goes on waiting). On an H100 with six
// processes allocating at once single cudaMalloc/cudaFree calls take hundreds of milliseconds; at
// sixteen (--jobs = cores) a 2 s bound left calls in flight in 28 of 30 runs, and one of them
// crashed in libcuda during the teardown that the bound let start.
constexpr std::uint64_t drain_report_ms = 2000;

std::atomic<bool> exiting{false};
std::atomic<bool> hook_ran{false};
std::atomic<bool> hook_installed{false};
std::atomic<bool> no_drain_bug{false};
std::atomic<bool> bounded_drain_bug{false};
// The drain's bound before the fix (bug/alloc/bounded-drain re-creates it).
constexpr std::uint64_t old_drain_bound_ms = 2000;
std::atomic<bool> exit_guard_disabled{false};
std::atomic<std::uint64_t> leaked_bytes{0};
std::atomic<std::uint64_t> refused_calls{0};

void exit_hook() noexcept {
  if (hook_ran.exchange(true)) return;
  exiting.store(true, std::memory_order_seq_cst);
  if (no_drain_bug.load(std::memory_order_acquire)) {
    // Pre-fix behaviour: a flag that only guards destructors; calls in flight race the
    // teardown and new ones still reach the device.
    return;
  }
  detail::refusing_device_calls.store(true, std::memory_order_seq_cst);

  // No deadline unless one is asked for: a call still inside the device when the teardown starts
  // is exactly what crashes, and how long the calls take depends on the load, not on the code.
  // A call that never returns makes the process hang at exit, which an outer timeout reports with
  // the stuck thread's stack: a hang names the culprit, a crash in the teardown does not.
  std::uint64_t bound_ms = exit_drain_timeout_ms();
  if (bound_ms == 0 && bounded_drain_bug.load(std::memory_order_acquire)) bound_ms = old_drain_bound_ms;
  const auto started = std::chrono::steady_clock::now();
  bool reported = false;
  // Polling keeps the hook free of locks that a thread stuck inside the device might hold.
  while (detail::in_flight_device_calls.load(std::memory_order_seq_cst) > 0) {
    const auto waited_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
    if (bound_ms != 0 && waited_ms >= bound_ms) {
      std::fprintf(stderr,
                   "faultline: exit: %d thread(s) still inside allocator device calls after %llu ms "
                   "(FAULTLINE_EXIT_DRAIN_MS); exit goes on without them\n",
                   detail::in_flight_device_calls.load(std::memory_order_seq_cst),
                   static_cast<unsigned long long>(bound_ms));
      return;
    }
    if (!reported && waited_ms >= drain_report_ms) {
      reported = true;
      std::fprintf(stderr,
                   "faultline: exit: still waiting for %d thread(s) inside allocator device calls after %llu ms\n",
                   detail::in_flight_device_calls.load(std::memory_order_seq_cst),
                   static_cast<unsigned long long>(waited_ms));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

bool process_is_exiting() noexcept { return exiting.load(std::memory_order_acquire); }

status install_exit_hook() noexcept {
  if (!hook_installed.exchange(true)) {
    // Read at registration, not at exit: by then the fault engine's own statics may be gone.
    no_drain_bug.store(FAULTLINE_BUG("bug/alloc/no-drain"), std::memory_order_release);
    bounded_drain_bug.store(FAULTLINE_BUG("bug/alloc/bounded-drain"), std::memory_order_release);
  }
  if (std::atexit([] { exit_hook(); }) != 0) {
    return status(errc::internal, "install_exit_hook: atexit refused to register faultline's exit hook");
  }
  return status::ok();
}

std::uint64_t bytes_leaked_at_exit() noexcept { return leaked_bytes.load(std::memory_order_acquire); }

int device_calls_in_flight() noexcept {
  return detail::in_flight_device_calls.load(std::memory_order_seq_cst);
}

std::uint64_t calls_refused_at_exit() noexcept { return refused_calls.load(std::memory_order_acquire); }

std::uint64_t exit_drain_timeout_ms() noexcept {
  const char* text = std::getenv("FAULTLINE_EXIT_DRAIN_MS");
  if (text == nullptr || *text == '\0') return 0;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || *text == '-') {
    std::fprintf(stderr,
                 "faultline: FAULTLINE_EXIT_DRAIN_MS='%s' is not a number of milliseconds; exit waits for "
                 "every allocator device call in flight\n",
                 text);
    return 0;
  }
  return value;
}

namespace detail {

status device_call_scope::refusal(std::string_view what) {
  return status(errc::refused, std::string(what) +
                                   ": refused, process exit has begun (faultline's exit hook ran); no "
                                   "device call is made into a runtime being torn down");
}

void device_call_scope::note_refused() noexcept { refused_calls.fetch_add(1, std::memory_order_relaxed); }

bool destructors_skip_device_calls() noexcept {
  return process_is_exiting() && !exit_guard_disabled.load(std::memory_order_acquire);
}

void disable_exit_guard_for_bug() noexcept { exit_guard_disabled.store(true, std::memory_order_release); }

void note_leaked_at_exit(const char* what, std::uint64_t bytes, std::uint64_t blocks) noexcept {
  if (bytes == 0) return;
  leaked_bytes.fetch_add(bytes, std::memory_order_acq_rel);
  std::fprintf(stderr,
               "faultline: %s: process is exiting; leaked %llu bytes in %llu upstream block(s) "
               "instead of calling into the device\n",
               what, static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(blocks));
}

}  // namespace detail

}  // namespace faultline::core::alloc
