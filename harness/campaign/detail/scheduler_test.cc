// run_scheduler, run_numbering and campaign_tally: the bookkeeping of a campaign's worker threads
// without a process run. The goal: runs are handed out in run-number order, skipping other
// shards' and those a resume found; a run starts only while its slots fit in jobs, and a wide one
// waits rather than being overtaken; a checkpoint runs with no run in flight, sees every run
// recorded, and holds new runs back while it runs; until_fail, a record that cannot be written,
// the cancel flag and the deadline each stop the handing out. Method: the tests play the workers
// themselves, claiming and recording by hand; a claim expected to block runs on a thread of its
// own, checked not to return until the event that frees it. With schedule_kind::cpu a run is
// measured through a stand-in for its cgroup: a folder whose cpu.stat the test writes.
#include "harness/campaign/detail/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace faultline::harness::detail {
namespace {

using namespace std::chrono_literals;

// Two variants, "a" (1 slot) and "b" (`b_slots`), repeated `repeat` times.
campaign_options two_variants(std::uint64_t repeat, unsigned jobs, unsigned b_slots = 1) {
  campaign_options o;
  o.variants.resize(2);
  o.variants[0].name = "a";
  o.variants[1].name = "b";
  o.variants[1].slots = b_slots;
  o.repeat = repeat;
  o.jobs = jobs;
  o.seed = 100;
  return o;
}

run_record scheduled_record(const run_numbering& n, std::uint64_t k, outcome result = outcome::pass) {
  run_record r;
  r.run = k;
  r.name = n.variant_of(k).name;
  r.seed = n.seed_of(k);
  r.result = result;
  r.log = "logs/x.log";
  return r;
}

// A claim on a thread of its own, for one that must wait.
std::future<std::optional<std::uint64_t>> claim_later(run_scheduler& s) {
  return std::async(std::launch::async, [&s] { return s.claim(); });
}

bool still_waiting(std::future<std::optional<std::uint64_t>>& f) { return f.wait_for(300ms) == std::future_status::timeout; }

TEST(run_numbering, numbers_round_robin_or_rotating_per_shard) {
  campaign_options o = two_variants(3, 1);
  run_numbering n(o);
  EXPECT_EQ(n.total(), 6u);
  EXPECT_EQ(n.variant_of(3).name, "b");
  EXPECT_EQ(n.seed_of(3), 101u);  // repetition 1 of b
  o.rotate_per_shard = true;
  o.part.index = 1;
  o.part.count = 2;
  // Run k is variant (k / 2) mod 2: shard 1's runs 1, 3, 5 are a, b, a.
  EXPECT_EQ(n.variant_of(1).name, "a");
  EXPECT_EQ(n.variant_of(3).name, "b");
  EXPECT_EQ(n.variant_of(5).name, "a");
  EXPECT_EQ(n.seed_of(3), 103u);
  o.faults_of = [](std::uint64_t k, const variant& v) { return v.name + std::to_string(k); };
  EXPECT_EQ(n.faults_of(5), "a5");
}

TEST(run_numbering, slots_stay_within_one_and_jobs) {
  campaign_options o = two_variants(1, 4, 9);
  o.variants[0].slots = 0;
  run_numbering n(o);
  EXPECT_EQ(n.slots_of(0), 1u);
  EXPECT_EQ(n.slots_of(1), 4u);
}

TEST(run_scheduler, hands_out_runs_in_order_skipping_other_shards_and_recorded_ones) {
  campaign_options o = two_variants(4, 8);
  o.part.index = 1;
  o.part.count = 2;
  run_numbering n(o);
  campaign_tally tally(o);
  EXPECT_TRUE(tally.add_resumed(scheduled_record(n, 3), n.variant_index(3)));
  EXPECT_FALSE(tally.add_resumed(scheduled_record(n, 3), n.variant_index(3)));  // recorded twice: once
  EXPECT_EQ(tally.resumed(), 1u);
  run_scheduler s(o, n, std::move(tally), nullptr);
  std::vector<std::uint64_t> claimed;
  while (auto k = s.claim()) claimed.push_back(*k);
  EXPECT_EQ(claimed, (std::vector<std::uint64_t>{1, 5, 7}));
  EXPECT_EQ(s.resumed(), 1u);
}

TEST(run_scheduler, a_wide_run_waits_for_room_and_is_not_overtaken) {
  campaign_options o = two_variants(2, 2, 2);  // runs: a, b (2 slots), a, b (2 slots)
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  ASSERT_EQ(s.claim(), 0u);
  auto wide = claim_later(s);
  EXPECT_TRUE(still_waiting(wide)) << "run 1 takes both slots while run 0 holds one";
  s.record(0, scheduled_record(n, 0));
  EXPECT_EQ(wide.get(), 1u);
  auto narrow = claim_later(s);
  EXPECT_TRUE(still_waiting(narrow)) << "run 2 waits for the wide run 1";
  s.record(1, scheduled_record(n, 1));
  EXPECT_EQ(narrow.get(), 2u);
  auto wide_again = claim_later(s);
  EXPECT_TRUE(still_waiting(wide_again)) << "run 3 takes both slots while run 2 holds one";
  s.abandon(2);
  EXPECT_EQ(wide_again.get(), 3u);
  s.record(3, scheduled_record(n, 3));
  EXPECT_EQ(s.claim(), std::nullopt);
}

// schedule_kind::declared: two variants declaring `a_cpu` and `b_cpu` percent, on the sim device
// (slots not device contexts) unless `devices`.
campaign_options declared(std::uint64_t repeat, unsigned jobs, unsigned a_cpu, unsigned b_cpu, bool devices = false,
                          unsigned b_slots = 1) {
  campaign_options o = two_variants(repeat, jobs, b_slots);
  o.schedule = schedule_kind::declared;
  o.variants[0].cpu_percent = a_cpu;
  o.variants[1].cpu_percent = b_cpu;
  for (auto& v : o.variants) v.slots_are_devices = devices;
  return o;
}

TEST(run_scheduler, declared_schedule_runs_waiting_scenarios_beside_each_other) {
  campaign_options o = declared(8, 2, 25, 25);  // 8 x 25% fill 2 CPUs, and 4 x jobs is 8
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  EXPECT_EQ(s.most_in_flight(), 8u);
  for (std::uint64_t k = 0; k < 8; ++k) ASSERT_EQ(s.claim(), k);
  auto ninth = claim_later(s);
  EXPECT_TRUE(still_waiting(ninth)) << "2 CPUs of 25% runs are full";
  s.record(3, scheduled_record(n, 3));
  EXPECT_EQ(ninth.get(), 8u);
}

TEST(run_scheduler, declared_schedule_runs_what_computes_alone_and_lets_waiting_runs_go_first) {
  campaign_options o = declared(3, 2, 25, 300);  // runs a b a b a b; b declares more than the machine
  run_numbering n(o);
  EXPECT_EQ(n.cpu_of(1), 200u);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  ASSERT_EQ(s.claim(), 0u);
  // Run 1 needs both CPUs while run 0 holds a quarter of one: the runs after it that fit go
  // first, rather than the machine draining for it.
  ASSERT_EQ(s.claim(), 2u);
  ASSERT_EQ(s.claim(), 4u);
  auto computing = claim_later(s);
  EXPECT_TRUE(still_waiting(computing)) << "no run left that fits beside runs 0, 2 and 4";
  s.record(0, scheduled_record(n, 0));
  s.record(4, scheduled_record(n, 4));
  EXPECT_TRUE(still_waiting(computing)) << "run 2 still holds a quarter";
  s.record(2, scheduled_record(n, 2));
  EXPECT_EQ(computing.get(), 1u);
  auto next = claim_later(s);
  EXPECT_TRUE(still_waiting(next)) << "run 3 waits for run 1, which holds every CPU";
  s.record(1, scheduled_record(n, 1));
  EXPECT_EQ(next.get(), 3u);
  s.record(3, scheduled_record(n, 3));
  EXPECT_EQ(s.claim(), 5u);
  s.record(5, scheduled_record(n, 5));
  EXPECT_EQ(s.claim(), std::nullopt);
  EXPECT_EQ(s.performed(), 6u);
}

TEST(run_scheduler, declared_schedule_overtakes_only_within_a_window) {
  // 1 job: 4 x 25% fill it, and 4 x jobs is 4; b (100%) waits at run 1. Runs past it are
  // looked at only 4 deep, so a long row of small runs cannot keep it waiting for ever.
  campaign_options o = declared(6, 1, 25, 100);
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  EXPECT_EQ(s.most_in_flight(), 4u);
  ASSERT_EQ(s.claim(), 0u);
  ASSERT_EQ(s.claim(), 2u);
  ASSERT_EQ(s.claim(), 4u);
  ASSERT_EQ(s.claim(), 6u);
  s.record(0, scheduled_record(n, 0));
  // Runs 2, 4 and 6 are claimed; the window past run 1 (2 .. 9) holds 8, which fits.
  ASSERT_EQ(s.claim(), 8u);
  s.record(2, scheduled_record(n, 2));
  auto later = claim_later(s);
  // 10 is past the window (3, 5, 7, 9 are b's, counted; 10 is the fifth candidate): not taken.
  EXPECT_TRUE(still_waiting(later));
  s.record(4, scheduled_record(n, 4));
  s.record(6, scheduled_record(n, 6));
  s.record(8, scheduled_record(n, 8));
  EXPECT_EQ(later.get(), 1u);
}

TEST(run_scheduler, declared_schedule_still_bounds_device_contexts_by_jobs) {
  campaign_options o = declared(2, 2, 25, 25, /*devices=*/true, /*b_slots=*/2);
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  ASSERT_EQ(s.claim(), 0u);
  ASSERT_EQ(s.claim(), 2u);  // one context beside run 0's: it fits, run 1 does not
  auto wide = claim_later(s);
  EXPECT_TRUE(still_waiting(wide)) << "run 1's two contexts and runs 0 and 2's are more than jobs";
  s.record(0, scheduled_record(n, 0));
  EXPECT_TRUE(still_waiting(wide)) << "run 2 still holds a context";
  s.record(2, scheduled_record(n, 2));
  EXPECT_EQ(wide.get(), 1u);
}

TEST(run_scheduler, declared_schedule_gives_a_command_that_declares_nothing_one_job) {
  campaign_options o = declared(3, 2, 0, 0, /*devices=*/true);
  run_numbering n(o);
  EXPECT_EQ(n.cpu_of(0), 100u);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  EXPECT_EQ(s.most_in_flight(), 2u);
  ASSERT_EQ(s.claim(), 0u);
  ASSERT_EQ(s.claim(), 1u);
  auto third = claim_later(s);
  EXPECT_TRUE(still_waiting(third)) << "two commands at --jobs 2, as with slots";
  s.abandon(0);
  EXPECT_EQ(third.get(), 2u);
}

TEST(run_scheduler, a_checkpoint_waits_for_the_runs_in_flight_and_holds_new_runs_back) {
  campaign_options o = two_variants(3, 2);
  std::atomic<int> checkpoints{0};
  std::uint64_t seen_recorded = 0, seen_failures = 0;
  std::promise<void> entered, release;
  auto released = release.get_future().share();
  o.checkpoint_runs = 2;
  o.checkpoint = [&](std::uint64_t recorded, std::uint64_t failures) {
    seen_recorded = recorded;
    seen_failures = failures;
    if (checkpoints++ == 0) {
      entered.set_value();
      released.wait();
    }
  };
  run_numbering n(o);
  campaign_tally tally(o);
  ASSERT_TRUE(tally.add_resumed(scheduled_record(n, 0, outcome::crash), n.variant_index(0)));
  run_scheduler s(o, n, std::move(tally), nullptr);
  ASSERT_EQ(s.claim(), 1u);
  ASSERT_EQ(s.claim(), 2u);
  s.record(1, scheduled_record(n, 1));
  ASSERT_EQ(s.claim(), 3u);  // one run recorded: no checkpoint due yet
  s.record(2, scheduled_record(n, 2, outcome::fail));
  auto held = claim_later(s);
  EXPECT_TRUE(still_waiting(held)) << "a checkpoint is due, and run 3 is in flight";
  EXPECT_EQ(checkpoints.load(), 0);
  s.abandon(3);  // none in flight: the waiting claim runs the checkpoint itself
  entered.get_future().wait();
  auto other = claim_later(s);
  EXPECT_TRUE(still_waiting(other)) << "no run starts while the checkpoint runs";
  release.set_value();
  const auto a = held.get(), b = other.get();
  EXPECT_EQ(checkpoints.load(), 1);
  EXPECT_EQ(seen_recorded, 3u);  // the resumed run and the two performed
  EXPECT_EQ(seen_failures, 2u);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(std::min(*a, *b), 4u);
  EXPECT_EQ(std::max(*a, *b), 5u);
}

TEST(run_scheduler, until_fail_stops_at_a_failure_recorded_or_resumed) {
  campaign_options o = two_variants(5, 1);
  o.until_fail = true;
  run_numbering n(o);
  {
    run_scheduler s(o, n, campaign_tally(o), nullptr);
    EXPECT_FALSE(s.stopped());
    ASSERT_EQ(s.claim(), 0u);
    s.record(0, scheduled_record(n, 0, outcome::hang));
    EXPECT_EQ(s.claim(), std::nullopt);
    EXPECT_TRUE(s.stopped_early());
    EXPECT_EQ(s.performed(), 1u);
  }
  campaign_tally tally(o);
  tally.add_resumed(scheduled_record(n, 4, outcome::fail), n.variant_index(4));
  run_scheduler s(o, n, std::move(tally), nullptr);
  EXPECT_TRUE(s.stopped());
  EXPECT_TRUE(s.stopped_early());
  EXPECT_EQ(s.claim(), std::nullopt);
}

TEST(run_scheduler, a_record_that_cannot_be_written_stops_it_keeping_the_first_error) {
  campaign_options o = two_variants(3, 2);
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  ASSERT_EQ(s.claim(), 0u);
  ASSERT_EQ(s.claim(), 1u);
  s.writing_failed(0, core::status(core::errc::io_error, "disk full"));
  s.writing_failed(1, core::status(core::errc::io_error, "again"));
  EXPECT_EQ(s.claim(), std::nullopt);
  EXPECT_EQ(s.write_error().message(), "disk full");
  EXPECT_FALSE(s.stopped_early());
  EXPECT_EQ(s.performed(), 0u);
}

TEST(run_scheduler, the_cancel_and_the_deadline_stop_it) {
  campaign_options o = two_variants(3, 1);
  std::atomic<bool> cancel{true};
  o.cancel = &cancel;
  run_numbering n(o);
  run_scheduler cancelled(o, n, campaign_tally(o), nullptr);
  EXPECT_EQ(cancelled.claim(), std::nullopt);
  EXPECT_FALSE(cancelled.deadline_reached());
  cancel = false;
  o.deadline = std::chrono::steady_clock::now();
  run_scheduler late(o, n, campaign_tally(o), nullptr);
  EXPECT_EQ(late.claim(), std::nullopt);
  EXPECT_TRUE(late.deadline_reached());
}

TEST(run_scheduler, keeps_the_files_of_the_first_passes_of_each_variant) {
  campaign_options o = two_variants(10, 1);
  o.keep_passes = 2;
  run_numbering n(o);
  campaign_tally tally(o);
  tally.add_resumed(scheduled_record(n, 0), n.variant_index(0));  // a pass of "a" with its log: kept
  run_scheduler s(o, n, std::move(tally), nullptr);
  EXPECT_TRUE(s.keep_pass(2));
  EXPECT_FALSE(s.keep_pass(4));
  EXPECT_TRUE(s.keep_pass(1));
  EXPECT_TRUE(s.keep_pass(3));
  EXPECT_FALSE(s.keep_pass(5));
  o.keep = keep_policy::none;
  run_scheduler none(o, n, campaign_tally(o), nullptr);
  EXPECT_FALSE(none.keep_pass(0));
  o.keep = keep_policy::all;
  run_scheduler all(o, n, campaign_tally(o), nullptr);
  for (std::uint64_t k = 0; k < 10; ++k) EXPECT_TRUE(all.keep_pass(k));
}

TEST(run_scheduler, summaries_count_resumed_and_performed_runs) {
  campaign_options o = two_variants(2, 1);
  run_numbering n(o);
  campaign_tally tally(o);
  tally.add_resumed(scheduled_record(n, 0, outcome::crash), n.variant_index(0));
  run_scheduler s(o, n, std::move(tally), nullptr);
  while (auto k = s.claim()) s.record(*k, scheduled_record(n, *k));
  const auto sums = s.summaries();
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(sums[0].runs, 2u);
  EXPECT_EQ(sums[0].failures, 1u);
  EXPECT_EQ(sums[1].runs, 2u);
  EXPECT_EQ(s.performed(), 3u);
}

// Issue 38 (7): after --resume the progress line counted this invocation's runs and every
// failure, resumed ones included ("3/8 runs, 5 failures (166.7%)"). Both counts now take the
// resumed runs, so a rate is never above 100%.
TEST(run_scheduler, progress_after_a_resume_counts_runs_and_failures_alike) {
  campaign_options o = two_variants(5, 1);  // 10 runs
  run_numbering n(o);
  campaign_tally tally(o);
  for (std::uint64_t k : {0, 1}) tally.add_resumed(scheduled_record(n, k, outcome::crash), n.variant_index(k));
  std::ostringstream out;
  progress_meter meter(&out, false, n.total(), 0ms, tally.resumed());
  run_scheduler s(o, n, std::move(tally), &meter);
  while (auto k = s.claim()) s.record(*k, scheduled_record(n, *k, *k < 5 ? outcome::crash : outcome::pass));
  meter.finish();
  const std::string text = out.str();
  EXPECT_NE(text.find("faultline: 3/10 runs (2 resumed), 3 failures (100.0%)"), std::string::npos) << text;
  EXPECT_NE(text.find("faultline: 10/10 runs (2 resumed), 5 failures (50.0%)"), std::string::npos) << text;
  EXPECT_EQ(text.find("faultline: 1/"), std::string::npos) << text;  // this invocation's count alone
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::uint64_t done = 0, failures = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "faultline: %lu/10 runs (2 resumed), %lu", &done, &failures), 2) << line;
    EXPECT_LE(failures, done) << line;
  }
}

// A run's cgroup as run_cpu_use reads it: a folder holding cpu.stat, whose usage the test sets.
class fake_cgroup {
 public:
  fake_cgroup() : dir_(std::filesystem::temp_directory_path() / ("fl_sched_test." + std::to_string(::getpid()) + "." +
                                                                 std::to_string(next_++))) {
    std::filesystem::create_directories(dir_);
    set_usage(0);
  }
  ~fake_cgroup() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void set_usage(std::uint64_t usec) {
    std::ofstream(dir_ / "cpu.stat") << "usage_usec " << usec << "\nuser_usec 0\nsystem_usec 0\n";
  }
  std::string dir() const { return dir_.string(); }

 private:
  static inline std::atomic<int> next_{0};
  std::filesystem::path dir_;
};

TEST(run_scheduler, cpu_schedule_lends_the_slots_of_a_run_that_waits) {
  campaign_options o = two_variants(4, 1);
  o.schedule = schedule_kind::cpu;
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  EXPECT_EQ(s.most_in_flight(), cpu_overcommit);
  fake_cgroup cg;
  run_cpu_use use;
  ASSERT_EQ(s.claim(&use), 0u);
  use.attach(cg.dir());  // as run_once does once the program has started; it never uses a CPU
  auto next = claim_later(s);
  ASSERT_EQ(next.wait_for(20s), std::future_status::ready) << "a run measured idle did not lend its slot";
  EXPECT_EQ(next.get(), 1u);
  s.record(0, scheduled_record(n, 0));
  s.record(1, scheduled_record(n, 1));
}

TEST(run_scheduler, cpu_schedule_keeps_the_slots_of_a_run_that_computes) {
  campaign_options o = two_variants(4, 1);
  o.schedule = schedule_kind::cpu;
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  fake_cgroup cg;
  run_cpu_use use;
  ASSERT_EQ(s.claim(&use), 0u);
  use.attach(cg.dir());
  // The run uses a whole CPU: its usage grows as fast as the clock.
  std::atomic<bool> done{false};
  std::thread busy([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (!done) {
      cg.set_usage(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count()));
      std::this_thread::sleep_for(5ms);
    }
  });
  auto next = claim_later(s);
  EXPECT_EQ(next.wait_for(cpu_lend_after * 4), std::future_status::timeout) << "a computing run's slot was lent";
  done = true;
  busy.join();
  use.detach();  // the run ends: it counts its slot until it is recorded
  s.record(0, scheduled_record(n, 0));
  EXPECT_EQ(next.get(), 1u);
  s.record(1, scheduled_record(n, 1));
}

TEST(run_scheduler, cpu_schedule_never_lends_the_slots_of_a_run_it_cannot_measure) {
  campaign_options o = two_variants(4, 1);
  o.schedule = schedule_kind::cpu;
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  run_cpu_use use;  // never attached: no cgroup of its own
  ASSERT_EQ(s.claim(&use), 0u);
  auto next = claim_later(s);
  EXPECT_TRUE(still_waiting(next));
  EXPECT_EQ(next.wait_for(cpu_lend_after * 2), std::future_status::timeout);
  s.record(0, scheduled_record(n, 0));
  EXPECT_EQ(next.get(), 1u);
  s.record(1, scheduled_record(n, 1));
}

TEST(run_scheduler, cpu_schedule_has_at_most_overcommit_times_jobs_in_flight) {
  campaign_options o = two_variants(8, 1);
  o.schedule = schedule_kind::cpu;
  run_numbering n(o);
  run_scheduler s(o, n, campaign_tally(o), nullptr);
  std::vector<std::unique_ptr<fake_cgroup>> cgs;
  std::vector<std::unique_ptr<run_cpu_use>> uses;
  for (unsigned i = 0; i < cpu_overcommit; ++i) {
    cgs.push_back(std::make_unique<fake_cgroup>());
    uses.push_back(std::make_unique<run_cpu_use>());
    auto k = i == 0 ? s.claim(uses.back().get()) : std::optional<std::uint64_t>();
    if (i > 0) {
      auto f = std::async(std::launch::async, [&] { return s.claim(uses.back().get()); });
      ASSERT_EQ(f.wait_for(20s), std::future_status::ready);
      k = f.get();
    }
    ASSERT_EQ(k, i);
    uses.back()->attach(cgs.back()->dir());
  }
  auto over = claim_later(s);
  EXPECT_EQ(over.wait_for(cpu_lend_after * 3), std::future_status::timeout) << "more than overcommit x jobs in flight";
  s.record(0, scheduled_record(n, 0));
  ASSERT_EQ(over.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(over.get(), cpu_overcommit);
  for (unsigned i = 1; i <= cpu_overcommit; ++i) s.record(i, scheduled_record(n, i));
}

}  // namespace
}  // namespace faultline::harness::detail
