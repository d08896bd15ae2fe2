// One live campaign per --out, end to end. The goal: while a soak or campaign runs, a second
// `soak --resume`, `exec`, `run` or `verify` on its --out is refused at once (exit status 2, the
// first one's pid in the message) and changes nothing: the first records every run once; no
// process but the harness itself (no run, no keeper) holds the lock; and a campaign killed with
// SIGKILL blocks nobody — its --resume starts at once, keepers still tearing its runs down or
// not; a campaign that ended (interrupted with SIGINT) leaves no lock file. Method: the real
// `faultline` binary in the background (the stand-in scenario binary for soaks, `sleep 1` runs
// for exec, so that runs are in flight while /proc is searched for who holds
// OUT/.faultline.lock), the second command beside it, and results.jsonl read back.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/campaign/out_lock.h"
#include "harness/results/results.h"
#include "harness/run/process.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::slurp;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::run_faultline;
using testing::eventually;

std::map<std::string, std::string> fake_env() {
  return {{"FAULTLINE_SCENARIOS", testing::program("faultline-fake-scenarios").string()}};
}


std::vector<run_record> records(const fs::path& out) {
  auto r = read_results(out / "results.jsonl");
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().to_string());
  return r ? r->records : std::vector<run_record>{};
}

// Each run number once, and none missing below the highest.
void expect_each_run_once(const std::vector<run_record>& recs) {
  std::set<std::uint64_t> numbers;
  for (const auto& r : recs) EXPECT_TRUE(numbers.insert(r.run).second) << "run " << r.run << " recorded twice";
  if (!numbers.empty()) {
    EXPECT_EQ(*numbers.rbegin() + 1, numbers.size()) << "a run below the highest recorded one is missing";
  }
}

// `faultline ARGS` in the background, its stderr in ERR; SIGKILLed and reaped at the end of the
// test if it is still there.
class background {
 public:
  background(const std::vector<std::string>& args, fs::path err) : err_(std::move(err)) {
    spawn_options o;
    o.argv = {(testing::bin_dir() / "faultline").string()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.envp = current_environment();
    for (const auto& [k, v] : fake_env()) set_env(o.envp, k, v);
    const int out_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const int err_fd = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    o.stdout_fd = out_fd;
    o.stderr_fd = err_fd;
    auto c = spawn(o);
    ::close(out_fd);
    ::close(err_fd);
    if (!c) throw std::runtime_error("cannot start faultline: " + c.error().message());
    proc_ = std::move(*c);
  }
  background(const background&) = delete;
  background& operator=(const background&) = delete;
  ~background() {
    if (reaped_) return;
    proc_.signal(SIGKILL);
    proc_.reap();
  }
  pid_t pid() const { return proc_.pid(); }
  const child& proc() const { return proc_; }
  int reap() {
    reaped_ = true;
    return proc_.reap();
  }
  std::string err() const { return slurp(err_); }

 private:
  fs::path err_;
  child proc_;
  bool reaped_ = false;
};

// The processes with a descriptor open on `file`.
std::set<pid_t> holders_of(const fs::path& file) {
  std::set<pid_t> out;
  const fs::path want = fs::canonical(file);
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    const std::string name = p.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(p.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (fs::read_symlink(fd.path(), link_ec) == want && !link_ec) out.insert(static_cast<pid_t>(std::stol(name)));
    }
  }
  return out;
}

// Those that hold it now and still 50 ms later: a keeper holds an inherited copy only for the
// moment between its clone and its closing every close-on-exec descriptor.
std::set<pid_t> lasting_holders_of(const fs::path& file) {
  const auto first = holders_of(file);
  std::this_thread::sleep_for(50ms);
  std::set<pid_t> out;
  for (pid_t p : holders_of(file))
    if (first.count(p)) out.insert(p);
  return out;
}

class out_lock_e2e : public ::testing::Test {
 protected:
  testing::scratch_dir dir_;
  fs::path out() const { return dir_.path() / "out"; }
};

TEST_F(out_lock_e2e, a_second_campaign_on_a_live_soaks_out_is_refused_at_once_and_no_run_is_recorded_twice) {
  // A budget it never reaches: the test interrupts it once the others were refused.
  background first({"soak", "--budget", "10m", "--out", out().string(), "--seed", "5", "--jobs", "2"},
                   dir_.path() / "first.err");
  const pid_t pid = first.pid();
  ASSERT_TRUE(eventually([&] { return testing::read_lines(out() / "results.jsonl").size() >= 4; }, 30s)) << first.err();
  const std::string named = "pid " + std::to_string(pid);

  const std::vector<std::vector<std::string>> seconds = {
      {"soak", "--budget", "10m", "--out", out().string(), "--resume"},
      {"soak", "--budget", "10m", "--out", out().string(), "--seed", "6"},  // a new soak would clear OUT
      {"exec", "--out", out().string(), "--", "true"},                      // so would a new campaign
      {"run", "fake/counter", "--out", out().string(), "--resume"},
      {"verify", "fake/counter", "--repeat", "1", "--out", out().string()},
  };
  for (const auto& args : seconds) {
    const auto started = std::chrono::steady_clock::now();
    auto r = run_faultline(args, fake_env(), 30s);
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(r.status, 2) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("in use by another campaign: " + named), std::string::npos) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(" soak --budget 10m"), std::string::npos) << args[0] << ": the holder's command line\n" << r.err;
    EXPECT_LT(took, 20s) << args[0] << " waited instead of being refused";
  }
  ASSERT_TRUE(testing::alive(pid)) << "the soak ended while the others were refused: the test proves nothing\n" << first.err();

  // Only the harness holds the lock: not its runs, not their keepers.
  EXPECT_EQ(lasting_holders_of(out() / out_lock_file), std::set<pid_t>{pid});

  ASSERT_TRUE(first.proc().signal(SIGINT));
  ASSERT_TRUE(first.proc().wait_exit_for(60s)) << first.err();
  const int status = first.reap();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 130) << "interrupted\n" << first.err();
  const auto recs = records(out());
  EXPECT_GT(recs.size(), 4u);
  expect_each_run_once(recs);
  for (const auto& r : recs) EXPECT_EQ(r.seed, 5 + r.run) << "a record of the refused soak with --seed 6";
  std::ifstream state_in(out() / "soak.json");
  auto state = nlohmann::json::parse(state_in, nullptr, false);
  ASSERT_FALSE(state.is_discarded());
  EXPECT_EQ(state["runs"], recs.size());
  EXPECT_FALSE(fs::exists(out() / out_lock_file)) << "the ended soak left its lock file";

  // Once it has ended, the same --out is free again (a budget already spent: no run).
  auto resumed = run_faultline({"soak", "--budget", "1s", "--out", out().string(), "--resume"}, fake_env(), 60s);
  EXPECT_NE(resumed.status, 2) << resumed.err;
  EXPECT_EQ(resumed.err.find("in use by another campaign"), std::string::npos) << resumed.err;
  expect_each_run_once(records(out()));
}

TEST_F(out_lock_e2e, a_campaign_killed_with_sigkill_blocks_nobody_and_a_live_one_refuses_exec) {
  // Runs of a second each, two at a time: whenever the holders are looked for, runs are in flight.
  const std::vector<std::string> cmd = {"--", "sleep", "1"};
  std::vector<std::string> args = {"exec", "--repeat", "8", "--jobs", "2", "--seed", "9", "--out", out().string()};
  args.insert(args.end(), cmd.begin(), cmd.end());
  background first(args, dir_.path() / "first.err");
  ASSERT_TRUE(eventually([&] { return testing::read_lines(out() / "results.jsonl").size() >= 2; }, 30s)) << first.err();

  auto again = run_faultline(args, {}, 60s);
  EXPECT_EQ(again.status, 2) << again.err;
  EXPECT_NE(again.err.find("pid " + std::to_string(first.pid())), std::string::npos) << again.err;
  ASSERT_TRUE(testing::alive(first.pid())) << "the first campaign ended before the second was refused";
  EXPECT_EQ(lasting_holders_of(out() / out_lock_file), std::set<pid_t>{first.pid()});

  ASSERT_TRUE(first.proc().signal(SIGKILL));
  const int status = first.reap();
  ASSERT_TRUE(WIFSIGNALED(status)) << "it ended by itself: " << first.err();
  const auto before = records(out()).size();
  ASSERT_LT(before, 8u);

  // At once: the killed harness's keepers may still be ending its runs.
  std::vector<std::string> resume = {"exec", "--resume", "--jobs", "2", "--out", out().string()};
  resume.insert(resume.end(), cmd.begin(), cmd.end());
  auto r = run_faultline(resume, {}, 120s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("in use by another campaign"), std::string::npos) << r.err;
  const auto recs = records(out());
  EXPECT_EQ(recs.size(), 8u);
  expect_each_run_once(recs);
}

}  // namespace
}  // namespace faultline::harness
