// posix/ and libc/ points (posix_points.h): libfiu's POSIX preload, asked through the agent's
// callback, in programs that know nothing of faultline (coreutils' cat, posix_writer), directly
// and through `faultline exec`; and the agent's own I/O, which the user's posix/ faults must never
// reach: its records (points.PID, crash.PID) are whole and its actions (kill) act under a spec
// that fails every write, close, kill or sigaction, and a counted failure goes to the program's
// call, not to the agent's.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "faults/preload/protocol.h"
#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

namespace fs = std::filesystem;
using testing::exited_0;

std::string fiu_preload() {
  for (const char* p : {"/usr/lib/fiu/fiu_posix_preload.so", "/usr/local/lib/fiu/fiu_posix_preload.so",
                        "/usr/lib/x86_64-linux-gnu/fiu/fiu_posix_preload.so"}) {
    if (fs::exists(p)) return p;
  }
  return "";
}

class posix_points : public ::testing::Test {
 protected:
  void SetUp() override {
    fiu_ = fiu_preload();
    if (fiu_.empty()) GTEST_SKIP() << "libfiu's fiu_posix_preload.so is not installed (Debian: fiu-utils)";
    std::ofstream(runner_.dir() / "data.txt") << "hello\n";
  }
  testing::preload_runner runner_{std::string(FAULTLINE_AGENT_PRELOAD) + ":" + fiu_preload()};
  std::string fiu_;
  std::string data() const { return (runner_.dir() / "data.txt").string(); }
  std::string out_file() const { return (runner_.dir() / "written.txt").string(); }

  // run() with a bound: a program still running after `limit_s` is killed (SIGKILL), so that an
  // agent looping on a failed call fails the test instead of hanging it.
  testing::finished run_bounded(const std::string& spec, std::vector<std::string> args, int limit_s = 20) {
    const std::string program = args.at(0);
    testing::finished f = runner_.start(spec, std::move(args));
    if (f.pid <= 0) return f;
    for (int waited_ms = 0;; waited_ms += 10) {
      if (::waitpid(f.pid, &f.status, WNOHANG) == f.pid) break;
      if (waited_ms >= limit_s * 1000) {
        ::kill(f.pid, SIGKILL);
        ::waitpid(f.pid, &f.status, 0);
        ADD_FAILURE() << program << " still ran after " << limit_s << " s: killed";
        break;
      }
      const timespec tick{0, 10'000'000};
      ::nanosleep(&tick, nullptr);
    }
    runner_.collect(f);
    return f;
  }
};

TEST_F(posix_points, fail_gives_the_named_errno_and_only_where_the_item_points) {
  auto ok = runner_.run("posix/io/oc/opendir=fail(EIO)", {"cat", data()});
  ASSERT_TRUE(exited_0(ok)) << ok.err;
  EXPECT_EQ(ok.out, "hello\n");
  auto f = runner_.run("posix/io/oc/open=fail(ENOSPC)", {"cat", data()});
  EXPECT_FALSE(exited_0(f));
  EXPECT_NE(f.err.find("No space left on device"), std::string::npos) << f.err;
  EXPECT_EQ(runner_.reached(f.pid), "posix/io/oc/open\n");
}

TEST_F(posix_points, counts_and_probabilities_follow_the_spec_and_its_seed) {
  // Two opens (cat A A): the first fails, the second does not.
  auto f = runner_.run("posix/io/oc/open=1*fail(EACCES)", {"cat", data(), data()});
  EXPECT_FALSE(exited_0(f));
  EXPECT_EQ(f.out, "hello\n");
  EXPECT_NE(f.err.find("Permission denied"), std::string::npos) << f.err;
  // 50%: the same seed gives the same outcome, run after run.
  std::string first;
  for (int i = 0; i < 3; ++i) {
    auto g = runner_.run("posix/io/oc/open=50%fail(EIO)", {"cat", data(), data(), data(), data()}, {"FAULTLINE_SEED=7"});
    if (i == 0) first = g.out + g.err;
    EXPECT_EQ(g.out + g.err, first);
  }
}

TEST_F(posix_points, faultline_exec_preloads_libfiu_for_them) {
  const std::string summary = (runner_.dir() / "summary.json").string();
  const std::string cmd = std::string(FAULTLINE_CLI) + " exec --json --out " + (runner_.dir() / "c").string() +
                          " --faults 'posix/io/oc/open=fail(ENOSPC);posix/io/net/connect=fail' -- cat " + data() +
                          " > " + summary + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // cat failed: the run failed
  const std::string json = testing::slurp(summary);
  EXPECT_NE(json.find("\"fail\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"points_never_reached\":[\"posix/io/net/connect\"]"), std::string::npos) << json;
}

// The report: with a counted write failure and two points of the agent's own, the failure
// went to the agent's record of process/start (which was then "never reached") and the program's
// writes all succeeded.
TEST_F(posix_points, a_counted_failure_goes_to_the_programs_call_not_the_agents) {
  runner_.make_phase_table();
  auto f = run_bounded("posix/io/rw/write=1*fail(ENOSPC);exit/end=delay(5ms);process/start=delay(2ms)",
                       {FAULTLINE_POSIX_WRITER, out_file(), "3"});
  ASSERT_TRUE(WIFEXITED(f.status)) << f.status;
  EXPECT_EQ(WEXITSTATUS(f.status), 1) << "posix_writer's first write must be the one that fails";
  EXPECT_EQ(runner_.all_reached(),
            (std::vector<std::string>{"exit/end", "posix/io/rw/write", "process/start"}));
}

TEST_F(posix_points, every_write_failing_leaves_the_agents_record_whole) {
  runner_.make_phase_table();
  auto f = run_bounded("posix/io/rw/write=fail(ENOSPC);exit/end=delay(1ms);process/start=delay(1ms)",
                       {FAULTLINE_POSIX_WRITER, out_file(), "3"});
  ASSERT_TRUE(WIFEXITED(f.status)) << f.status;
  EXPECT_EQ(WEXITSTATUS(f.status), 1);
  EXPECT_EQ(runner_.reached(f.pid), "process/start\nposix/io/rw/write\nexit/end\n");
}

// The crash report is written, and the signal passed on, although every write, close and
// sigaction of the process fails (before: an empty crash.PID, and a handler that could not
// restore the previous action took its own signal again, without end).
TEST_F(posix_points, a_crash_is_reported_whole_when_every_write_and_sigaction_fails) {
  runner_.make_phase_table();
  auto f = run_bounded("posix/io/rw/write=fail(EIO);posix/io/oc/close=fail(EIO);posix/proc/sigaction=fail(EINVAL)",
                       {FAULTLINE_POSIX_WRITER, out_file(), "2", "crash"}, 10);
  ASSERT_TRUE(WIFSIGNALED(f.status)) << f.status;
  EXPECT_EQ(WTERMSIG(f.status), SIGSEGV);
  const std::string report = testing::slurp(runner_.dir() / ("crash." + std::to_string(f.pid)));
  EXPECT_EQ(report.rfind("signal 11 SIGSEGV\nthread ", 0), 0u) << report;
  EXPECT_NE(report.find("\n#1 "), std::string::npos) << report;
  EXPECT_NE(report.find(" main\n"), std::string::npos) << report;
}

// A hung program's stack dump is whole although every write and close of the process fails.
TEST_F(posix_points, a_stack_dump_is_whole_when_every_write_fails) {
  runner_.make_phase_table();
  testing::finished f = runner_.start("posix/io/rw/write=fail(EIO);posix/io/oc/close=fail(EIO)",
                                      {FAULTLINE_POSIX_WRITER, out_file(), "1", "hang"});
  ASSERT_GT(f.pid, 0);
  const auto stacks = runner_.dir() / ("stacks." + std::to_string(f.pid));
  const auto points = runner_.dir() / ("points." + std::to_string(f.pid));
  std::string dump;
  // The program has started its work once it has tried its write; then it is asked for its stacks.
  bool asked = false;
  for (int waited_ms = 0; waited_ms < 10'000; waited_ms += 10) {
    if (!asked && testing::slurp(points).find("posix/io/rw/write\n") != std::string::npos) {
      ASSERT_EQ(::kill(f.pid, stack_dump_signal()), 0);
      asked = true;
    }
    dump = testing::slurp(stacks);
    if (dump.find("\nend\n") != std::string::npos) break;
    const timespec tick{0, 10'000'000};
    ::nanosleep(&tick, nullptr);
  }
  ::kill(f.pid, SIGKILL);
  ::waitpid(f.pid, &f.status, 0);
  EXPECT_TRUE(asked);
  EXPECT_EQ(dump.rfind("thread ", 0), 0u) << dump;
  EXPECT_NE(dump.find("\n#1 "), std::string::npos) << dump;
  EXPECT_NE(dump.find(" main\n"), std::string::npos) << dump;
  EXPECT_NE(dump.find("\nend\n"), std::string::npos) << dump;
}

// fn/ breakpoints are set and re-armed by the agent's own mprotect, which posix/mm/mprotect does
// not reach (before: the breakpoint could not be set, and the point was never reached).
TEST_F(posix_points, fn_breakpoints_are_not_the_programs_mprotect) {
  auto f = run_bounded("fn/fn_exported_step=print;posix/mm/mprotect=fail(EACCES)",
                       {FAULTLINE_FN_POINTS_CHILD, "exported", "5"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "exported 25\n");
  EXPECT_EQ(testing::count(f.err, "fault point fn/fn_exported_step reached"), 5u) << f.err;
  EXPECT_EQ(runner_.reached(f.pid), "fn/fn_exported_step\n");
}

// The agent's kill action is not a kill(2) of the program's: posix/proc/kill cannot stop it.
TEST_F(posix_points, the_agents_kill_action_is_not_the_programs_kill) {
  auto f = run_bounded("posix/proc/kill=fail(EPERM);exit/end=kill", {FAULTLINE_POSIX_WRITER, out_file(), "1"});
  ASSERT_TRUE(WIFSIGNALED(f.status)) << f.status;
  EXPECT_EQ(WTERMSIG(f.status), SIGKILL);
  EXPECT_EQ(runner_.reached(f.pid), "exit/end\n");
}

// Through the command, as the issue ran it: the run fails by the program's own failed write, and
// every point of the spec is reached.
TEST_F(posix_points, faultline_exec_reports_every_point_of_a_write_spec_reached) {
  const std::string summary = (runner_.dir() / "summary.json").string();
  const std::string cmd = std::string(FAULTLINE_CLI) + " exec --json --repeat 2 --out " + (runner_.dir() / "c").string() +
                          " --faults 'posix/io/rw/write=1*fail(ENOSPC);exit/end=delay(5ms);process/start=delay(2ms)' -- " +
                          FAULTLINE_POSIX_WRITER + " " + out_file() + " 3 > " + summary + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // posix_writer failed: the runs failed
  const std::string json = testing::slurp(summary);
  EXPECT_NE(json.find("\"fail\":2"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"points_never_reached\":[\""), std::string::npos) << json;
}

}  // namespace
}  // namespace faultline::agent
