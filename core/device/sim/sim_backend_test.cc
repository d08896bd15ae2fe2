// The sim backend against DESIGN.md §2: lazy initialisation and the atexit order it implies,
// calls after teardown, real SIGSEGVs for stale handles and for calls in flight during teardown,
// context reset, arena memory (reuse, coalescing, OOM, strict poisoning), streams and events,
// stream-ordered free, utilisation, the sim's fault points, and its options.
//
// Method: anything that ends the runtime (teardown, exit, an intended SIGSEGV) runs in a death-test
// child — a re-exec of this binary that reports through its exit status and stderr; everything
// else runs here on the process's sim. Ordering tests hold a stream inside a host function until
// the test opens a gate, so they never depend on timing; every wait is bounded generously.
#include "core/device/sim/sim_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <source_location>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/device/device.h"
#include "core/points/point.h"

namespace faultline::core::device {
namespace {

using namespace std::chrono_literals;
namespace points = faultline::points;

constexpr auto bound = 30s;  // no correct run comes near it; a broken one fails instead of hanging
// Tests driven by fault points skip when FAULTLINE_FAULTS=OFF compiles the points to constants.
constexpr bool points_compiled_in = FAULTLINE_FAULTS_ENABLED;

backend& the_sim() { return sim(); }

// In a death-test child, gtest assertions do not reach the parent: fail with a message and a
// distinctive exit status instead.
void require(bool ok, const char* what, std::source_location where = std::source_location::current()) {
  if (ok) return;
  std::fprintf(stderr, "child requirement failed (line %u): %s\n", where.line(), what);
  std::_Exit(3);
}

// The sanitizers catch SIGSEGV to print a report and exit(1), but these children must die of the
// signal itself. The options are read at process start, so setting them here affects only the
// re-exec'd children (which inherit the environment), not this process's own SEGV reports.
void let_children_die_of_segv() {
  for (const char* var : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* old = std::getenv(var);
    std::string value = old != nullptr ? old : "";
    if (value.find("handle_segv=0") != std::string::npos) continue;
    if (!value.empty()) value += ':';
    value += "handle_segv=0";
    setenv(var, value.c_str(), 1);
  }
}

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A host function that holds its stream until the test opens the gate.
struct gate {
  std::atomic<bool> entered{false};
  std::atomic<bool> opened{false};

  static void hold(void* self) {
    auto* g = static_cast<gate*>(self);
    g->entered.store(true);
    eventually([g] { return g->opened.load(); });
  }
  void open() { opened.store(true); }
  bool wait_entered() { return eventually([this] { return entered.load(); }); }
};

// Opens a gate from another thread after a pause, for calls that block until it opens.
std::thread open_later(gate& g) {
  return std::thread([&g] {
    std::this_thread::sleep_for(50ms);
    g.open();
  });
}

// --- fault point hooks -------------------------------------------------------------------------

struct recorder {
  static inline std::atomic<int> window_hits{0};
  static inline std::atomic<int> allocate_hits{0};
  static inline std::atomic<int> free_hits{0};
  static inline std::atomic<int> op_hits{0};
  static inline std::atomic<int> fail_window{0};
  static inline std::atomic<int> fail_allocate{0};
  static inline std::atomic<int> fail_free{0};
  static inline std::atomic<int> fail_op{0};

  static points::outcome hook(const char* name) noexcept {
    const std::string_view n(name);
    auto fire = [](std::atomic<int>& hits, std::atomic<int>& fail) {
      hits.fetch_add(1);
      const int code = fail.load();
      return points::outcome{code != 0, code};
    };
    if (n == "sim/call/after-unloading-check") return fire(window_hits, fail_window);
    if (n == "sim/allocate") return fire(allocate_hits, fail_allocate);
    if (n == "sim/free") return fire(free_hits, fail_free);
    if (n == "sim/stream/op") return fire(op_hits, fail_op);
    return {};
  }
};

class recording_points {
 public:
  recording_points() {
    for (auto* a : {&recorder::window_hits, &recorder::allocate_hits, &recorder::free_hits, &recorder::op_hits,
                    &recorder::fail_window, &recorder::fail_allocate, &recorder::fail_free, &recorder::fail_op}) {
      a->store(0);
    }
    points::install_hook(&recorder::hook);
    points::set_armed(true);
  }
  ~recording_points() {
    points::set_armed(false);
    points::install_hook(nullptr);
  }
  recording_points(const recording_points&) = delete;
  recording_points& operator=(const recording_points&) = delete;
};

// Holds the first call that reaches the race window until the test lets it go.
std::atomic<bool> g_hold_next_call{false};
std::atomic<bool> g_call_in_window{false};
std::atomic<bool> g_window_released{false};

points::outcome hold_in_window(const char* name) noexcept {
  if (std::strcmp(name, "sim/call/after-unloading-check") == 0 && g_hold_next_call.exchange(false)) {
    g_call_in_window.store(true);
    eventually([] { return g_window_released.load(); });
  }
  return {};
}

// --- lifecycle (children) ----------------------------------------------------------------------

const char* state_name(runtime_state s) {
  switch (s) {
    case runtime_state::uninitialized: return "uninitialized";
    case runtime_state::running: return "running";
    case runtime_state::torn_down: return "torn_down";
  }
  return "?";
}

void report_at_exit(const char* who) {
  auto& s = the_sim();
  auto p = s.allocate(256);
  std::fprintf(stderr, "%s: state=%s allocate=%s calls_after_teardown=%llu\n", who, state_name(s.state()),
               p ? "ok" : std::string(to_string(p.code())).c_str(),
               static_cast<unsigned long long>(s.calls_after_teardown()));
}

TEST(sim_lifecycle, first_call_initialises_and_registers_teardown_at_that_moment) {
  EXPECT_EXIT(
      {
        std::atexit(+[] { report_at_exit("registered-before-init"); });
        auto& s = the_sim();
        require(s.state() == runtime_state::uninitialized, "fresh process: uninitialized");
        require(s.context_epoch(0) == 0 && s.calls_after_teardown() == 0, "queries answer before init");
        require(s.state() == runtime_state::uninitialized, "queries do not initialise");
        require(s.device_count().has_value(), "device_count succeeds");
        require(s.state() == runtime_state::running, "the first call initialises");
        std::atexit(+[] { report_at_exit("registered-after-init"); });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "registered-after-init: state=running allocate=ok calls_after_teardown=0\n"
      ".*registered-before-init: state=torn_down allocate=runtime_unloading calls_after_teardown=1");
}

void child_calls_after_teardown() {
  auto& s = the_sim();
  auto p = s.allocate(1024);
  auto st = s.create_stream();
  auto ev = s.create_event();
  require(p && st && ev, "setup");
  const std::uint64_t epoch = s.context_epoch(0);
  sim_teardown_now();
  require(s.state() == runtime_state::torn_down, "state is torn_down");
  // The handles are stale now; no call may reach them.
  const errc codes[] = {
      s.device_count().code(), s.set_device(0).code(), s.current_device().code(), s.memory(0).code(),
      s.utilization(0).code(), s.allocate(64).code(), s.deallocate(*p).code(),
      s.allocate_async(64, *st).code(), s.deallocate_async(*p, *st).code(),
      s.copy_async(*p, *p, 8, *st).code(), s.fill_async(*p, 0, 8, *st).code(), s.create_stream().code(),
      s.destroy_stream(*st).code(), s.synchronize_stream(*st).code(), s.synchronize_device().code(),
      s.create_event().code(), s.destroy_event(*ev).code(), s.record_event(*ev, *st).code(),
      s.query_event(*ev).code(), s.synchronize_event(*ev).code(), s.stream_wait_event(*st, *ev).code(),
      s.reset_context(0).code(), sim_launch_host_func(*st, +[](void*) {}, nullptr).code()};
  for (errc c : codes) require(c == errc::runtime_unloading, "every call returns runtime_unloading");
  const std::uint64_t n = std::size(codes);
  require(s.calls_after_teardown() == n, "each call counted once");
  require(s.context_epoch(0) == epoch, "epoch kept");
  require(s.calls_after_teardown() == n, "context_epoch is not a call");
  require(sim_get_counters().calls_after_teardown == n, "counters agree");
  sim_teardown_now();  // idempotent, as the atexit run will be
  std::exit(0);
}

TEST(sim_lifecycle, every_call_after_teardown_returns_runtime_unloading_and_is_counted) {
  EXPECT_EXIT(child_calls_after_teardown(), ::testing::ExitedWithCode(0), "");
}

std::atomic<bool> g_slow_started{false};

void child_exit_with_work_in_flight() {
  auto& s = the_sim();
  struct lane {
    stream st;
    event done;
    void* buf;
  };
  std::vector<lane> lanes;
  for (int d = 0; d < 2; ++d) {
    require(s.set_device(d).is_ok(), "set_device");
    for (int i = 0; i < 3; ++i) {
      auto st = s.create_stream();
      auto ev = s.create_event();
      auto buf = s.allocate(1 << 20);
      require(st && ev && buf, "setup");
      lanes.push_back({*st, *ev, *buf});
    }
  }
  auto slow = +[](void*) {
    g_slow_started.store(true);
    std::this_thread::sleep_for(100ms);
    std::fprintf(stderr, "slow host function finished\n");
  };
  auto nap = +[](void*) { std::this_thread::sleep_for(5ms); };
  require(sim_launch_host_func(lanes[0].st, slow, nullptr).is_ok(), "slow op");
  for (int round = 0; round < 4; ++round) {
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      lane& l = lanes[i];
      lane& next = lanes[(i + 1) % lanes.size()];  // the last lane waits across devices
      require(sim_launch_host_func(l.st, nap, nullptr).is_ok(), "nap");
      // Each round has its own slices, so no two streams ever touch the same bytes unordered.
      auto* produced = static_cast<char*>(l.buf) + round * (64 << 10);
      auto* consumed = static_cast<char*>(next.buf) + (512 << 10) + round * 4096;
      require(s.fill_async(produced, round, 64 << 10, l.st).is_ok(), "fill");
      require(s.record_event(l.done, l.st).is_ok(), "record");
      require(s.stream_wait_event(next.st, l.done).is_ok(), "wait");
      require(s.copy_async(consumed, produced, 4096, next.st).is_ok(), "copy");
    }
  }
  require(eventually([] { return g_slow_started.load(); }), "slow op started");
  std::exit(0);  // the teardown must let the running op finish and join every worker
}

TEST(sim_lifecycle, exit_with_work_in_flight_joins_every_worker_and_exits_cleanly) {
  for (int run = 0; run < 3; ++run) {
    EXPECT_EXIT(child_exit_with_work_in_flight(), ::testing::ExitedWithCode(0), "slow host function finished");
  }
}

TEST(sim_lifecycle, bad_environment_value_is_reported_by_the_first_call) {
  EXPECT_EXIT(
      {
        setenv("FAULTLINE_SIM_MEMORY", "12X", 1);
        auto& s = the_sim();
        auto n = s.device_count();
        require(!n && n.code() == errc::invalid_argument, "invalid_argument");
        std::fprintf(stderr, "%s\n", n.error().message().c_str());
        require(s.state() == runtime_state::uninitialized, "not initialised");
        require(s.allocate(256).code() == errc::invalid_argument, "later calls report it too");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "FAULTLINE_SIM_MEMORY='12X': expected bytes");
}

TEST(sim_lifecycle, environment_sets_devices_and_memory_at_the_first_call) {
  EXPECT_EXIT(
      {
        setenv("FAULTLINE_SIM_DEVICES", "3", 1);
        setenv("FAULTLINE_SIM_MEMORY", "64M", 1);
        auto& s = the_sim();
        auto n = s.device_count();
        require(n && *n == 3, "three devices");
        auto m = s.memory(2);
        require(m && m->bytes_total == (std::size_t{64} << 20) && m->bytes_free == m->bytes_total, "64 MiB");
        require(s.set_device(3).code() == errc::invalid_argument, "device 3 does not exist");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(sim_lifecycle, configure_before_the_first_call_overrides_the_environment) {
  EXPECT_EXIT(
      {
        setenv("FAULTLINE_SIM_DEVICES", "5", 1);
        sim_options o;
        o.device_count = 1;
        o.memory_bytes = std::size_t{8} << 20;
        require(sim_configure(o).is_ok(), "configure");
        auto& s = the_sim();
        require(s.device_count().has_value() && *s.device_count() == 1, "one device");
        require(s.allocate(std::size_t{8} << 20).has_value(), "the whole 8 MiB");
        require(s.allocate(256).code() == errc::out_of_memory, "and no more");
        require(sim_configure(o).code() == errc::busy, "too late once initialised");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// --- faults (children that must die of SIGSEGV) -----------------------------------------------

TEST(sim_faults, event_used_after_its_context_was_reset_faults_every_time) {
  let_children_die_of_segv();
  using use_fn = void (*)(backend&, event);
  const use_fn uses[] = {
      [](backend& s, event e) { (void)s.synchronize_event(e); },
      [](backend& s, event e) { (void)s.query_event(e); },
      [](backend& s, event e) { (void)s.record_event(e, stream{}); },
      [](backend& s, event e) { (void)s.stream_wait_event(stream{}, e); },
  };
  for (use_fn use : uses) {
    EXPECT_EXIT(
        {
          auto& s = the_sim();
          auto e = s.create_event();
          require(e && s.record_event(*e, stream{}).is_ok(), "setup");
          require(s.reset_context(0).is_ok(), "reset");
          use(s, *e);
          std::_Exit(0);
        },
        ::testing::KilledBySignal(SIGSEGV), "");
  }
}

TEST(sim_faults, stream_used_after_its_context_was_reset_faults_every_time) {
  let_children_die_of_segv();
  using use_fn = void (*)(backend&, stream, void*);
  const use_fn uses[] = {
      [](backend& s, stream st, void*) { (void)s.synchronize_stream(st); },
      [](backend& s, stream st, void* p) { (void)s.fill_async(p, 0, 64, st); },
      [](backend& s, stream st, void*) { (void)s.destroy_stream(st); },
  };
  for (use_fn use : uses) {
    EXPECT_EXIT(
        {
          auto& s = the_sim();
          auto st = s.create_stream();
          auto e = s.create_event();
          require(st && e, "setup");
          require(s.reset_context(0).is_ok(), "reset");
          auto p = s.allocate(256);  // a fresh context: the device works, the old stream does not
          require(p.has_value(), "fresh context");
          use(s, *st, *p);
          std::_Exit(0);
        },
        ::testing::KilledBySignal(SIGSEGV), "");
  }
}

TEST(sim_faults, call_in_flight_while_teardown_runs_faults) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  let_children_die_of_segv();
  EXPECT_EXIT(
      {
        auto& s = the_sim();
        require(s.allocate(256).has_value(), "context exists");
        points::install_hook(&hold_in_window);
        points::set_armed(true);
        g_hold_next_call.store(true);
        std::thread caller([&s] { (void)s.allocate(256); });
        require(eventually([] { return g_call_in_window.load(); }), "call reached the window");
        sim_teardown_now();  // the call already passed its teardown check
        g_window_released.store(true);
        caller.join();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST(sim_faults, call_in_flight_at_process_exit_faults) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  let_children_die_of_segv();
  EXPECT_EXIT(
      {
        // Registered before the sim initialises, so it runs after the sim's teardown: it lets the
        // held call go on and gives it time to fault before the process ends.
        std::atexit(+[] {
          g_window_released.store(true);
          std::this_thread::sleep_for(bound);
          std::_Exit(0);
        });
        auto& s = the_sim();
        require(s.allocate(256).has_value(), "context exists");
        points::install_hook(&hold_in_window);
        points::set_armed(true);
        g_hold_next_call.store(true);
        std::thread([&s] { (void)s.allocate(256); }).detach();
        require(eventually([] { return g_call_in_window.load(); }), "call reached the window");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST(sim_faults, strict_mode_makes_a_read_after_free_of_whole_pages_fault) {
  let_children_die_of_segv();
  EXPECT_EXIT(
      {
        sim_set_strict(true);
        auto& s = the_sim();
        auto p = s.allocate(64 << 10);
        require(p.has_value(), "allocate");
        std::memset(*p, 1, 64 << 10);
        require(s.deallocate(*p).is_ok(), "free");
        const volatile unsigned char* bytes = static_cast<unsigned char*>(*p);
        std::fprintf(stderr, "%d\n", bytes[32 << 10]);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST(sim_faults, strict_mode_makes_memory_of_a_reset_context_fault) {
  let_children_die_of_segv();
  EXPECT_EXIT(
      {
        sim_set_strict(true);
        auto& s = the_sim();
        auto p = s.allocate(4096);
        require(p.has_value(), "allocate");
        std::memset(*p, 1, 4096);
        require(s.reset_context(0).is_ok(), "reset");
        const volatile unsigned char* bytes = static_cast<unsigned char*>(*p);
        std::fprintf(stderr, "%d\n", bytes[0]);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

// --- memory and contexts (this process, device 1 reset to a fresh context per test) -----------

class sim_device_one : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(s_.set_device(1).is_ok());
    ASSERT_TRUE(s_.reset_context(1).is_ok());
    auto m = s_.memory(1);
    ASSERT_TRUE(m.has_value());
    total_ = m->bytes_total;
  }
  void TearDown() override {
    sim_set_strict(false);
    ASSERT_TRUE(s_.set_device(0).is_ok());
  }
  std::size_t bytes_free() {
    auto m = s_.memory(1);
    return m ? m->bytes_free : 0;
  }

  backend& s_ = the_sim();
  std::size_t total_ = 0;
};

TEST_F(sim_device_one, allocations_are_aligned_host_addressable_and_reused_after_free) {
  auto a = s_.allocate(1000);
  auto b = s_.allocate(1000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*b) % 256, 0u);
  EXPECT_NE(*a, *b);
  std::memset(*a, 0x3c, 1000);
  EXPECT_EQ(static_cast<unsigned char*>(*a)[999], 0x3c);
  ASSERT_TRUE(s_.deallocate(*a).is_ok());
  auto c = s_.allocate(1000);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, *a) << "a freed range is silently reused, as on CUDA";
  EXPECT_EQ(static_cast<unsigned char*>(*c)[0], 0x3c) << "and keeps its old bytes outside strict mode";
  EXPECT_TRUE(s_.deallocate(*b).is_ok());
  EXPECT_TRUE(s_.deallocate(*c).is_ok());
}

TEST_F(sim_device_one, freed_neighbours_coalesce_into_one_larger_allocation) {
  constexpr std::size_t mib = 1 << 20;
  auto a = s_.allocate(mib);
  auto b = s_.allocate(mib);
  auto c = s_.allocate(mib);
  ASSERT_TRUE(a && b && c);
  ASSERT_TRUE(s_.deallocate(*a).is_ok());
  ASSERT_TRUE(s_.deallocate(*c).is_ok());
  ASSERT_TRUE(s_.deallocate(*b).is_ok());
  auto big = s_.allocate(3 * mib);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big, *a);
  EXPECT_TRUE(s_.deallocate(*big).is_ok());
}

TEST_F(sim_device_one, out_of_memory_is_an_error_value_and_memory_reports_use) {
  EXPECT_EQ(s_.allocate(total_ + 1).code(), errc::out_of_memory);
  auto whole = s_.allocate(total_);  // reserved address space: nothing is touched
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(bytes_free(), 0u);
  auto more = s_.allocate(256);
  EXPECT_EQ(more.code(), errc::out_of_memory);
  EXPECT_NE(more.error().message().find("out of memory"), std::string::npos);
  EXPECT_FALSE(more.error().injected());
  ASSERT_TRUE(s_.deallocate(*whole).is_ok());
  EXPECT_EQ(bytes_free(), total_);
  auto p = s_.allocate(1000);  // rounded to whole 256-byte granules
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(bytes_free(), total_ - 1024);
  EXPECT_TRUE(s_.deallocate(*p).is_ok());
}

TEST_F(sim_device_one, deallocate_rejects_what_is_not_a_live_allocation) {
  int on_stack = 0;
  auto p = s_.allocate(4096);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(s_.allocate(0).code(), errc::invalid_argument);
  EXPECT_EQ(s_.deallocate(&on_stack).code(), errc::invalid_argument);
  EXPECT_EQ(s_.deallocate(static_cast<char*>(*p) + 256).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.deallocate(nullptr).is_ok());
  EXPECT_TRUE(s_.deallocate(*p).is_ok());
  EXPECT_EQ(s_.deallocate(*p).code(), errc::invalid_argument) << "double free";
}

TEST_F(sim_device_one, reset_frees_every_allocation_and_bumps_the_epoch_once) {
  auto p = s_.allocate(1 << 20);
  ASSERT_TRUE(p.has_value());
  const std::uint64_t before = s_.context_epoch(1);
  ASSERT_NE(before, 0u);
  const std::uint64_t resets = sim_get_counters().context_resets;
  ASSERT_TRUE(s_.reset_context(1).is_ok());
  EXPECT_EQ(s_.context_epoch(1), before + 1);
  EXPECT_EQ(sim_get_counters().context_resets, resets + 1);
  EXPECT_TRUE(s_.reset_context(1).is_ok()) << "no context now: a no-op";
  EXPECT_EQ(s_.context_epoch(1), before + 1);
  EXPECT_EQ(bytes_free(), total_) << "the next call builds a fresh, empty context";
  EXPECT_EQ(s_.context_epoch(1), before + 1) << "which keeps the epoch the reset set";
  EXPECT_EQ(s_.deallocate(*p).code(), errc::invalid_argument) << "the reset freed it";
  auto q = s_.allocate(1 << 20);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(*q, *p) << "the address is reused";
  EXPECT_TRUE(s_.deallocate(*q).is_ok());
}

TEST_F(sim_device_one, strict_mode_poisons_freed_bytes_on_pages_still_in_use) {
  sim_set_strict(true);
  auto a = s_.allocate(256);
  auto b = s_.allocate(256);  // same page as a, which stays live
  ASSERT_TRUE(a && b);
  std::memset(*b, 0x11, 256);
  ASSERT_TRUE(s_.deallocate(*b).is_ok());
  const auto* bytes = static_cast<const unsigned char*>(*b);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(bytes[i], sim_poison_byte) << "byte " << i;
  auto c = s_.allocate(8192);  // pages freed in strict mode become usable again
  ASSERT_TRUE(c.has_value());
  std::memset(*c, 0x22, 8192);
  EXPECT_TRUE(s_.deallocate(*c).is_ok());
  EXPECT_TRUE(s_.deallocate(*a).is_ok());
}

TEST_F(sim_device_one, concurrent_allocations_from_many_threads_never_overlap) {
  const std::size_t start_free = bytes_free();
  std::atomic<int> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &corrupt] {
      if (!s_.set_device(1).is_ok()) corrupt.fetch_add(1);
      std::uint64_t seed = 0x1234 + static_cast<std::uint64_t>(t);
      auto next = [&seed] {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return seed >> 33;
      };
      struct held {
        unsigned char* p;
        std::size_t n;
      };
      std::vector<held> live;
      const auto tag = static_cast<unsigned char>(0x40 + t);
      auto release = [&](std::size_t i) {
        for (std::size_t k = 0; k < live[i].n; k += 97) {
          if (live[i].p[k] != tag) corrupt.fetch_add(1);
        }
        if (!s_.deallocate(live[i].p).is_ok()) corrupt.fetch_add(1);
        live[i] = live.back();
        live.pop_back();
      };
      for (int i = 0; i < 3000; ++i) {
        if (live.size() < 32 && next() % 3 != 0) {
          const std::size_t n = 1 + next() % (64 << 10);
          auto p = s_.allocate(n);
          if (!p) {
            corrupt.fetch_add(1);
            continue;
          }
          std::memset(*p, tag, n);
          live.push_back({static_cast<unsigned char*>(*p), n});
        } else if (!live.empty()) {
          release(next() % live.size());
        }
      }
      while (!live.empty()) release(0);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(bytes_free(), start_free);
}

// --- streams and events ------------------------------------------------------------------------

TEST_F(sim_device_one, ops_on_one_stream_run_in_queue_order) {
  auto st = s_.create_stream();
  auto src = s_.allocate(4096);
  auto dst = s_.allocate(4096 * 50);
  ASSERT_TRUE(st && src && dst);
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());  // everything below queues
  auto* out = static_cast<unsigned char*>(*dst);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(s_.fill_async(*src, i, 4096, *st).is_ok());
    ASSERT_TRUE(s_.copy_async(out + 4096 * i, *src, 4096, *st).is_ok());
  }
  g.open();
  ASSERT_TRUE(s_.synchronize_stream(*st).is_ok());
  for (int i = 0; i < 50; ++i) ASSERT_EQ(out[4096 * i + 4095], i) << "copy " << i;
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, default_stream_is_a_real_stream_with_its_own_worker) {
  static std::thread::id ran_on;
  auto e = s_.create_event();
  ASSERT_TRUE(e.has_value());
  gate g;
  ASSERT_TRUE(sim_launch_host_func(stream{}, &gate::hold, &g).is_ok());
  ASSERT_TRUE(sim_launch_host_func(stream{}, +[](void*) { ran_on = std::this_thread::get_id(); }, nullptr).is_ok());
  ASSERT_TRUE(s_.record_event(*e, stream{}).is_ok());
  ASSERT_TRUE(g.wait_entered());
  EXPECT_EQ(s_.query_event(*e).code(), errc::not_ready);
  g.open();
  ASSERT_TRUE(s_.synchronize_stream(stream{}).is_ok());
  EXPECT_TRUE(s_.query_event(*e).is_ok());
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(s_.destroy_stream(stream{}).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.destroy_event(*e).is_ok());
}

TEST_F(sim_device_one, event_is_not_ready_until_the_work_it_captured_completes) {
  auto st = s_.create_stream();
  auto e = s_.create_event();
  auto later = s_.create_event();
  ASSERT_TRUE(st && e && later);
  EXPECT_TRUE(s_.query_event(*e).is_ok()) << "never recorded: complete, as on CUDA";
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  ASSERT_TRUE(s_.record_event(*e, *st).is_ok());
  ASSERT_TRUE(g.wait_entered());
  EXPECT_EQ(s_.query_event(*e).code(), errc::not_ready);
  std::thread opener = open_later(g);
  EXPECT_TRUE(s_.synchronize_event(*e).is_ok());
  opener.join();
  EXPECT_TRUE(s_.query_event(*e).is_ok());
  ASSERT_TRUE(s_.record_event(*later, *st).is_ok());  // an idle stream: complete at once
  EXPECT_TRUE(s_.query_event(*later).is_ok());
  EXPECT_TRUE(s_.destroy_event(*e).is_ok());
  EXPECT_EQ(s_.query_event(*e).code(), errc::invalid_argument) << "destroyed";
  EXPECT_EQ(s_.query_event(event{}).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.destroy_event(*later).is_ok());
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, stream_wait_event_holds_later_work_until_the_other_stream_gets_there) {
  auto a = s_.create_stream();
  auto b = s_.create_stream();
  auto a_done = s_.create_event();
  auto b_done = s_.create_event();
  auto src = s_.allocate(4096);
  auto dst = s_.allocate(4096);
  ASSERT_TRUE(a && b && a_done && b_done && src && dst);
  std::memset(*src, 0, 4096);
  std::memset(*dst, 0, 4096);
  gate slow;
  ASSERT_TRUE(sim_launch_host_func(*a, &gate::hold, &slow).is_ok());  // A's slow op
  ASSERT_TRUE(s_.fill_async(*src, 0x5a, 4096, *a).is_ok());
  ASSERT_TRUE(s_.record_event(*a_done, *a).is_ok());
  ASSERT_TRUE(s_.stream_wait_event(*b, *a_done).is_ok());
  ASSERT_TRUE(s_.copy_async(*dst, *src, 4096, *b).is_ok());
  ASSERT_TRUE(s_.record_event(*b_done, *b).is_ok());
  ASSERT_TRUE(slow.wait_entered());
  std::this_thread::sleep_for(50ms);  // room for a broken B to run ahead
  EXPECT_EQ(s_.query_event(*b_done).code(), errc::not_ready);
  EXPECT_EQ(static_cast<unsigned char*>(*dst)[0], 0);
  slow.open();
  ASSERT_TRUE(s_.synchronize_stream(*b).is_ok());
  EXPECT_EQ(static_cast<unsigned char*>(*dst)[4095], 0x5a) << "B copied after A's fill";
  EXPECT_TRUE(s_.destroy_stream(*a).is_ok());
  EXPECT_TRUE(s_.destroy_stream(*b).is_ok());
}

TEST_F(sim_device_one, destroy_stream_completes_queued_work_first) {
  auto st = s_.create_stream();
  auto buf = s_.allocate(4096);
  ASSERT_TRUE(st && buf);
  std::memset(*buf, 0, 4096);
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  ASSERT_TRUE(s_.fill_async(*buf, 7, 4096, *st).is_ok());
  std::thread opener = open_later(g);
  ASSERT_TRUE(s_.destroy_stream(*st).is_ok());
  opener.join();
  EXPECT_EQ(static_cast<unsigned char*>(*buf)[4095], 7);
  EXPECT_EQ(s_.synchronize_stream(*st).code(), errc::invalid_argument) << "destroyed";
  EXPECT_TRUE(s_.deallocate(*buf).is_ok());
}

TEST_F(sim_device_one, synchronize_device_waits_for_every_stream) {
  auto a = s_.create_stream();
  auto b = s_.create_stream();
  auto buf = s_.allocate(8192);
  ASSERT_TRUE(a && b && buf);
  std::memset(*buf, 0, 8192);
  gate ga;
  gate gb;
  auto* bytes = static_cast<unsigned char*>(*buf);
  ASSERT_TRUE(sim_launch_host_func(*a, &gate::hold, &ga).is_ok());
  ASSERT_TRUE(sim_launch_host_func(*b, &gate::hold, &gb).is_ok());
  ASSERT_TRUE(s_.fill_async(bytes, 1, 4096, *a).is_ok());
  ASSERT_TRUE(s_.fill_async(bytes + 4096, 2, 4096, *b).is_ok());
  std::thread open_a = open_later(ga);
  std::thread open_b = open_later(gb);
  ASSERT_TRUE(s_.synchronize_device().is_ok());
  open_a.join();
  open_b.join();
  EXPECT_EQ(bytes[4095], 1);
  EXPECT_EQ(bytes[8191], 2);
  EXPECT_TRUE(s_.destroy_stream(*a).is_ok());
  EXPECT_TRUE(s_.destroy_stream(*b).is_ok());
}

TEST_F(sim_device_one, event_and_stream_of_different_devices_cannot_be_recorded_together) {
  auto e = s_.create_event();  // device 1
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(s_.set_device(0).is_ok());
  auto st = s_.create_stream();  // device 0
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(s_.record_event(*e, *st).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
  EXPECT_TRUE(s_.destroy_event(*e).is_ok());
}

TEST_F(sim_device_one, deallocate_async_releases_memory_only_when_the_stream_gets_there) {
  constexpr std::size_t mib = 1 << 20;
  auto st = s_.create_stream();
  ASSERT_TRUE(st.has_value());
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  auto p = s_.allocate_async(mib, *st);
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(s_.deallocate_async(*p, *st).is_ok());
  EXPECT_EQ(s_.deallocate_async(*p, *st).code(), errc::invalid_argument) << "already queued";
  EXPECT_EQ(bytes_free(), total_ - mib) << "still held: the stream has not reached the free";
  auto other = s_.allocate(mib);
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(*other, *p);
  g.open();
  ASSERT_TRUE(s_.synchronize_stream(*st).is_ok());
  EXPECT_EQ(bytes_free(), total_ - mib);
  auto again = s_.allocate(mib);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, *p) << "released and reusable now";
  EXPECT_TRUE(s_.deallocate(*again).is_ok());
  EXPECT_TRUE(s_.deallocate(*other).is_ok());
  EXPECT_EQ(s_.deallocate_async(&g, *st).code(), errc::invalid_argument) << "not device memory";
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, deallocate_waits_for_work_queued_on_the_device) {
  static std::atomic<bool> done{false};
  done.store(false);
  auto st = s_.create_stream();
  auto p = s_.allocate(4096);
  ASSERT_TRUE(st && p);
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  ASSERT_TRUE(sim_launch_host_func(*st, +[](void*) { done.store(true); }, nullptr).is_ok());
  std::thread opener = open_later(g);
  ASSERT_TRUE(s_.deallocate(*p).is_ok());
  EXPECT_TRUE(done.load());
  opener.join();
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, reset_from_a_host_function_on_the_same_device_completes) {
  static std::atomic<int> outcome{-1};
  outcome.store(-1);
  const std::uint64_t before = s_.context_epoch(1);
  auto st = s_.create_stream();
  ASSERT_TRUE(st.has_value());
  // The worker running this cannot join itself: it must detach and leave without touching its
  // (now unmapped) stream slot.
  ASSERT_TRUE(sim_launch_host_func(*st, +[](void*) { outcome.store(static_cast<int>(the_sim().reset_context(1).code())); }, nullptr).is_ok());
  ASSERT_TRUE(eventually([] { return outcome.load() != -1; }));
  EXPECT_EQ(outcome.load(), static_cast<int>(errc::ok));
  EXPECT_EQ(s_.context_epoch(1), before + 1);
  EXPECT_EQ(bytes_free(), total_) << "a fresh context works";
}

// --- utilisation -------------------------------------------------------------------------------

TEST(sim_utilization, waits_the_configured_latency_and_answers_a_percentage) {
  auto& s = the_sim();
  sim_set_query_latency_ms(30);
  const auto t0 = std::chrono::steady_clock::now();
  auto u = s.utilization(0);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  sim_set_query_latency_ms(1);
  ASSERT_TRUE(u.has_value());
  EXPECT_GE(elapsed, 30ms);
  EXPECT_GE(*u, 0);
  EXPECT_LE(*u, 100);
  EXPECT_EQ(s.utilization(7).code(), errc::invalid_argument);
}

TEST(sim_utilization, reports_zero_when_idle_and_busy_time_after_work) {
  auto& s = the_sim();
  sim_set_query_latency_ms(0);
  ASSERT_TRUE(s.set_device(1).is_ok());
  auto st = s.create_stream();
  ASSERT_TRUE(st.has_value());
  ASSERT_TRUE(s.utilization(1).has_value());  // starts a sampling window
  auto idle = s.utilization(1);
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(*idle, 0);
  ASSERT_TRUE(sim_launch_host_func(*st, +[](void*) { std::this_thread::sleep_for(100ms); }, nullptr).is_ok());
  ASSERT_TRUE(s.synchronize_stream(*st).is_ok());
  auto busy = s.utilization(1);
  ASSERT_TRUE(busy.has_value());
  EXPECT_GT(*busy, 0);
  EXPECT_TRUE(s.destroy_stream(*st).is_ok());
  ASSERT_TRUE(s.set_device(0).is_ok());
  sim_set_query_latency_ms(1);
}

// --- fault points ------------------------------------------------------------------------------

TEST(sim_points, allocate_point_failure_is_an_injected_fault) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  auto& s = the_sim();
  ASSERT_TRUE(s.device_count().has_value());
  recording_points rec;
  recorder::fail_allocate.store(ENOMEM);
  auto p = s.allocate(256);
  EXPECT_EQ(p.code(), errc::out_of_memory);
  EXPECT_TRUE(p.error().injected());
  recorder::fail_allocate.store(EIO);
  auto q = s.allocate_async(256, stream{});
  EXPECT_EQ(q.code(), errc::injected);
  EXPECT_TRUE(q.error().injected());
  EXPECT_EQ(recorder::allocate_hits.load(), 2);
  recorder::fail_allocate.store(0);
  auto r = s.allocate(256);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(s.deallocate(*r).is_ok());
}

TEST(sim_points, free_point_failure_keeps_the_allocation) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  auto& s = the_sim();
  auto p = s.allocate(4096);
  ASSERT_TRUE(p.has_value());
  const auto before = s.memory(0)->bytes_free;
  {
    recording_points rec;
    recorder::fail_free.store(EIO);
    auto st = s.deallocate(*p);
    EXPECT_EQ(st.code(), errc::injected);
    EXPECT_TRUE(st.injected());
    EXPECT_EQ(s.deallocate_async(*p, stream{}).code(), errc::injected);
    EXPECT_EQ(recorder::free_hits.load(), 2);
  }
  EXPECT_EQ(s.memory(0)->bytes_free, before);
  EXPECT_TRUE(s.deallocate(*p).is_ok());
}

TEST(sim_points, stream_op_point_fires_before_every_queued_op_and_a_failure_drops_it) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  auto& s = the_sim();
  auto st = s.create_stream();
  auto e = s.create_event();
  auto buf = s.allocate(4096);
  ASSERT_TRUE(st && e && buf);
  std::memset(*buf, 0, 4096);
  {
    recording_points rec;
    ASSERT_TRUE(s.fill_async(*buf, 1, 4096, *st).is_ok());
    ASSERT_TRUE(s.copy_async(static_cast<char*>(*buf) + 2048, *buf, 8, *st).is_ok());
    ASSERT_TRUE(s.record_event(*e, stream{}).is_ok());
    ASSERT_TRUE(s.stream_wait_event(*st, *e).is_ok());
    ASSERT_TRUE(sim_launch_host_func(*st, +[](void*) {}, nullptr).is_ok());
    ASSERT_TRUE(s.synchronize_stream(*st).is_ok());
    EXPECT_EQ(recorder::op_hits.load(), 4);

    const std::uint64_t dropped = sim_get_counters().ops_dropped;
    recorder::fail_op.store(1);
    ASSERT_TRUE(s.fill_async(*buf, 9, 4096, *st).is_ok());
    ASSERT_TRUE(s.synchronize_stream(*st).is_ok());
    EXPECT_EQ(static_cast<unsigned char*>(*buf)[0], 1) << "the dropped fill never ran";
    EXPECT_EQ(sim_get_counters().ops_dropped, dropped + 1);
  }
  EXPECT_TRUE(s.destroy_stream(*st).is_ok());
  EXPECT_TRUE(s.destroy_event(*e).is_ok());
  EXPECT_TRUE(s.deallocate(*buf).is_ok());
}

TEST(sim_points, race_window_point_fires_on_every_call_and_can_fail_it) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  auto& s = the_sim();
  ASSERT_TRUE(s.device_count().has_value());
  recording_points rec;
  ASSERT_TRUE(s.device_count().has_value());
  ASSERT_TRUE(s.current_device().has_value());
  ASSERT_TRUE(s.synchronize_device().is_ok());
  (void)s.context_epoch(0);  // not a call
  EXPECT_EQ(recorder::window_hits.load(), 3);
  recorder::fail_window.store(EIO);
  auto r = s.memory(0);
  EXPECT_EQ(r.code(), errc::injected);
  EXPECT_TRUE(r.error().injected());
}

// --- options -----------------------------------------------------------------------------------

TEST(sim_options, parse_bytes_accepts_numbers_with_binary_suffixes) {
  EXPECT_EQ(*sim_parse_bytes("4096"), 4096u);
  EXPECT_EQ(*sim_parse_bytes("4K"), 4096u);
  EXPECT_EQ(*sim_parse_bytes("512m"), std::size_t{512} << 20);
  EXPECT_EQ(*sim_parse_bytes("4G"), std::size_t{4} << 30);
}

TEST(sim_options, parse_bytes_rejects_malformed_values) {
  for (const char* bad : {"", "G", "-1", "+4", "1.5G", "4GB", "12X", " 4G", "4G ", "99999999999999999999",
                          "17179869184G"}) {
    EXPECT_EQ(sim_parse_bytes(bad).code(), errc::invalid_argument) << "'" << bad << "'";
  }
}

class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~scoped_env() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(sim_options, environment_is_read_variable_by_variable) {
  {
    scoped_env d("FAULTLINE_SIM_DEVICES", "3");
    scoped_env m("FAULTLINE_SIM_MEMORY", "256M");
    scoped_env s("FAULTLINE_SIM_STRICT", "1");
    scoped_env l("FAULTLINE_SIM_QUERY_LATENCY_MS", "25");
    auto o = sim_options_from_env();
    ASSERT_TRUE(o.has_value()) << o.error().to_string();
    EXPECT_EQ(o->device_count, 3);
    EXPECT_EQ(o->memory_bytes, std::size_t{256} << 20);
    EXPECT_TRUE(o->strict);
    EXPECT_EQ(o->query_latency_ms, 25u);
  }
  const struct {
    const char* name;
    const char* value;
  } bad[] = {{"FAULTLINE_SIM_DEVICES", "0"},         {"FAULTLINE_SIM_DEVICES", "17"},
             {"FAULTLINE_SIM_DEVICES", "two"},       {"FAULTLINE_SIM_MEMORY", "512K"},
             {"FAULTLINE_SIM_MEMORY", "1T"},         {"FAULTLINE_SIM_STRICT", "yes"},
             {"FAULTLINE_SIM_QUERY_LATENCY_MS", "-5"}, {"FAULTLINE_SIM_QUERY_LATENCY_MS", "60001"}};
  for (const auto& b : bad) {
    scoped_env e(b.name, b.value);
    auto o = sim_options_from_env();
    ASSERT_FALSE(o.has_value()) << b.name << "=" << b.value;
    EXPECT_EQ(o.code(), errc::invalid_argument);
    EXPECT_NE(o.error().message().find(std::string(b.name) + "='" + b.value + "'"), std::string::npos)
        << o.error().message();
  }
}

TEST(sim_options, configure_rejects_bad_values_and_is_busy_once_initialised) {
  sim_options o;
  o.device_count = 0;
  EXPECT_EQ(sim_configure(o).code(), errc::invalid_argument);
  o.device_count = 2;
  o.memory_bytes = 1000;
  EXPECT_EQ(sim_configure(o).code(), errc::invalid_argument);
  o.memory_bytes = std::size_t{1} << 30;
  ASSERT_TRUE(the_sim().device_count().has_value());
  EXPECT_EQ(sim_configure(o).code(), errc::busy);
}

TEST(sim_options, backend_identifies_itself) {
  EXPECT_EQ(the_sim().kind(), backend_kind::sim);
  EXPECT_EQ(the_sim().name(), "sim");
  EXPECT_EQ(&the_sim(), &sim()) << "one instance per process";
}

}  // namespace
}  // namespace faultline::core::device
