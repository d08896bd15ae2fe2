// The sim backend against DESIGN.md §4.3: lazy initialisation and the atexit order it implies,
// calls after teardown, real SIGSEGVs for stale handles and for calls in flight during teardown,
// context reset, arena memory (reuse, coalescing, OOM, strict poisoning), streams and events,
// stream-ordered free, utilisation, the sim's fault points, and its options.
//
// Method: anything that ends the runtime (teardown, exit, an intended SIGSEGV) runs in a death-test
// child — a re-exec of this binary that reports through its exit status and stderr; everything
// else runs here on the process's sim. Ordering tests hold a stream inside a host function until
// the test opens a gate, so they never depend on timing; every wait is bounded generously.
//
// This file: lifecycle, faults, utilisation, fault points and options (memory, contexts, streams
// and events: sim_backend_memory_test.cc; what both use: sim_backend_test_support.h).
#include "core/device/sim/sim_backend.h"

#include <gtest/gtest.h>

#include "core/device/sim/sim_backend_test_support.h"

namespace faultline::core::device {
namespace {

using namespace sim_test_support;

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
