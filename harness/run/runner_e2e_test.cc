// The runner against real programs (harness/testdata): each run is classified with the right
// outcome, phase and signature; hangs leave their stacks; and no process of any run outlives
// it — checked by the pids the programs report and by scanning /proc for anything still
// carrying the run's FAULTLINE_RUN_DIR. Timeouts are generous; nothing here asserts a timing.
#include "harness/run/runner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "harness/detail/sys.h"
#include "harness/run/process.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::slurp;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::alive;
using testing::processes_of_run;
using testing::program;
using testing::read_pid_file;


class runner_e2e : public ::testing::Test {
 protected:
  run_request request(std::vector<std::string> argv, bool preload = false, const std::string& name = "run") {
    run_request rq;
    rq.argv = std::move(argv);
    rq.env = current_environment();
    set_env(rq.env, "LD_PRELOAD", preload ? std::optional<std::string>(testing::agent_preload().string()) : std::nullopt);
    rq.run_dir = dir_.path() / "runs" / name;
    rq.log_path = dir_.path() / "logs" / (name + ".log");
    rq.timeout = 60s;
    // The classification tests read the agent's in-process crash report, which every machine
    // has; the default (the kernel's core, read by gdb) is tested where cores can be had.
    rq.crash = crash_capture::inside;
    return rq;
  }
  std::string log(const run_request& rq) { return slurp(rq.log_path); }
  void expect_nothing_left(const run_report& r, const run_request& rq) {
    EXPECT_FALSE(alive(r.evidence.leader));
    EXPECT_EQ(processes_of_run(rq.run_dir), std::vector<pid_t>{}) << "processes of the run survived it";
  }

  testing::scratch_dir dir_;
};

TEST_F(runner_e2e, passing_program_passes_with_its_output_in_the_log) {
  auto rq = request({program("fl_testdata_pass").string()});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::pass) << r.verdict.signature;
  EXPECT_EQ(r.verdict.exit_code, 0);
  EXPECT_EQ(r.verdict.when, phase::none);
  EXPECT_FALSE(log(rq).empty());
  EXPECT_TRUE(r.evidence.leaked_pids.empty());
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, failing_program_is_a_fail_named_by_its_invariant) {
  auto rq = request({program("fl_testdata_fail").string()});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::fail);
  EXPECT_NE(r.verdict.exit_code.value_or(0), 0);
  EXPECT_EQ(r.verdict.when, phase::run);
  EXPECT_EQ(r.verdict.signature, "demo");
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, crash_during_work_is_a_run_phase_crash_naming_the_crashing_frame) {
  auto rq = request({program("fl_testdata_crash_in_work").string()}, true);
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::crash);
  EXPECT_EQ(r.verdict.when, phase::run);
  EXPECT_EQ(r.verdict.signal, SIGSEGV);
  // The frame is not exported: the agent wrote "??" and addr2line named it.
  EXPECT_EQ(r.verdict.signature.rfind("SIGSEGV: crash_in_work_frame", 0), 0u) << r.verdict.signature;
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, run_in_its_own_directory_has_its_crash_read_from_its_core) {
  // The default capture (no handler in the run): the kernel writes the core into the run's
  // directory, gdb reads it, the core is deleted.
  auto rq = request({program("fl_testdata_crash_in_work").string()});
  rq.crash = crash_capture::automatic;
  rq.in_run_dir = true;
  std::string why;
  fs::create_directories(rq.run_dir.parent_path());
  if (resolve_crash_capture(rq.crash, &why, rq.run_dir.parent_path()) != crash_capture::core)
    GTEST_SKIP() << "no core capture here: " << why;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::crash);
  EXPECT_EQ(r.verdict.signature.rfind("SIGSEGV: crash_in_work_frame", 0), 0u) << r.verdict.signature;
  EXPECT_NE(slurp(rq.run_dir / "crash-stacks.txt").find("(core)"), std::string::npos);
  for (const auto& e : fs::directory_iterator(rq.run_dir))
    EXPECT_EQ(e.path().filename().string().rfind("core", 0), std::string::npos) << "core left: " << e.path();
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, exit_time_crash_under_the_preload_is_an_exit_phase_crash) {
  auto rq = request({program("fl_testdata_exit_crash").string()}, true);
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::crash);
  EXPECT_EQ(r.verdict.when, phase::exit);
  EXPECT_NE(r.verdict.signature.find("exit_crash_destructor_frame"), std::string::npos) << r.verdict.signature;
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, exit_time_crash_without_the_agent_is_still_a_crash) {
  auto rq = request({program("fl_testdata_exit_crash").string()}, false);
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::crash);
  EXPECT_EQ(r.verdict.signal, SIGSEGV);
  EXPECT_EQ(r.verdict.signature, "SIGSEGV");  // no crash report: the signal is all there is
}

TEST_F(runner_e2e, linked_agent_marks_work_end_so_its_exit_crash_is_in_the_exit_phase) {
  auto rq = request({program("fl_testdata_exit_crash_agent").string()});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::crash);
  EXPECT_EQ(r.verdict.when, phase::exit);
  EXPECT_EQ(r.verdict.signature.rfind("SIGSEGV: exit_crash_destructor_frame", 0), 0u) << r.verdict.signature;
}

TEST_F(runner_e2e, gtest_program_that_crashes_after_its_tests_is_an_exit_phase_crash) {
  // No agent: the phase comes from gtest's own protocol (premature-exit file, XML report).
  auto rq = request({program("fl_testdata_gtest_exit_crash").string()}, false);
  rq.gtest_output = true;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::crash);
  EXPECT_EQ(r.verdict.when, phase::exit);
  EXPECT_TRUE(fs::exists(rq.run_dir / gtest_xml_file));
  EXPECT_FALSE(fs::exists(rq.run_dir / premature_exit_file));
  // With the preload the frame is named too.
  auto rq2 = request({program("fl_testdata_gtest_exit_crash").string()}, true, "preloaded");
  rq2.gtest_output = true;
  auto r2 = run_once(rq2);
  EXPECT_EQ(r2.verdict.result, outcome::crash);
  EXPECT_EQ(r2.verdict.when, phase::exit);
  EXPECT_NE(r2.verdict.signature.find("gtest_exit_crash_destructor_frame"), std::string::npos) << r2.verdict.signature;
}

TEST_F(runner_e2e, hang_of_a_setsid_grandchild_tree_is_dumped_and_fully_killed) {
  const fs::path pids = dir_.path() / "pids";
  auto rq = request({program("fl_testdata_hang_grandchild").string(), "--print-pids", pids.string()});
  rq.timeout = 3s;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::hang);
  EXPECT_EQ(r.verdict.when, phase::run);
  EXPECT_EQ(r.verdict.signature.rfind("hang", 0), 0u);
  auto procs = read_pid_file(pids);
  ASSERT_EQ(procs.size(), 3u) << "the program did not report its pids in time";
  for (const auto& [label, pid] : procs) EXPECT_FALSE(alive(pid)) << label << " " << pid << " survived";
  // Every process of the tree has a section in the stack dump, and threads are named.
  ASSERT_FALSE(r.evidence.stacks_path.empty());
  auto stacks = slurp(r.evidence.stacks_path);
  EXPECT_FALSE(stacks.empty());
  for (const auto& [label, pid] : procs)
    EXPECT_NE(stacks.find("=== process " + std::to_string(pid) + " "), std::string::npos) << label;
  EXPECT_TRUE(stacks.find("Thread ") != std::string::npos || stacks.find("thread ") != std::string::npos ||
              stacks.find("TID ") != std::string::npos);  // gdb, /proc and the agent; eu-stack and libdwfl
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, hang_with_gdb_names_the_blocked_main_frame) {
  if (!gdb_available()) GTEST_SKIP() << "gdb is not on PATH";
  auto rq = request({program("fl_testdata_hang_grandchild").string()});
  rq.timeout = 2s;
  rq.stacks.method = stack_method::gdb;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::hang);
  // Named by where its threads block, not by main: frames of libc's waits are skipped.
  EXPECT_EQ(r.verdict.signature, "hang: (anonymous namespace)::block_forever | (anonymous namespace)::wait_for")
      << r.verdict.signature;
  auto stacks = slurp(r.evidence.stacks_path);
  EXPECT_NE(stacks.find("via gdb"), std::string::npos);
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, hang_without_stack_capture_is_still_fully_killed) {
  const fs::path pids = dir_.path() / "pids";
  auto rq = request({program("fl_testdata_hang_grandchild").string(), "--print-pids", pids.string()});
  rq.timeout = 2s;
  rq.stacks.method = stack_method::none;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::hang);
  EXPECT_EQ(r.verdict.signature, "hang");
  EXPECT_TRUE(r.evidence.stacks_path.empty());
  EXPECT_FALSE(fs::exists(rq.run_dir / stacks_file));
  for (const auto& [label, pid] : read_pid_file(pids)) EXPECT_FALSE(alive(pid)) << label;
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, agent_dump_names_every_thread_and_the_hung_frame) {
  auto rq = request({program("fl_testdata_agent_hang").string()});
  rq.timeout = 2s;
  rq.stacks.method = stack_method::agent;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::hang);
  auto stacks = slurp(r.evidence.stacks_path);
  EXPECT_NE(stacks.find("via agent"), std::string::npos) << stacks;
  EXPECT_NE(stacks.find("fl-hang-a"), std::string::npos);
  EXPECT_NE(stacks.find("fl-hang-b"), std::string::npos);
  EXPECT_EQ(r.verdict.signature, "hang: agent_hang_main_frame | agent_hang_thread_frame");
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, proc_dump_lists_threads_with_state_and_wait_channel) {
  auto rq = request({program("fl_testdata_agent_hang").string()});
  rq.timeout = 2s;
  rq.stacks.method = stack_method::proc;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::hang);
  auto stacks = slurp(r.evidence.stacks_path);
  EXPECT_NE(stacks.find("via proc"), std::string::npos);
  EXPECT_NE(stacks.find("fl-hang-a state "), std::string::npos) << stacks;
  EXPECT_NE(stacks.find(" wchan "), std::string::npos);
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, daemon_left_behind_is_a_leak_and_is_killed) {
  const fs::path pids = dir_.path() / "pids";
  auto rq = request({program("fl_testdata_leak_child").string(), "--print-pids", pids.string()});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::leak);
  EXPECT_EQ(r.verdict.when, phase::exit);
  EXPECT_EQ(r.verdict.exit_code, 0);
  auto procs = read_pid_file(pids);
  ASSERT_EQ(procs.count("daemon"), 1u);
  const pid_t daemon = procs["daemon"];
  EXPECT_EQ(r.evidence.leaked_pids, std::vector<int>{daemon});
  EXPECT_FALSE(alive(daemon));
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, orphan_that_cleared_its_environment_is_still_caught) {
  // setsid + an empty environment + a dead parent: only the subreaper can still find it.
  auto rq = request({"/bin/sh", "-c", "(setsid env -i /bin/sleep 300 &) ; sleep 0.2"});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::leak) << r.verdict.signature;
  ASSERT_EQ(r.evidence.leaked_pids.size(), 1u);
  EXPECT_FALSE(alive(r.evidence.leaked_pids[0]));
}

TEST_F(runner_e2e, tree_that_ignores_sigterm_is_killed_after_the_grace_period) {
  auto rq = request({"/bin/sh", "-c", "trap '' TERM; for i in 1 2 3; do /bin/sh -c 'while :; do sleep 300; done' & done; wait"});
  rq.timeout = 1s;
  rq.grace = 300ms;
  rq.stacks.method = stack_method::none;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::hang);
  EXPECT_TRUE(r.stuck_pids.empty());
  ASSERT_TRUE(r.evidence.wait_status);
  EXPECT_TRUE(WIFSIGNALED(*r.evidence.wait_status));
  EXPECT_EQ(WTERMSIG(*r.evidence.wait_status), SIGKILL);
  expect_nothing_left(r, rq);
}

TEST_F(runner_e2e, new_faultline_shared_memory_is_a_leak_and_is_removed) {
  const std::string name = "faultline-e2e-" + std::to_string(::getpid());
  auto rq = request({"/bin/sh", "-c", "touch /dev/shm/" + name});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::leak);
  EXPECT_EQ(r.evidence.leaked_shm, std::vector<std::string>{name});
  EXPECT_EQ(r.verdict.signature, "leak: /dev/shm/" + name);
  EXPECT_FALSE(fs::exists("/dev/shm/" + name));
}

TEST_F(runner_e2e, run_gets_its_directory_and_the_gtest_variables) {
  auto rq = request({"/bin/sh", "-c", "echo dir=$FAULTLINE_RUN_DIR; echo premature=$TEST_PREMATURE_EXIT_FILE; echo xml=$GTEST_OUTPUT"});
  rq.gtest_output = true;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::pass);
  const std::string dir = fs::absolute(rq.run_dir).string();
  auto text = log(rq);
  EXPECT_NE(text.find("dir=" + dir + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("premature=" + dir + "/" + premature_exit_file), std::string::npos) << text;
  EXPECT_NE(text.find("xml=xml:" + dir + "/" + gtest_xml_file), std::string::npos) << text;
}

TEST_F(runner_e2e, user_gtest_output_is_left_alone) {
  auto rq = request({"/bin/sh", "-c", "echo xml=$GTEST_OUTPUT"});
  rq.gtest_output = true;
  set_env(rq.env, "GTEST_OUTPUT", "json:/tmp/mine.json");
  run_once(rq);
  EXPECT_NE(log(rq).find("xml=json:/tmp/mine.json"), std::string::npos);
}

TEST_F(runner_e2e, missing_program_is_an_error) {
  auto rq = request({(dir_.path() / "no-such-program").string()});
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::error);
  EXPECT_NE(r.verdict.signature.find("No such file"), std::string::npos) << r.verdict.signature;
}

TEST_F(runner_e2e, cancelled_run_is_killed_and_marked_interrupted) {
  std::atomic<bool> cancel{true};
  auto rq = request({"/bin/sleep", "300"});
  rq.cancel = &cancel;
  auto r = run_once(rq);
  EXPECT_TRUE(r.interrupted);
  expect_nothing_left(r, rq);
}

}  // namespace
}  // namespace faultline::harness
