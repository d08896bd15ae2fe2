// `faultline soak` end to end, through the real binary and the stand-in scenario binary
// (harness/tests/fake_scenarios.cc, whose fake/behave fails when its drawn faults plant
// fake/fail-on-odd-seed and its seed is odd). The goal: a soak rotates scenarios and seeds with
// faults drawn from each scenario's space, exactly as its seed says; it survives being killed at
// random moments (resume loses no finished run and counts none twice); a full output disk stops it
// with a clear error and every recorded run intact; the checks between runs find what runs leave
// behind; bad input is refused. A soak of a user's command (`soak -- CMD`) runs it as exec does,
// a seed per run and its own spec on every run, and soak.json counts the runs recorded while the
// soak runs, a resume's earlier ones included. Method: read back results.jsonl and soak.json and
// recompute what each run must have been; kill with SIGKILL; fail writes with libfiu's POSIX
// preload; read soak.json from the test while a soak runs in the background.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/points/random.h"
#include "harness/campaign/fault_space.h"
#include "harness/results/results.h"
#include "harness/run/core_dump.h"
#include "harness/run/process.h"
#include "harness/run/runner.h"
#include "harness/tests/e2e_util.h"

namespace {

namespace fs = std::filesystem;
namespace harness = faultline::harness;
namespace testing_util = faultline::harness::testing;
using testing_util::eventually;
using testing_util::slurp;
using namespace std::chrono_literals;

const std::vector<std::string> counter_space = {"fake/noise=1..50%delay(1us..1ms)"};
const std::vector<std::string> behave_space = {"fake/fail-on-odd-seed=print", "fake/noise=1..3*delay(1us..10us)"};

std::map<std::string, std::string> fake_env() {
  return {{"FAULTLINE_SCENARIOS", testing_util::program("faultline-fake-scenarios").string()}};
}

std::vector<harness::run_record> records(const fs::path& dir) {
  auto r = harness::read_results(dir / "results.jsonl");
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().to_string());
  return r ? r->records : std::vector<harness::run_record>{};
}

nlohmann::json state_of(const fs::path& dir) {
  std::ifstream in(dir / "soak.json");
  return nlohmann::json::parse(in, nullptr, false);
}

// Starts `prefix... faultline soak ARGS` in the background, its output in OUT_DIR/../NAME.{out,err}.
struct background_soak {
  harness::child proc;
  fs::path out, err;
};

background_soak start_soak(const std::vector<std::string>& prefix, const std::vector<std::string>& args, const fs::path& logs,
                           const std::string& name) {
  harness::spawn_options o;
  o.argv = prefix;
  o.argv.push_back((testing_util::bin_dir() / "faultline").string());
  o.argv.push_back("soak");
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.envp = harness::current_environment();
  for (const auto& [k, v] : fake_env()) harness::set_env(o.envp, k, v);
  const fs::path out = logs / (name + ".out"), err = logs / (name + ".err");
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  o.stdout_fd = out_fd;
  o.stderr_fd = err_fd;
  auto c = harness::spawn(o);
  ::close(out_fd);
  ::close(err_fd);
  if (!c) throw std::runtime_error("cannot start faultline soak: " + c.error().message());
  return {std::move(*c), out, err};
}


// Every record is the run its number says it is (shard `part` of `shards`); numbers are unique.
void expect_runs_follow_the_seed(const std::vector<harness::run_record>& recs, std::uint64_t seed, std::uint64_t part = 0,
                                 std::uint64_t shards = 1) {
  std::set<std::uint64_t> seen;
  for (const auto& r : recs) {
    EXPECT_TRUE(seen.insert(r.run).second) << "run " << r.run << " recorded twice";
    EXPECT_EQ(r.run % shards, part) << "run " << r.run << " is not this shard's";
    const bool counter = (r.run / shards) % 2 == 0;
    EXPECT_EQ(r.name, counter ? "fake/counter" : "fake/behave") << "run " << r.run;
    EXPECT_EQ(r.seed, seed + r.run) << "run " << r.run;
    auto spec = harness::draw_faults(counter ? counter_space : behave_space, harness::fault_draw_seed(seed, r.run));
    ASSERT_TRUE(spec.has_value());
    EXPECT_EQ(r.faults, *spec) << "run " << r.run;
    const bool must_fail = !counter && r.faults.find("fake/fail-on-odd-seed") != std::string::npos && r.seed % 2 == 1;
    EXPECT_EQ(r.result, must_fail ? harness::outcome::fail : harness::outcome::pass) << "run " << r.run << " faults " << r.faults;
  }
}

class soak_e2e : public ::testing::Test {
 protected:
  testing_util::scratch_dir dir_;
  fs::path out() const { return dir_.path() / "soak"; }
};

TEST_F(soak_e2e, rotates_scenarios_and_seeds_with_faults_drawn_from_each_space_and_keeps_a_report) {
  auto r = testing_util::run_faultline({"soak", "--budget", "2s", "--out", out().string(), "--seed", "40", "--jobs", "2",
                                        "--report-every", "500ms"},
                                       fake_env());
  EXPECT_EQ(r.status, 1) << "fake/behave fails on odd seeds with fail-on-odd-seed drawn\n" << r.err;
  const auto recs = records(out());
  ASSERT_GT(recs.size(), 20u) << r.err;
  expect_runs_follow_the_seed(recs, 40);
  std::set<std::string> specs;
  std::uint64_t failures = 0;
  for (const auto& rec : recs) {
    specs.insert(rec.faults);
    failures += rec.result != harness::outcome::pass;
  }
  EXPECT_GT(specs.size(), 10u) << "the drawn faults barely vary";
  ASSERT_GT(failures, 0u);

  auto state = state_of(out());
  ASSERT_FALSE(state.is_discarded());
  EXPECT_EQ(state["seed"], 40);
  EXPECT_EQ(state["runs"], recs.size());
  EXPECT_EQ(state["failures"], failures);
  EXPECT_TRUE(state["finished"].get<bool>());
  EXPECT_GE(state["spent_ms"].get<std::int64_t>(), 2000);
  EXPECT_TRUE(state["harness_leaks"].empty()) << state["harness_leaks"].dump();

  EXPECT_NE(slurp(out() / "report.md").find("fake/behave"), std::string::npos);
  EXPECT_GT(fs::file_size(out() / "report.html"), 1000u);
  EXPECT_NE(r.err.find("report: "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("repro: faultline run fake/behave --seed "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--faults fake/fail-on-odd-seed=print"), std::string::npos) << r.out;
  // The stand-in scenarios reach no fault point (they only print their spec): each point of
  // their spaces is named as never reached.
  for (const char* p : {"fake/counter: fake/noise", "fake/behave: fake/fail-on-odd-seed", "fake/behave: fake/noise"})
    EXPECT_NE(r.out.find(std::string("fault-space point never reached: ") + p), std::string::npos) << p << "\n" << r.out;

  // Pruned like a campaign: the failures' logs and the first 3 passes of each scenario.
  std::size_t logs = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(out() / "logs")) ++logs;
  EXPECT_EQ(logs, failures + 6);
}

TEST_F(soak_e2e, killed_at_random_moments_it_resumes_without_losing_or_repeating_a_run) {
  // The kill moments come from a fixed seed: a failure here replays.
  faultline::faults::generator when(2026);
  // Seed 10: fake/behave runs (odd run numbers) get odd seeds, so some of them fail.
  const std::vector<std::string> args = {"--budget", "5s", "--out", out().string(), "--seed", "10", "--jobs", "2"};
  for (int round = 0; round < 5; ++round) {
    // --resume once the soak is there (a round killed before it wrote its state left nothing):
    // on an --out without one, --resume is refused.
    auto round_args = args;
    if (fs::exists(out() / "soak.json")) round_args.push_back("--resume");
    auto s = start_soak({}, round_args, dir_.path(), "round" + std::to_string(round));
    std::this_thread::sleep_for(std::chrono::milliseconds(when.between(150, 700)));
    ASSERT_TRUE(s.proc.signal(SIGKILL));
    const int status = s.proc.reap();
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round << " ended by itself: " << slurp(s.err);
  }
  const auto before = records(out()).size();
  auto last = testing_util::run_faultline({"soak", "--budget", "5s", "--out", out().string(), "--jobs", "2", "--resume"}, fake_env());
  EXPECT_EQ(last.status, 1) << last.err;
  EXPECT_NE(last.err.find(" runs were recorded before this resume"), std::string::npos) << last.err;
  const auto recs = records(out());
  EXPECT_GT(recs.size(), before);
  expect_runs_follow_the_seed(recs, 10);  // also: no run counted twice
  std::set<std::uint64_t> numbers;
  for (const auto& r : recs) numbers.insert(r.run);
  ASSERT_FALSE(numbers.empty());
  EXPECT_EQ(*numbers.rbegin() + 1, numbers.size()) << "a run below the highest recorded one is missing: it was lost";
  auto state = state_of(out());
  EXPECT_EQ(state["seed"], 10) << "the resume kept the soak's own seed";
  EXPECT_EQ(state["runs"], recs.size());
  EXPECT_TRUE(state["finished"].get<bool>());
  EXPECT_GE(state["spent_ms"].get<std::int64_t>(), 5000);
}

TEST_F(soak_e2e, a_full_disk_stops_it_with_a_clear_error_and_every_recorded_run_intact) {
  // libfiu's POSIX preload fails the harness's write(2) calls with ENOSPC once fiu-ctrl enables
  // it; glibc's stdio writes through an internal call, so the error message still gets out.
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer: its runtime must come first among the loaded libraries, which the POSIX "
                  "preload would precede";
#endif
  if (::system("command -v fiu-run >/dev/null && command -v fiu-ctrl >/dev/null") != 0)
    GTEST_SKIP() << "fiu-run / fiu-ctrl (Debian package fiu-utils) are not installed";
  auto s = start_soak({"fiu-run", "-x"}, {"--budget", "60s", "--out", out().string(), "--seed", "3"}, dir_.path(), "full");
  ASSERT_TRUE(eventually([&] { return fs::exists(out() / "results.jsonl") && testing_util::read_lines(out() / "results.jsonl").size() >= 10; }, 30s));
  const std::string enable = "fiu-ctrl -c 'enable name=posix/io/rw/write,failinfo=28' " + std::to_string(s.proc.pid());
  ASSERT_EQ(::system(enable.c_str()), 0) << enable;
  ASSERT_TRUE(eventually([&] { return !testing_util::alive(s.proc.pid()); }, 30s)) << "the soak went on with a full disk";
  const int status = s.proc.reap();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = slurp(s.err);
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_NE(err.find("results.jsonl"), std::string::npos) << err;
  EXPECT_NE(err.find("intact"), std::string::npos) << err;

  auto file = harness::read_results(out() / "results.jsonl");
  ASSERT_TRUE(file.has_value()) << file.error().to_string();
  EXPECT_FALSE(file->truncated_tail) << "a torn line was left";
  EXPECT_GE(file->records.size(), 10u);
  EXPECT_NE(err.find("the " + std::to_string(file->records.size()) + " runs recorded"), std::string::npos) << err;
  expect_runs_follow_the_seed(file->records, 3);
  EXPECT_FALSE(state_of(out()).is_discarded()) << "soak.json was damaged";

  // With room again, the soak resumes where it stopped.
  auto resumed = testing_util::run_faultline({"soak", "--budget", "1s", "--out", out().string(), "--resume"}, fake_env());
  EXPECT_NE(resumed.status, 2) << resumed.err;
  const auto after = records(out());
  EXPECT_GE(after.size(), file->records.size());
  expect_runs_follow_the_seed(after, 3);
}

TEST_F(soak_e2e, the_checks_between_runs_find_and_remove_what_runs_leave_behind) {
  auto r = testing_util::run_faultline({"soak", "fake/counter", "--budget", "1s", "--out", out().string(), "--seed", "1", "--jobs",
                                        "2", "--env", "FAKE_LEAK_SHM=1"},
                                       fake_env());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("harness leak: /dev/shm/faultline-fake-leak-"), std::string::npos) << r.out;
  for (const auto& name : harness::faultline_shm_entries())
    EXPECT_EQ(name.rfind("faultline-fake-leak-", 0), std::string::npos) << "/dev/shm/" << name << " was left";
  auto state = state_of(out());
  EXPECT_FALSE(state["harness_leaks"].empty());
}

TEST_F(soak_e2e, a_resume_with_another_seed_or_scenario_list_is_refused_and_changes_nothing) {
  auto first = testing_util::run_faultline({"soak", "--budget", "300ms", "--out", out().string(), "--seed", "1"}, fake_env());
  ASSERT_NE(first.status, 2) << first.err;
  const auto before = slurp(out() / "results.jsonl");
  auto seed = testing_util::run_faultline({"soak", "--budget", "1s", "--out", out().string(), "--seed", "2", "--resume"}, fake_env());
  EXPECT_EQ(seed.status, 2);
  EXPECT_NE(seed.err.find("started with --seed 1"), std::string::npos) << seed.err;
  auto list = testing_util::run_faultline({"soak", "fake/counter", "--budget", "1s", "--out", out().string(), "--resume"}, fake_env());
  EXPECT_EQ(list.status, 2);
  EXPECT_NE(list.err.find("another list of scenarios"), std::string::npos) << list.err;
  EXPECT_EQ(slurp(out() / "results.jsonl"), before);

  const fs::path campaign = dir_.path() / "campaign";
  ASSERT_NE(testing_util::run_faultline({"run", "fake/counter", "--out", campaign.string()}, fake_env()).status, 2);
  auto not_soak = testing_util::run_faultline({"soak", "--budget", "1s", "--out", campaign.string(), "--resume"}, fake_env());
  EXPECT_EQ(not_soak.status, 2);
  EXPECT_NE(not_soak.err.find("no soak.json"), std::string::npos) << not_soak.err;
  // Issue 38 (11): an exec folder was called "a campaign of `run`".
  const fs::path exec_dir = dir_.path() / "exec";
  ASSERT_EQ(testing_util::run_faultline({"exec", "--out", exec_dir.string(), "--", "/bin/true"}).status, 0);
  auto exec_not_soak = testing_util::run_faultline({"soak", "--budget", "1s", "--out", exec_dir.string(), "--resume", "--", "/bin/true"});
  EXPECT_EQ(exec_not_soak.status, 2);
  EXPECT_NE(exec_not_soak.err.find("a campaign's (of run, exec or verify), not a soak's"), std::string::npos) << exec_not_soak.err;
  EXPECT_EQ(exec_not_soak.err.find("a campaign of `run`"), std::string::npos) << exec_not_soak.err;
}

TEST_F(soak_e2e, a_soak_in_out_is_never_replaced_unasked) {
  auto first = testing_util::run_faultline({"soak", "--budget", "300ms", "--out", out().string(), "--seed", "1"}, fake_env());
  ASSERT_NE(first.status, 2) << first.err;
  const auto before = slurp(out() / "results.jsonl");
  const auto runs = testing_util::read_lines(out() / "results.jsonl").size();
  ASSERT_GT(runs, 0u);
  auto again = testing_util::run_faultline({"soak", "--budget", "300ms", "--out", out().string(), "--seed", "2"}, fake_env());
  EXPECT_EQ(again.status, 2) << again.err;
  EXPECT_NE(again.err.find(out().string() + " holds a soak (" + std::to_string(runs) + " runs recorded: "), std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("--resume continues it, --replace starts a new one"), std::string::npos) << again.err;
  EXPECT_EQ(slurp(out() / "results.jsonl"), before);
  EXPECT_EQ(state_of(out())["seed"], 1);

  auto replaced = testing_util::run_faultline({"soak", "--budget", "300ms", "--out", out().string(), "--seed", "2", "--replace"},
                                              fake_env());
  EXPECT_NE(replaced.status, 2) << replaced.err;
  EXPECT_NE(replaced.err.find("replaced the earlier soak"), std::string::npos) << replaced.err;
  expect_runs_follow_the_seed(records(out()), 2);
  EXPECT_EQ(state_of(out())["seed"], 2);

  auto nothing = testing_util::run_faultline({"soak", "--budget", "1s", "--out", (out() / "none").string(), "--resume"}, fake_env());
  EXPECT_EQ(nothing.status, 2) << nothing.err;
  EXPECT_NE(nothing.err.find("holds no campaign or soak to continue"), std::string::npos) << nothing.err;
  EXPECT_FALSE(fs::exists(out() / "none"));
}

TEST_F(soak_e2e, each_shard_rotates_through_every_scenario) {
  for (const char* part : {"0/2", "1/2"}) {
    const fs::path dir = out() / (std::string("shard") + part[0]);
    auto r = testing_util::run_faultline({"soak", "--budget", "700ms", "--out", dir.string(), "--seed", "5", "--shard", part}, fake_env());
    EXPECT_NE(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(std::string("shard ") + part), std::string::npos) << r.err;
    const auto recs = records(dir);
    ASSERT_GT(recs.size(), 4u);
    expect_runs_follow_the_seed(recs, 5, static_cast<std::uint64_t>(part[0] - '0'), 2);
    std::set<std::string> names;
    for (const auto& rec : recs) names.insert(rec.name);
    EXPECT_EQ(names.size(), 2u) << "shard " << part << " saw only some scenarios";
  }
}

TEST_F(soak_e2e, bad_arguments_are_usage_errors) {
  struct bad_case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<bad_case> cases = {
      {{"soak", "--out", out().string()}, "--budget is required"},
      {{"soak", "--budget", "0s", "--out", out().string()}, "--budget must be positive"},
      {{"soak", "--budget", "eight hours", "--out", out().string()}, "--budget"},
      {{"soak", "--budget", "1s", "--report-every", "0s", "--out", out().string()}, "--report-every must be positive"},
      {{"soak", "--budget", "1s", "--timeout-scale", "-1", "--out", out().string()}, "--timeout-scale"},
      {{"soak", "no/such-scenario", "--budget", "1s", "--out", out().string()}, "no/such-scenario"},
      {{"soak", "--budget", "1s", "--shard", "3/2", "--out", out().string()}, "shard"},
  };
  for (const auto& c : cases) {
    auto r = testing_util::run_faultline(c.args, fake_env());
    EXPECT_EQ(r.status, 2) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(out() / "results.jsonl")) << "a refused soak ran something";
}

// --- soak -- COMMAND --------------------------------------------------------------------------

// A command that fails on odd seeds: which runs fail says which seed each run had.
const std::vector<std::string> odd_seed_fails = {"/bin/sh", "-c", "exit $((FAULTLINE_SEED % 2))"};

TEST_F(soak_e2e, a_command_soak_runs_the_command_with_a_seed_per_run_and_its_faults_and_replays_its_failures) {
  std::vector<std::string> args = {"soak", "--budget", "2s", "--out", out().string(), "--seed", "4", "--faults", "process/start=print", "--"};
  args.insert(args.end(), odd_seed_fails.begin(), odd_seed_fails.end());
  auto r = testing_util::run_faultline(args);
  EXPECT_EQ(r.status, 1) << "the odd seeds' runs fail\n" << r.err;
  const auto recs = records(out());
  ASSERT_GE(recs.size(), 2u) << r.err;
  std::uint64_t failures = 0;
  std::set<std::uint64_t> numbers;
  for (const auto& rec : recs) {
    EXPECT_TRUE(numbers.insert(rec.run).second) << "run " << rec.run << " recorded twice";
    EXPECT_EQ(rec.name, "sh");
    EXPECT_EQ(rec.command, odd_seed_fails);
    EXPECT_EQ(rec.seed, 4 + rec.run) << "run " << rec.run;
    EXPECT_EQ(rec.faults, "process/start=print") << "run " << rec.run;
    // The spec reached the program through the agent, as under exec.
    EXPECT_NE(std::find(rec.points_reached.begin(), rec.points_reached.end(), "process/start"), rec.points_reached.end()) << "run " << rec.run;
    EXPECT_EQ(rec.result, rec.seed % 2 ? harness::outcome::fail : harness::outcome::pass) << "run " << rec.run;
    failures += rec.result != harness::outcome::pass;
  }
  EXPECT_EQ(*numbers.rbegin() + 1, numbers.size()) << "a run is missing";

  auto state = state_of(out());
  ASSERT_FALSE(state.is_discarded());
  EXPECT_EQ(state["runs"], recs.size());
  EXPECT_EQ(state["failures"], failures);
  EXPECT_EQ(state["command"]["argv"], odd_seed_fails);
  EXPECT_EQ(state["command"]["faults"], "process/start=print");
  EXPECT_TRUE(state["finished"].get<bool>());
  EXPECT_NE(r.err.find("soak of `/bin/sh -c"), std::string::npos) << r.err;
  // The first failure (run 1, seed 5) replays with exec, seed and faults included.
  const std::string repro = "repro: faultline exec --seed 5 --repeat 1 --out faultline-repro --replace --faults process/start=print -- /bin/sh -c";
  EXPECT_NE(r.out.find(repro), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out() / "logs" / "sh.s5.log"));
  EXPECT_TRUE(state["harness_leaks"].empty()) << state["harness_leaks"].dump();
}

// The soak's checkpoint comes every 4 runs (one job) and writes soak.json when a second has passed
// since the last write: runs of at least 300 ms make every checkpoint write it, after exactly 4,
// 8, ... runs of this invocation.
TEST_F(soak_e2e, soak_json_counts_the_runs_recorded_while_a_command_soak_runs_and_across_a_resume) {
  const std::vector<std::string> args = {"--budget", "120s", "--out", out().string(), "--seed", "1", "--",
                                         testing_util::program("fl_testdata_pass").string(), "--sleep-ms", "300"};
  auto first = start_soak({}, args, dir_.path(), "first");
  nlohmann::json seen;
  ASSERT_TRUE(eventually([&] {
    seen = state_of(out());
    return !seen.is_discarded() && seen.value("runs", 0) >= 8;
  }, 120s)) << "soak.json never counted 8 runs while the soak ran: " << seen.dump() << "\n" << slurp(first.err);
  EXPECT_FALSE(seen["finished"].get<bool>());
  EXPECT_LE(seen["runs"].get<std::size_t>(), records(out()).size()) << "soak.json counts runs results.jsonl does not hold";
  ASSERT_TRUE(first.proc.signal(SIGKILL));
  (void)first.proc.reap();
  auto file = harness::read_results(out() / "results.jsonl");
  ASSERT_TRUE(file.has_value()) << file.error().to_string();
  const std::size_t before = file->records.size();  // a torn last line is not a run: the resume performs it again
  ASSERT_GE(before, 8u);
  const std::string last_update = state_of(out()).value("updated", "");

  // The resumed soak's first writes (a new "updated") count the runs it found and the 4, 8, ...
  // it performed since: counting only its own would say 4 (fewer than the 8 found).
  auto resumed_args = args;
  resumed_args.insert(resumed_args.begin(), "--resume");
  auto second = start_soak({}, resumed_args, dir_.path(), "second");
  ASSERT_TRUE(eventually([&] {
    seen = state_of(out());
    const std::string updated = seen.is_discarded() ? "" : seen.value("updated", "");
    return !updated.empty() && updated != last_update;
  }, 120s)) << "the resumed soak never rewrote soak.json: " << seen.dump() << "\n" << slurp(second.err);
  const auto runs = seen["runs"].get<std::size_t>();
  EXPECT_GT(runs, before) << "soak.json counts only the resumed soak's own runs";
  EXPECT_EQ((runs - before) % 4, 0u) << "soak.json counts " << runs << " runs: " << before
                                     << " found by the resume and a multiple of 4 performed since, each once";
  EXPECT_LE(runs, records(out()).size());
  EXPECT_EQ(seen["failures"], 0);
  EXPECT_FALSE(seen["finished"].get<bool>());
  ASSERT_TRUE(second.proc.signal(SIGKILL));
  (void)second.proc.reap();
  const auto recs = records(out());
  std::set<std::uint64_t> numbers;
  for (const auto& rec : recs) EXPECT_TRUE(numbers.insert(rec.run).second) << "run " << rec.run << " recorded twice";
  ASSERT_FALSE(numbers.empty());
  EXPECT_EQ(*numbers.rbegin() + 1, numbers.size()) << "a run below the highest recorded one is missing: it was lost";
}

// Issue 38: a death test (a child crashes on purpose, the program passes) soaked at --jobs 2 exited
// 1 with every run passed: the core keeper's descriptors of the children's cores, never let go,
// were counted as the harness's leaks. The harness's own held descriptors are not leaks, each run
// takes its cores away, and none stays in the directory.
TEST_F(soak_e2e, a_command_soak_whose_child_crashes_on_purpose_passes_without_a_harness_leak) {
  const fs::path cwd = dir_.path() / "work";
  fs::create_directories(cwd);
  if (auto why = harness::enable_core_capture(); !why.empty()) GTEST_SKIP() << "no core capture here: " << why;
  if (!harness::core_home(cwd)) GTEST_SKIP() << "core_pattern does not name a file relative to the crashing process";
  auto s = start_soak({"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd.string()},
                      {"--budget", "4s", "--jobs", "2", "--out", out().string(), "--", testing_util::program("fl_testdata_child_crash").string()},
                      dir_.path(), "soak");
  ASSERT_TRUE(s.proc.wait_exit_for(std::chrono::seconds(120))) << slurp(s.err);
  const int status = s.proc.reap();
  ASSERT_TRUE(WIFEXITED(status)) << slurp(s.err);
  EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(s.err);
  const auto recs = records(out());
  EXPECT_GE(recs.size(), 16u) << "the leak check comes every 8 runs at --jobs 2";
  for (const auto& rec : recs) EXPECT_EQ(rec.result, harness::outcome::pass) << "run " << rec.run;
  auto state = state_of(out());
  ASSERT_FALSE(state.is_discarded());
  EXPECT_TRUE(state["harness_leaks"].empty()) << state["harness_leaks"].dump();
  EXPECT_EQ(slurp(s.err).find("harness leak"), std::string::npos) << slurp(s.err);
  EXPECT_EQ(testing_util::core_files_under(dir_.path()), std::vector<fs::path>{}) << "cores left behind";
}

TEST_F(soak_e2e, soak_json_counts_the_runs_recorded_while_a_catalog_soak_runs) {
  auto s = start_soak({}, {"--budget", "120s", "--out", out().string(), "--seed", "2"}, dir_.path(), "catalog");
  nlohmann::json seen;
  ASSERT_TRUE(eventually([&] {
    seen = state_of(out());
    return !seen.is_discarded() && seen.value("runs", 0) > 0;
  }, 120s)) << "soak.json never counted a run while the soak ran: " << seen.dump() << "\n" << slurp(s.err);
  EXPECT_FALSE(seen["finished"].get<bool>());
  EXPECT_LE(seen["runs"].get<std::size_t>(), records(out()).size());
  EXPECT_LE(seen["failures"].get<std::size_t>(), seen["runs"].get<std::size_t>());
  ASSERT_TRUE(s.proc.signal(SIGKILL));
  (void)s.proc.reap();
}

TEST_F(soak_e2e, a_bad_command_soak_is_a_usage_error_that_leaves_the_soak_in_out_untouched) {
  auto first = testing_util::run_faultline({"soak", "--budget", "300ms", "--out", out().string(), "--seed", "1", "--", "/bin/true"});
  ASSERT_NE(first.status, 2) << first.err;
  const auto results = slurp(out() / "results.jsonl");
  const auto state = slurp(out() / "soak.json");
  ASSERT_FALSE(results.empty());
  struct bad_case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string missing = (dir_.path() / "no-such-program").string();
  const std::vector<bad_case> cases = {
      {{"--replace", "--", missing}, "the command cannot be run: " + missing},
      {{"--resume", "--", missing}, "the command cannot be run: " + missing},
      {{"fake/counter", "--replace", "--", "/bin/true"}, "scenario names and a command"},
      {{"--replace", "--"}, "no command after --"},
      {{"--replace", "--faults", "fake/noise=print"}, "--faults is for a command soak"},
      {{"--replace", "--timeout-scale", "2", "--", "/bin/true"}, "--timeout-scale"},
      {{"--replace", "--faults", "exit/bogus=kill", "--", "/bin/true"}, "exit/bogus"},
      {{"--resume", "--", "/bin/false"}, "another command"},
      {{"--resume"}, "not scenarios"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"soak", "--budget", "1s", "--out", out().string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = testing_util::run_faultline(args, fake_env());
    EXPECT_EQ(r.status, 2) << c.says << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(slurp(out() / "results.jsonl"), results) << c.says;
    EXPECT_EQ(slurp(out() / "soak.json"), state) << c.says;
  }
}

}  // namespace
