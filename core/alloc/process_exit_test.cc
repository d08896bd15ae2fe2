// Process-exit and context-reset safety, each case in a child process (a re-exec of this binary,
// gtest's threadsafe death-test style) that ends with std::exit(0) so the real atexit sequence
// runs: faultline's exit hook, the per-device map's destructor, the device runtime's teardown.
// A reporter registered with atexit before the runtime initialises runs after all of them and
// prints what the backend counted (calls after teardown) and what the allocator leaked; each test
// matches that line. Bug points (armed with a test hook) re-create the pre-fix behaviour and must
// produce the failure the fix prevents: calls after teardown, a SIGSEGV from a call racing the
// teardown, a SIGSEGV from an event of a reset context.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "core/alloc/alloc_test_util.h"
#include "core/alloc/device_resource.h"
#include "core/alloc/per_device_resource.h"
#include "core/alloc/pool_resource.h"
#include "core/alloc/process_exit.h"

namespace faultline::core::alloc {
namespace {

using testing::arm_point;
using testing::fired_count;
using testing::mark_this_thread;

constexpr std::size_t mib = 1024 * 1024;

const char* state_name(device::runtime_state s) {
  switch (s) {
    case device::runtime_state::uninitialized: return "uninitialized";
    case device::runtime_state::running: return "running";
    case device::runtime_state::torn_down: return "torn_down";
  }
  return "?";
}

std::atomic<device::backend*> reporter_backend{nullptr};
std::atomic<int> reporter_linger_ms{0};

void report_at_exit() {
  // A thread racing the teardown needs time to hit the unmapped pages before the process ends.
  if (int ms = reporter_linger_ms.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  device::backend* b = reporter_backend.load();
  if (b == nullptr) {
    std::fprintf(stderr, "exit-report: backend=none\n");
    return;
  }
  std::fprintf(stderr,
               "exit-report: backend=%s runtime=%s calls_after_teardown=%llu leaked_at_exit=%llu refused=%llu\n",
               std::string(b->name()).c_str(), state_name(b->state()),
               static_cast<unsigned long long>(b->calls_after_teardown()),
               static_cast<unsigned long long>(bytes_leaked_at_exit()),
               static_cast<unsigned long long>(calls_refused_at_exit()));
}

// Registered before anything initialises the device runtime, so it runs after the runtime's
// teardown. It selects nothing itself (on cuda, selecting initialises the runtime): the test
// names the backend with watch_backend() once the code under test has selected it.
void install_reporter(int linger_ms = 0) {
  reporter_linger_ms = linger_ms;
  std::atexit(report_at_exit);
}

void watch_backend() { reporter_backend = &device::current(); }

// What the reporter prints after a teardown it ran behind: the sim knows it was torn down;
// cuda's backend may only learn it from a call that answered unloading.
constexpr const char* after_teardown = "exit-report: backend=(sim runtime=torn_down|cuda runtime=[a-z_]+) ";

void wait_until(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Holds blocks in the default pool: one live, one freed back into the pool.
void use_default_pool() {
  auto r = get_per_device_resource(0);
  if (!r) {
    std::fprintf(stderr, "get_per_device_resource: %s\n", r.error().to_string().c_str());
    std::exit(3);
  }
  watch_backend();  // selected by now
  auto keep = (*r)->allocate(mib);
  auto freed = (*r)->allocate(4096);
  if (!keep || !freed || !(*r)->deallocate(*freed, 4096)) std::exit(4);
}

// A thread looping on allocator device calls, each one slowed inside the sim's race window
// (between its teardown check and its first touch of context pages) when a test arms that.
void start_allocating_thread(device_resource* raw, std::atomic<int>* iterations) {
  std::thread([raw, iterations] {
    mark_this_thread();
    for (;;) {
      auto p = raw->allocate(64 * 1024);
      if (p) (void)raw->deallocate(*p, 64 * 1024);
      iterations->fetch_add(1);
    }
  }).detach();
}

TEST(process_exit, default_pools_make_no_device_call_after_the_runtime_teardown) {
  EXPECT_EXIT(
      {
        install_reporter();
        use_default_pool();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      std::string("default pools kept alive.*") + after_teardown +
          "calls_after_teardown=0 leaked_at_exit=[1-9]");
}

TEST(process_exit, without_the_exit_guard_the_map_destructor_calls_the_device_after_teardown) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  EXPECT_EXIT(
      {
        arm_point("bug/alloc/no-exit-guard");
        install_reporter();
        use_default_pool();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      std::string(after_teardown) + "calls_after_teardown=[1-9][0-9]* leaked_at_exit=0");
}

TEST(process_exit, a_pool_destroyed_after_the_hook_leaks_and_reports_instead_of_freeing) {
  EXPECT_EXIT(
      {
        install_reporter();
        (void)device::current().device_count();  // the runtime is up before the pool below
        static device_resource upstream;
        static pool_resource pool(upstream);
        auto p = pool.allocate(4096);
        if (!p) std::exit(3);
        use_default_pool();  // constructs the map, which registers the hook after `pool`
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      std::string("faultline: pool_resource: process is exiting; leaked 2097152 bytes in 1 upstream block.*") +
          after_teardown + "calls_after_teardown=0 ");
}

void probe_after_hook() {
  device_resource raw;
  auto p = raw.allocate(4096);
  std::fprintf(stderr, "probe: exiting=%d code=%s message=%s\n", process_is_exiting() ? 1 : 0,
               std::string(to_string(p.code())).c_str(), p ? "" : p.error().message().c_str());
}

TEST(process_exit, device_calls_that_begin_after_exit_started_are_refused) {
  EXPECT_EXIT(
      {
        install_reporter();
        (void)device::current().device_count();  // the teardown will run after the probe
        std::atexit(probe_after_hook);           // runs after the hook registered below
        use_default_pool();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      std::string("probe: exiting=1 code=refused message=device_resource: allocate: refused, process exit "
                  "has begun.*") +
          after_teardown + "calls_after_teardown=0 ");
}

TEST(process_exit, a_thread_allocating_at_exit_is_drained_then_refused) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  if (device::current().kind() != device::backend_kind::sim) GTEST_SKIP() << "widens the sim's race window";
  EXPECT_EXIT(
      {
        install_reporter(300);
        use_default_pool();
        // Each of the thread's calls sleeps 100 ms inside the sim's race window.
        arm_point("sim/call/after-unloading-check", 0, 100, -1, /*marked_threads_only=*/true);
        static std::atomic<int> iterations{0};
        start_allocating_thread(new device_resource(), &iterations);
        wait_until([] { return fired_count("sim/call/after-unloading-check") >= 3; });
        std::exit(0);  // the thread is inside the window now
      },
      ::testing::ExitedWithCode(0), std::string(after_teardown) + "calls_after_teardown=0 ");
}

TEST(process_exit, without_the_drain_a_thread_allocating_at_exit_crashes_in_the_teardown) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  if (device::current().kind() != device::backend_kind::sim) GTEST_SKIP() << "the crash it expects is the sim's";
  EXPECT_EXIT(
      {
        arm_point("bug/alloc/no-drain");
        install_reporter(1000);
        use_default_pool();
        arm_point("sim/call/after-unloading-check", 0, 100, -1, /*marked_threads_only=*/true);
        static std::atomic<int> iterations{0};
        start_allocating_thread(new device_resource(), &iterations);
        wait_until([] { return fired_count("sim/call/after-unloading-check") >= 3; });
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

// The H100 at --jobs 16: device calls in flight at exit outlasted the drain's old 2 s bound, the
// teardown started under them and one run crashed in libcuda. Here one call sits 2.5 s inside the
// sim's race window (past the old bound): exit must wait for it, however long it takes.
TEST(process_exit, a_call_slower_than_any_fixed_bound_is_drained_before_the_teardown) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  if (device::current().kind() != device::backend_kind::sim) GTEST_SKIP() << "widens the sim's race window";
  EXPECT_EXIT(
      {
        ::unsetenv("FAULTLINE_EXIT_DRAIN_MS");
        install_reporter(300);
        use_default_pool();
        arm_point("sim/call/after-unloading-check", 0, 2500, -1, /*marked_threads_only=*/true);
        static std::atomic<int> iterations{0};
        start_allocating_thread(new device_resource(), &iterations);
        wait_until([] { return fired_count("sim/call/after-unloading-check") >= 1; });
        std::exit(0);  // the thread has just entered a 2.5 s call
      },
      ::testing::ExitedWithCode(0),
      std::string("faultline: exit: still waiting for 1 thread\\(s\\) inside allocator device calls after "
                  "[0-9]+ ms.*") +
          after_teardown + "calls_after_teardown=0 ");
}

TEST(process_exit, a_thread_stuck_past_the_drain_bound_is_reported_and_exit_goes_on) {
  EXPECT_EXIT(
      {
        ::setenv("FAULTLINE_EXIT_DRAIN_MS", "50", 1);
        install_reporter();
        use_default_pool();
        auto* rb = new testing::recording_backend(device::current());
        rb->block_allocate = true;
        auto* raw = new device_resource(*rb);
        std::thread([raw] { (void)raw->allocate(4096); }).detach();
        wait_until([rb] { return rb->allocate_blocked.load(); });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      std::string("faultline: exit: 1 thread\\(s\\) still inside allocator device calls after 50 ms.*") +
          after_teardown + "calls_after_teardown=0 ");
}

TEST(process_exit, drain_bound_is_opt_in_through_the_environment) {
  ::unsetenv("FAULTLINE_EXIT_DRAIN_MS");
  EXPECT_EQ(exit_drain_timeout_ms(), 0u);  // no bound: exit waits for every call in flight
  ::setenv("FAULTLINE_EXIT_DRAIN_MS", "1200", 1);
  EXPECT_EQ(exit_drain_timeout_ms(), 1200u);
  ::setenv("FAULTLINE_EXIT_DRAIN_MS", "12x", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(exit_drain_timeout_ms(), 0u);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("FAULTLINE_EXIT_DRAIN_MS='12x'"), std::string::npos);
  ::setenv("FAULTLINE_EXIT_DRAIN_MS", "-5", 1);
  EXPECT_EQ(exit_drain_timeout_ms(), 0u);
  ::unsetenv("FAULTLINE_EXIT_DRAIN_MS");
  EXPECT_FALSE(process_is_exiting());
}

// --- context reset ------------------------------------------------------------------------------

// A pool with free blocks on two streams, an event (from a hand-over), and a live block; then the
// context is reset under it.
struct reset_setup {
  std::unique_ptr<device_resource> upstream;
  std::unique_ptr<pool_resource> pool;
  void* live_before_reset = nullptr;
  void* handed_over = nullptr;
  device::stream b;
};

reset_setup make_pool_then_reset() {
  auto& dev = device::current();
  reset_setup r;
  r.upstream = std::make_unique<device_resource>(dev);
  pool_options o;
  o.initial_size_bytes = mib;
  o.device = 0;
  r.pool = std::make_unique<pool_resource>(*r.upstream, o);
  auto a = dev.create_stream();
  auto b = dev.create_stream();
  if (!a || !b) std::exit(3);
  r.b = *b;
  auto p = r.pool->allocate(256 * 1024, *a);
  if (!p || !r.pool->deallocate(*p, 256 * 1024, *a)) std::exit(4);
  auto q = r.pool->allocate(256 * 1024, *b);  // handed over from A: creates and records A's event
  auto keep = r.pool->allocate(64 * 1024, *a);
  auto spare = r.pool->allocate(128 * 1024, *a);
  if (!q || !keep || !spare || !r.pool->deallocate(*spare, 128 * 1024, *a)) std::exit(5);
  if (r.pool->statistics().cross_stream_waits != 1) std::exit(6);
  r.handed_over = *q;
  r.live_before_reset = *keep;
  if (!dev.reset_context(0)) std::exit(7);
  return r;
}

TEST(context_reset, a_pool_drops_stale_state_without_device_calls_and_serves_fresh_memory) {
  EXPECT_EXIT(
      {
        reset_setup r = make_pool_then_reset();
        // Freed first: the fresh context may reuse the old addresses, after which a stale
        // pointer can no longer be told from a new block. A free queries no epoch (it makes no
        // device call): these two go back to their lists, which the allocation below, seeing
        // the reset, drops with the old context's blocks (so no stale free is counted).
        const bool stale_ok = r.pool->deallocate(r.live_before_reset, 64 * 1024).is_ok() &&
                              r.pool->deallocate(r.handed_over, 256 * 1024, r.b).is_ok();
        auto fresh = r.pool->allocate(4096);  // default stream: a handle of the new context
        if (!fresh) {
          std::fprintf(stderr, "allocate after reset: %s\n", fresh.error().to_string().c_str());
          std::exit(8);
        }
        const auto inv = r.pool->check_invariants();
        const bool fresh_ok = r.pool->deallocate(*fresh, 4096).is_ok();
        const auto stats = r.pool->statistics();
        r.pool.reset();  // destroyed: must not touch the old context's events
        std::fprintf(stderr,
                     "after-reset: resets=%llu leaked_on_reset=%llu stale_frees=%llu frees_ok=%d invariants=%s\n",
                     static_cast<unsigned long long>(stats.context_resets_seen),
                     static_cast<unsigned long long>(stats.bytes_leaked_on_reset),
                     static_cast<unsigned long long>(stats.stale_deallocations), stale_ok && fresh_ok ? 1 : 0,
                     inv ? "ok" : inv.to_string().c_str());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "faultline: pool_resource: device 0 context was reset.*leaking 1048576 bytes.*"
      "after-reset: resets=1 leaked_on_reset=1048576 stale_frees=0 frees_ok=1 invariants=ok");
}

TEST(context_reset, freeing_an_unknown_pointer_after_a_reset_is_still_rejected) {
  EXPECT_EXIT(
      {
        reset_setup r = make_pool_then_reset();
        int host = 0;
        auto st = r.pool->deallocate(&host, 256);
        std::fprintf(stderr, "unknown: %s\n", std::string(to_string(st.code())).c_str());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "unknown: invalid_argument");
}

TEST(context_reset, without_the_epoch_guard_the_pool_touches_a_stale_event_and_crashes) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  if (device::current().kind() != device::backend_kind::sim) GTEST_SKIP() << "the crash it expects is the sim's";
  EXPECT_EXIT(
      {
        arm_point("bug/alloc/no-epoch-guard");
        reset_setup r = make_pool_then_reset();
        // Nothing fits on the new stream's list: the pool hands over from A, recording A's
        // stale event; and its destructor would destroy it.
        (void)r.pool->allocate(512 * 1024);
        r.pool.reset();
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

}  // namespace
}  // namespace faultline::core::alloc
