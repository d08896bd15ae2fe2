// A campaign's output and bookkeeping, end to end: a passing run leaves only its line in
// results.jsonl (failures and the first passes of each variant keep their files, as --keep
// says); --jobs is bounded and a thread that cannot be created slows the campaign down instead
// of aborting it; --resume continues a campaign, counting every run exactly once, after a torn
// last line and never across options that renumber the runs; and the summary names the
// fault-spec points that no run reached. Method: the real `faultline` binary (and run_campaign
// in-process where a limit must be imposed) against the harness's test programs and small shell
// commands whose behaviour follows their FAULTLINE_SEED; every check reads the output directory.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/campaign/campaign.h"
#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/results/results.h"
#include "harness/run/process.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::slurp;
using testing::results_in;

namespace fs = std::filesystem;
using testing::program;
using testing::run_faultline;


// Every regular file under `dir`, relative to it.
std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), dir).string());
  return out;
}

// The entries directly in `dir`.
std::set<std::string> entries_of(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}


nlohmann::json only_json_line(const std::string& text) {
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  return nlohmann::json::parse(text.substr(0, text.find('\n')));
}

// A command that passes on even seeds and fails (exit 1) on odd ones.
const std::vector<std::string> odd_seeds_fail = {"/bin/sh", "-c", "exit $((FAULTLINE_SEED % 2))"};

class campaign_e2e : public ::testing::Test {
 protected:
  fs::path out() const { return dir_.path() / "out"; }
  testing::scratch_dir dir_;
};

TEST_F(campaign_e2e, two_hundred_passing_runs_leave_only_the_first_three_passes_files) {
  auto r = run_faultline({"exec", "--repeat", "200", "--jobs", "2", "--seed", "1", "--out", out().string(), "--",
                          program("fl_testdata_pass").string()},
                         {}, std::chrono::seconds(280));
  ASSERT_EQ(r.status, 0) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 200u);
  std::set<std::string> expected = {"results.jsonl", "campaign.json"};
  std::set<std::string> kept_runs, kept_logs;
  for (const auto& rec : recs) {
    EXPECT_EQ(rec.result, outcome::pass);
    EXPECT_TRUE(rec.stacks.empty());
    if (rec.log.empty()) continue;
    EXPECT_EQ(rec.log, "logs/" + rec.run_id + ".log");
    kept_logs.insert(rec.run_id + ".log");
    kept_runs.insert(rec.run_id);
    expected.insert(rec.log);
  }
  EXPECT_EQ(kept_runs.size(), 3u);
  // The kept runs' directories hold whatever their runs wrote (the agent's files at least).
  for (const auto& id : kept_runs) {
    ASSERT_TRUE(fs::is_directory(out() / "runs" / id)) << id;
    for (const auto& f : files_under(out() / "runs" / id)) expected.insert("runs/" + id + "/" + f);
  }
  EXPECT_EQ(files_under(out()), expected);
  EXPECT_EQ(entries_of(out() / "runs"), kept_runs);
  EXPECT_EQ(entries_of(out() / "logs"), kept_logs);
  EXPECT_NE(r.out.find("fl_testdata_pass: 200 runs, pass 200;"), std::string::npos) << r.out;
}

TEST_F(campaign_e2e, keep_chooses_which_runs_keep_their_files_and_failures_always_do) {
  // Seeds 0..9: the five odd ones fail.
  std::map<std::string, std::size_t> kept_logs_of = {{"failures", 5 + 3}, {"none", 5}, {"all", 10}};
  for (const auto& [keep, kept] : kept_logs_of) {
    const fs::path o = out() / keep;
    std::vector<std::string> args = {"exec", "--no-preload", "--repeat", "10", "--seed", "0", "--keep", keep, "--out", o.string(), "--"};
    args.insert(args.end(), odd_seeds_fail.begin(), odd_seeds_fail.end());
    auto r = run_faultline(args);
    EXPECT_EQ(r.status, 1) << keep << ": " << r.err;
    auto recs = results_in(o);
    ASSERT_EQ(recs.size(), 10u) << keep;
    std::size_t logs = 0;
    for (const auto& rec : recs) {
      const bool has_log = !rec.log.empty();
      if (rec.result != outcome::pass) {
        EXPECT_TRUE(has_log) << keep << ": a failure always keeps its log";
      }
      EXPECT_EQ(fs::exists(out() / keep / "logs" / (rec.run_id + ".log")), has_log) << keep << " " << rec.run_id;
      EXPECT_EQ(fs::exists(out() / keep / "runs" / rec.run_id), has_log) << keep << " " << rec.run_id;
      logs += has_log;
    }
    EXPECT_EQ(logs, kept) << keep;
    // The summary still points at the first failure's log.
    EXPECT_NE(r.out.find((o / "logs" / "sh.s1.log").string()), std::string::npos) << r.out;
  }
}

TEST_F(campaign_e2e, absurd_jobs_are_a_usage_error_and_large_ones_are_clamped_to_the_runs) {
  auto absurd = run_faultline({"exec", "--jobs", "100000", "--out", out().string(), "--", "true"});
  EXPECT_EQ(absurd.status, 2) << absurd.err;
  EXPECT_NE(absurd.err.find("--jobs 100000: at most 1024 runs at once"), std::string::npos) << absurd.err;
  EXPECT_FALSE(fs::exists(out() / "results.jsonl"));

  auto many = run_faultline({"exec", "--no-preload", "--jobs", "1024", "--repeat", "3", "--out", out().string(), "--", "true"});
  EXPECT_EQ(many.status, 0) << many.err;
  EXPECT_EQ(results_in(out()).size(), 3u);
}

campaign_options true_campaign(const fs::path& out, std::uint64_t repeat, unsigned jobs) {
  campaign_options o;
  variant v;
  v.name = "true";
  v.argv = {"/bin/true"};
  v.timeout = std::chrono::seconds(30);
  o.variants = {v};
  o.repeat = repeat;
  o.jobs = jobs;
  o.out_dir = out;
  o.env = current_environment();
  return o;
}

TEST_F(campaign_e2e, no_more_threads_than_runs) {
  auto r = run_campaign(true_campaign(out(), 3, 50));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->jobs, 3u);
  EXPECT_EQ(r->performed, 3u);
  EXPECT_TRUE(r->warnings.empty());
  auto big = true_campaign(out(), 1, max_jobs + 1);
  auto refused = run_campaign(big);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.code(), core::errc::invalid_argument);
}

// A run that holds WIDTH slots writes its width into a file of the shared directory, sums the
// widths of every run then in flight (twice, 200 ms apart) into DIR/sums, and removes its file.
std::vector<std::string> slot_probe(const fs::path& dir, unsigned width) {
  const std::string d = dir.string();
  const std::string sum = "s=0; for f in " + d + "/in.*; do [ -e \"$f\" ] && s=$((s + $(cat \"$f\" 2>/dev/null || echo 0))); done; "
                          "echo $s >> " + d + "/sums; ";
  return {"/bin/sh", "-c",
          "echo " + std::to_string(width) + " > " + d + "/tmp.$$ && mv " + d + "/tmp.$$ " + d + "/in.$$; " + sum +
              "sleep 0.2; " + sum + "rm -f " + d + "/in.$$"};
}

TEST_F(campaign_e2e, runs_start_only_while_their_declared_slots_fit_in_jobs) {
  const fs::path probe = dir_.path() / "probe";
  fs::create_directories(probe);
  campaign_options o = true_campaign(out(), 6, 4);
  variant wide = o.variants[0], narrow = o.variants[0];
  wide.name = "wide";
  wide.argv = slot_probe(probe, 3);
  wide.slots = 3;
  narrow.name = "narrow";
  narrow.argv = slot_probe(probe, 1);
  o.variants = {wide, narrow};
  auto r = run_campaign(o);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->performed, 12u);
  std::ifstream in(probe / "sums");
  int most = 0, n = 0;
  for (int v; in >> v; ++n) most = std::max(most, v);
  EXPECT_EQ(n, 24);
  EXPECT_LE(most, 4) << "runs in flight held more slots than --jobs 4";
  EXPECT_GE(most, 2) << "no two runs ever overlapped: the slots serialised the campaign";
  // Every run passed: the probes themselves worked.
  for (const auto& rec : results_in(out())) EXPECT_EQ(rec.result, outcome::pass) << rec.run_id;
}

// Without declared slots the same probes overlap past 4: the test above can fail.
TEST_F(campaign_e2e, without_slots_the_probe_sees_runs_past_jobs) {
  const fs::path probe = dir_.path() / "probe";
  fs::create_directories(probe);
  campaign_options o = true_campaign(out(), 6, 4);
  o.variants[0].name = "wide";
  o.variants[0].argv = slot_probe(probe, 3);  // slots 1: the default
  auto r = run_campaign(o);
  ASSERT_TRUE(r) << r.error().message();
  std::ifstream in(probe / "sums");
  int most = 0;
  for (int v; in >> v;) most = std::max(most, v);
  EXPECT_GT(most, 4);
}

// Where core_pattern is "core" (this machine, many containers, the H100 of the GPU record), runs
// of one directory that crash together replace each other's core while it is being written; the
// keeper holds each core open as it appears (harness/run/core_keeper.h), so every crash keeps its
// stack and its name. Four runs with 192 MiB cores crash 100 ms apart, each while the one before
// is still being dumped: without the keeper only the last was named (1 of 4), with it all four.
TEST_F(campaign_e2e, runs_crashing_together_in_one_directory_each_keep_their_core) {
  auto pattern = detail::read_file("/proc/sys/kernel/core_pattern", 256);
  auto uses_pid = detail::read_file("/proc/sys/kernel/core_uses_pid", 16);
  if (!pattern || pattern->rfind("core", 0) != 0 || pattern->find('%') != std::string::npos ||
      (uses_pid && uses_pid->rfind("1", 0) == 0))
    GTEST_SKIP() << "core_pattern does not give every core of a directory one name here";
  const fs::path cwd = dir_.path() / "work";
  fs::create_directories(cwd);
  const auto at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch() + std::chrono::milliseconds(4000))
                         .count();
  auto r = run_tool({"/bin/sh", "-c",
                     "cd " + cwd.string() + " && exec " + (testing::bin_dir() / "faultline").string() +
                         " exec --repeat 4 --jobs 4 --seed 0 --crash-capture core --out " + out().string() + " -- " +
                         program("fl_testdata_crash_together").string() + " " + std::to_string(at_ms) + " 100"},
                    std::chrono::seconds(120), current_environment(), true);
  ASSERT_TRUE(r) << r.error().message();
  const auto records = results_in(out());
  ASSERT_EQ(records.size(), 4u) << r->errors;
  int named = 0;
  for (const auto& rec : records) {
    EXPECT_EQ(rec.result, outcome::crash) << rec.run_id;
    if (rec.signature.find("crash_together_frame") != std::string::npos) ++named;
  }
  EXPECT_EQ(named, 4) << r->errors;
  EXPECT_FALSE(fs::exists(cwd / "core")) << "a run's core was left in the directory";
}

// Makes every thread created from now on ask for a stack larger than the address space, so
// that pthread_create fails (EAGAIN) as it does at a process or memory limit; restores the
// default on destruction.
class threads_cannot_start {
 public:
  threads_cannot_start() {
    pthread_getattr_default_np(&saved_);
    pthread_attr_t huge;
    pthread_attr_init(&huge);
    pthread_attr_setstacksize(&huge, std::size_t{1} << 50);
    ok_ = pthread_setattr_default_np(&huge) == 0;
    pthread_attr_destroy(&huge);
  }
  ~threads_cannot_start() {
    pthread_setattr_default_np(&saved_);
    pthread_attr_destroy(&saved_);
  }
  bool ok() const { return ok_; }

 private:
  pthread_attr_t saved_;
  bool ok_ = false;
};

TEST_F(campaign_e2e, a_thread_that_cannot_start_is_a_warning_and_every_run_still_happens) {
  auto o = true_campaign(out(), 4, 4);
  std::vector<std::string> told;
  o.warn = [&](const std::string& w) { told.push_back(w); };
  core::result<campaign_result> r = core::status(core::errc::internal, "not run");
  {
    threads_cannot_start limit;
    ASSERT_TRUE(limit.ok());
    r = run_campaign(o);
  }
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->jobs, 1u);
  EXPECT_EQ(r->performed, 4u);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("could start only 1 of 4 runs at once"), std::string::npos) << r->warnings[0];
  EXPECT_EQ(told, r->warnings);
  EXPECT_EQ(results_in(out()).size(), 4u);
  ASSERT_EQ(r->summaries.size(), 1u);
  EXPECT_EQ(r->summaries[0].runs, 4u);
}

TEST_F(campaign_e2e, resume_after_a_torn_line_counts_every_run_once) {
  std::vector<std::string> cmd = {"--", program("fl_testdata_pass").string()};
  std::vector<std::string> first = {"exec", "--no-preload", "--repeat", "20", "--jobs", "2", "--seed", "3", "--out", out().string()};
  first.insert(first.end(), cmd.begin(), cmd.end());
  auto r = run_faultline(first);
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = testing::read_lines(out() / "results.jsonl");
  ASSERT_EQ(lines.size(), 20u);

  // The harness was SIGKILLed while writing the 8th line.
  std::string kept;
  for (int i = 0; i < 7; ++i) kept += lines[static_cast<std::size_t>(i)] + "\n";
  const std::string torn = lines[7].substr(0, lines[7].size() / 2);
  const auto torn_run = nlohmann::json::parse(lines[7])["run"].get<std::uint64_t>();
  std::ofstream(out() / "results.jsonl", std::ios::binary | std::ios::trunc) << kept << torn;

  // --seed and --repeat come from the campaign being resumed.
  std::vector<std::string> again = {"exec", "--no-preload", "--resume", "--jobs", "2", "--json", "--out", out().string()};
  again.insert(again.end(), cmd.begin(), cmd.end());
  auto resumed = run_faultline(again);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("the last line was torn"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("7 runs were already recorded, 13 performed now"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("seed 3, 20 runs"), std::string::npos) << resumed.err;

  const std::string text = slurp(out() / "results.jsonl");
  EXPECT_EQ(text.rfind(kept, 0), 0u) << "the recorded lines are left as they were";
  EXPECT_EQ(text.find(torn + "{"), std::string::npos) << "the torn line is gone";
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 20u);
  std::map<std::uint64_t, int> times;
  for (const auto& rec : recs) {
    ++times[rec.run];
    EXPECT_EQ(rec.seed, 3 + rec.run);
  }
  ASSERT_EQ(times.size(), 20u);
  for (const auto& [run, n] : times) EXPECT_EQ(n, 1) << "run " << run;
  EXPECT_EQ(times.count(torn_run), 1u);

  auto j = only_json_line(resumed.out);
  EXPECT_EQ(j["runs"], 20);
  EXPECT_EQ(j["outcomes"]["pass"], 20);
  EXPECT_EQ(j["seed"], 3);

  // Resuming a finished campaign performs nothing and still counts each run once.
  auto done = run_faultline(again);
  EXPECT_EQ(done.status, 0) << done.err;
  EXPECT_EQ(only_json_line(done.out)["runs"], 20);
  EXPECT_NE(done.err.find("20 runs were already recorded, 0 performed now"), std::string::npos) << done.err;
  EXPECT_EQ(results_in(out()).size(), 20u);
}

TEST_F(campaign_e2e, resume_refuses_a_campaign_with_other_options) {
  std::vector<std::string> base = {"exec", "--no-preload", "--out", out().string()};
  auto with = [&](std::vector<std::string> extra, std::vector<std::string> cmd = {"--", "true"}) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), cmd.begin(), cmd.end());
    return run_faultline(args);
  };
  ASSERT_EQ(with({"--repeat", "4", "--seed", "3"}).status, 0);
  const std::string before = slurp(out() / "results.jsonl");

  struct refusal {
    std::vector<std::string> extra, cmd;
    std::string needle;
  };
  const std::vector<refusal> refusals = {
      {{"--resume", "--repeat", "5", "--seed", "3"}, {"--", "true"}, "started with --repeat 4, this campaign has --repeat 5"},
      {{"--resume", "--seed", "9"}, {"--", "true"}, "started with --seed 3, this campaign has --seed 9"},
      {{"--resume", "--faults", "x/y=off"}, {"--", "true"}, "had --faults '', this campaign gives 'x/y=off'"},
      {{"--resume", "--shard", "1/2"}, {"--", "true"}, "it was shard 0/1, this campaign is shard 1/2"},
      {{"--resume"}, {"--", "false"}, "it ran 'true', this campaign runs 'false'"},
  };
  for (const auto& f : refusals) {
    auto r = with(f.extra, f.cmd);
    EXPECT_EQ(r.status, 2) << f.needle;
    EXPECT_NE(r.err.find("cannot resume " + out().string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(f.needle), std::string::npos) << r.err;
  }
  EXPECT_EQ(slurp(out() / "results.jsonl"), before) << "a refused resume writes nothing";

  // Records of another campaign (a results file put together by hand) are refused by run number.
  const auto other_dir = out().parent_path() / "other";
  ASSERT_EQ(run_faultline({"exec", "--no-preload", "--repeat", "1", "--seed", "50", "--out", other_dir.string(), "--", "true"}).status, 0);
  std::ofstream(out() / "results.jsonl", std::ios::app) << slurp(other_dir / "results.jsonl");
  auto mixed = run_faultline({"exec", "--no-preload", "--resume", "--out", out().string(), "--", "true"});
  EXPECT_EQ(mixed.status, 2);
  EXPECT_NE(mixed.err.find("line 5 records run 0 as 'true' seed 50"), std::string::npos) << mixed.err;
}

TEST_F(campaign_e2e, resume_of_a_results_file_with_garbage_inside_is_an_error_naming_the_line) {
  ASSERT_EQ(run_faultline({"exec", "--no-preload", "--repeat", "3", "--seed", "1", "--out", out().string(), "--", "true"}).status, 0);
  auto lines = testing::read_lines(out() / "results.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  std::ofstream(out() / "results.jsonl", std::ios::binary | std::ios::trunc)
      << lines[0] << "\n" << lines[1].substr(0, 40) << "\n" << lines[2] << "\n";
  auto r = run_faultline({"exec", "--no-preload", "--resume", "--out", out().string(), "--", "true"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find((out() / "results.jsonl").string() + " line 2 is malformed"), std::string::npos) << r.err;

  // Resuming a directory that has no campaign is a usage error, and creates nothing.
  auto fresh = run_faultline({"exec", "--no-preload", "--resume", "--repeat", "2", "--out", (out() / "new").string(), "--", "true"});
  EXPECT_EQ(fresh.status, 2) << fresh.err;
  EXPECT_NE(fresh.err.find((out() / "new").string() + " holds no campaign or soak to continue"), std::string::npos) << fresh.err;
  EXPECT_FALSE(fs::exists(out() / "new"));
}

// Another process on the machine (a test beside this one, another campaign) creates and holds a
// faultline entry in /dev/shm while a run runs: it is not the run's leak, and it is left alone.
TEST_F(campaign_e2e, shared_memory_created_and_held_by_another_process_is_not_a_leak) {
  const std::string path = "/dev/shm/faultline-e2e-held-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  const pid_t holder = ::fork();  // a child of this test, not of faultline: another process
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::usleep(300 * 1000);  // after faultline's first look, while the run sleeps
    if (::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600) < 0) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  auto r = run_faultline({"exec", "--no-preload", "--out", out().string(), "--", "sleep", "1"});
  const bool still_there = std::filesystem::exists(path);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::unlink(path.c_str());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(still_there) << "faultline removed another process's entry";
}

// The same at --jobs 2, where runs overlap and the campaign sweeps new entries once they have all
// ended: one that another process holds is not the runs' (found by faultline's own tests, hunted
// side by side: each campaign removed the other's rendezvous segments and exited 1 over 1000
// passing runs).
TEST_F(campaign_e2e, overlapping_runs_leave_shared_memory_another_process_holds_alone) {
  const std::string path = "/dev/shm/faultline-e2e-held-j2-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::usleep(300 * 1000);  // after faultline's first look, while the runs sleep
    if (::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600) < 0) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  auto r = run_faultline({"exec", "--no-preload", "--jobs", "2", "--repeat", "2", "--out", out().string(), "--",
                          "sleep", "1"});
  const bool still_there = std::filesystem::exists(path);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ::unlink(path.c_str());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("removed shared memory"), std::string::npos) << r.err;
  EXPECT_TRUE(still_there) << "faultline removed another process's entry";
}

// ... and one that the runs left, unheld, is still found and removed at --jobs 2.
TEST_F(campaign_e2e, overlapping_runs_that_leave_shared_memory_are_told_of_it) {
  const std::string name = "faultline-e2e-left-j2-" + std::to_string(::getpid());
  auto r = run_faultline({"exec", "--no-preload", "--jobs", "2", "--repeat", "2", "--out", out().string(), "--",
                          "sh", "-c", "touch /dev/shm/" + name + "-$FAULTLINE_SEED"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("removed shared memory left by the runs: /dev/shm/" + name), std::string::npos) << r.err;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind(name, 0), 0u) << e.path() << " was left";
}

TEST_F(campaign_e2e, an_out_holding_a_campaign_is_refused_unless_resume_or_replace_says_what_to_do) {
  ASSERT_EQ(run_faultline({"exec", "--no-preload", "--repeat", "2", "--keep", "all", "--out", out().string(), "--", "true"}).status, 0);
  const auto files = files_under(out());
  const auto lines = slurp(out() / "results.jsonl");
  // A new campaign, a typo among them (the issue's: a program that does not exist), each refused
  // before run 1 with the campaign there named, and nothing in OUT changed.
  const std::vector<std::vector<std::string>> refused = {
      {"exec", "--no-preload", "--repeat", "3", "--faults", "x/y=off", "--out", out().string(), "--", "true"},
      {"exec", "--no-preload", "--out", out().string(), "--", "false"},
  };
  for (const auto& args : refused) {
    auto r = run_faultline(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(out().string() + " holds a campaign (2 runs recorded: 'true'); --resume continues it, --replace starts "
                                          "a new one"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("seed "), std::string::npos) << "refused after the campaign's header\n" << r.err;
  }
  auto typo = run_faultline({"exec", "--out", out().string(), "--", "./nonexistent"});
  EXPECT_EQ(typo.status, 2) << typo.err;
  EXPECT_EQ(files_under(out()), files) << "a refused command touched the campaign";
  EXPECT_EQ(slurp(out() / "results.jsonl"), lines);

  auto both = run_faultline({"exec", "--no-preload", "--resume", "--replace", "--out", out().string(), "--", "true"});
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.err.find("--resume and --replace exclude each other"), std::string::npos) << both.err;

  // --replace starts a new campaign there, saying so.
  auto r = run_faultline({"exec", "--no-preload", "--repeat", "3", "--faults", "x/y=off", "--keep", "none", "--replace", "--out",
                          out().string(), "--", "true"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("replaced the earlier campaign in " + out().string()), std::string::npos) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& rec : recs) EXPECT_EQ(rec.faults, "x/y=off");
  EXPECT_TRUE(std::filesystem::is_empty(out() / "runs")) << "the earlier campaign's run directories are gone";
  // And it can be resumed as itself.
  auto again = run_faultline({"exec", "--no-preload", "--repeat", "3", "--faults", "x/y=off", "--resume", "--out",
                              out().string(), "--", "true"});
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(results_in(out()).size(), 3u);
}

// The library refuses as the command does: run_campaign itself never replaces a campaign unasked.
TEST_F(campaign_e2e, run_campaign_refuses_an_earlier_campaign_without_resume_or_replace) {
  campaign_options o = true_campaign(out(), 2, 1);
  ASSERT_TRUE(run_campaign(o));
  const auto lines = slurp(out() / "results.jsonl");
  o.seed = 5;
  auto refused = run_campaign(o);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.code(), core::errc::already_exists);
  EXPECT_NE(refused.error().message().find("holds a campaign (2 runs recorded: 'true')"), std::string::npos)
      << refused.error().message();
  EXPECT_EQ(slurp(out() / "results.jsonl"), lines);
  o.replace = true;
  auto replaced = run_campaign(o);
  ASSERT_TRUE(replaced) << replaced.error().message();
  for (const auto& rec : results_in(out())) EXPECT_GE(rec.seed, 5u);
  o.replace = false;
  o.resume = true;
  o.out_dir = out() / "nothing-here";
  auto nothing = run_campaign(o);
  ASSERT_FALSE(nothing);
  EXPECT_EQ(nothing.code(), core::errc::invalid_argument);
  EXPECT_NE(nothing.error().message().find("holds no campaign or soak to continue"), std::string::npos) << nothing.error().message();
}

// Writes points files as the fault engine and the agent do: the shell on every seed, and a
// child process on odd seeds only, so that one point is reached only by some runs.
const std::string points_script =
    "echo a/one > \"$FAULTLINE_RUN_DIR/points.$$\"; "
    "if [ $((FAULTLINE_SEED % 2)) = 1 ]; then sh -c 'echo \"b/*\" > \"$FAULTLINE_RUN_DIR/points.$$\"'; fi";

TEST_F(campaign_e2e, summary_names_the_fault_points_no_run_reached) {
  const std::string faults = "a/one=off;b/*=off;c/never=1*print";
  auto r = run_faultline({"exec", "--no-preload", "--keep", "none", "--repeat", "4", "--seed", "0", "--faults", faults, "--json",
                          "--out", out().string(), "--", "/bin/sh", "-c", points_script});
  EXPECT_EQ(r.status, 0) << r.err;
  auto j = only_json_line(r.out);
  EXPECT_EQ(j["points_never_reached"], nlohmann::json({"c/never"}));
  // Each run's line lists what it reached; read before its (pruned) directory went away.
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 4u);
  for (const auto& rec : recs) {
    EXPECT_TRUE(rec.log.empty());
    const std::vector<std::string> want =
        rec.seed % 2 ? std::vector<std::string>{"a/one", "b/*"} : std::vector<std::string>{"a/one"};
    EXPECT_EQ(rec.points_reached, want) << rec.seed;
  }

  auto human = run_faultline({"exec", "--no-preload", "--repeat", "2", "--seed", "0", "--faults", "exit/end=delay(1ms);" + faults,
                              "--out", (out() / "h").string(), "--", "/bin/sh", "-c", points_script});
  EXPECT_EQ(human.status, 0) << human.err;
  EXPECT_NE(human.out.find("\n  warning: enabled fault points never reached in any run: exit/end, c/never (a misspelt point, or every run ended before it got there)\n"), std::string::npos)
      << human.out;

  // Every point reached: an empty list and no warning. No faults: no field.
  auto all = run_faultline({"exec", "--no-preload", "--repeat", "2", "--seed", "0", "--faults", "a/one=off;b/*=off", "--json",
                            "--out", (out() / "all").string(), "--", "/bin/sh", "-c", points_script});
  EXPECT_EQ(only_json_line(all.out)["points_never_reached"], nlohmann::json::array());
  auto none = run_faultline({"exec", "--no-preload", "--json", "--out", (out() / "none").string(), "--", "true"});
  EXPECT_FALSE(only_json_line(none.out).contains("points_never_reached"));
  EXPECT_FALSE(nlohmann::json::parse(testing::read_lines(out() / "none" / "results.jsonl").at(0)).contains("points_reached"));
}

}  // namespace
}  // namespace faultline::harness

namespace faultline::harness {
namespace {

// A scheduler ending a job (Slurm's scancel, a pod's termination) signals every process of it,
// the runs too, and the harness's own signal may come a moment after its runs': runs that died
// of it are interrupted (performed again on --resume), not recorded as failures.
TEST(campaign_cancel, runs_killed_by_the_signal_that_ends_the_job_are_not_recorded) {
  testing::scratch_dir dir;
  const std::string marker = "FL_JOB_SIGNAL_TEST=" + std::to_string(::getpid());
  spawn_options o;
  o.argv = {(testing::bin_dir() / "faultline").string(), "exec", "--repeat", "20", "--jobs", "2", "--out",
            (dir.path() / "out").string(), "--", "/bin/sh", "-c", "sleep 30"};
  o.envp = current_environment();
  o.envp.push_back(marker);
  auto h = spawn(o);
  ASSERT_TRUE(h) << h.error().message();
  auto sleeps = [&] {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(name));
      std::ifstream comm(e.path() / "comm");
      std::string c;
      if (!(comm >> c) || c != "sleep") continue;
      const auto v = detail::read_environ_var(pid, "FL_JOB_SIGNAL_TEST");
      if (v && marker == "FL_JOB_SIGNAL_TEST=" + *v) out.push_back(pid);
    }
    return out;
  };
  ASSERT_TRUE(testing::eventually([&] { return sleeps().size() == 2; }, std::chrono::seconds(20)));
  for (pid_t p : sleeps()) ::kill(p, SIGTERM);  // the runs first: their shells exit 143
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(h->signal(SIGTERM));
  h->reap();
  const auto lines = testing::read_lines(dir.path() / "out" / "results.jsonl");
  EXPECT_TRUE(lines.empty()) << lines.size() << " runs recorded, the first: " << (lines.empty() ? "" : lines[0]);
}

}  // namespace
}  // namespace faultline::harness
