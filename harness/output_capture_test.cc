// A run's output through a pipe (output_capture.h), end to end through run_once and alone: the
// program sees a pipe (never a file), everything it writes at exit reaches the log, a flood is
// drained as it comes and the log keeps its head and tail within the limit, and a grandchild that
// keeps the pipe open holds neither the run nor the harness. Nothing here asserts a timing but
// the coarse "not held for the grandchild's 30 s".
#include "harness/output_capture.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <thread>

#include "harness/detail/sys.h"
#include "harness/process.h"
#include "harness/runner.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string slurp(const fs::path& p) {
  auto text = detail::read_file(p);
  return text ? *text : std::string();
}

class output_e2e : public ::testing::Test {
 protected:
  run_request request(const std::string& script) {
    run_request rq;
    rq.argv = {"/bin/sh", "-c", script};
    rq.env = current_environment();
    rq.run_dir = dir_.path() / "runs" / "r";
    rq.log_path = dir_.path() / "logs" / "r.log";
    rq.timeout = 60s;
    return rq;
  }
  testing::scratch_dir dir_;
};

TEST_F(output_e2e, program_writes_into_a_pipe_and_both_streams_reach_the_log_in_order) {
  // What CI runners give a program: a pipe on stdout and stderr, the same one.
  auto rq = request("echo out-1; echo err-1 >&2; echo out-2; "
                    "[ -p /dev/stdout ] && echo stdout-is-a-pipe; "
                    "[ \"$(readlink /proc/$$/fd/1)\" = \"$(readlink /proc/$$/fd/2)\" ] && echo one-pipe");
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::pass) << r.verdict.signature;
  EXPECT_EQ(slurp(rq.log_path), "out-1\nerr-1\nout-2\nstdout-is-a-pipe\none-pipe\n");
  EXPECT_EQ(r.output.bytes, slurp(rq.log_path).size());
  EXPECT_FALSE(r.output.still_open);
}

TEST_F(output_e2e, what_a_program_writes_at_exit_is_in_the_log) {
  // A buffered printf flushed by exit() and an atexit handler's write: the last things it does.
  auto rq = request("trap 'echo written-by-the-exit-trap >&2' EXIT; printf 'buffered-line'; exit 3");
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::fail);
  EXPECT_EQ(r.verdict.exit_code, 3);
  EXPECT_EQ(slurp(rq.log_path), "buffered-linewritten-by-the-exit-trap\n");
}

TEST_F(output_e2e, flood_is_drained_and_the_log_keeps_head_and_tail_within_the_limit) {
  // 8 MiB of output with a marker at each end; a 64 KiB limit keeps 32 KiB of each end.
  auto rq = request("echo FIRST-LINE; head -c 8388608 /dev/zero | tr '\\0' x; echo; echo LAST-LINE");
  rq.log_limit_bytes = 64 * 1024;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::pass) << r.verdict.signature;
  const std::string log = slurp(rq.log_path);
  EXPECT_EQ(r.output.bytes, 11u + 8388608u + 1u + 10u);
  EXPECT_EQ(r.output.bytes_dropped, r.output.bytes - 64 * 1024);
  EXPECT_EQ(log.rfind("FIRST-LINE\nxxx", 0), 0u) << log.substr(0, 40);
  EXPECT_EQ(log.substr(log.size() - 14), "xxx\nLAST-LINE\n");
  EXPECT_NE(log.find("bytes of output dropped here"), std::string::npos);
  EXPECT_LT(log.size(), 64u * 1024 + 200);
}

TEST_F(output_e2e, unbounded_log_keeps_everything) {
  auto rq = request("head -c 3000000 /dev/zero");
  rq.log_limit_bytes = 0;
  auto r = run_once(rq);
  EXPECT_EQ(r.verdict.result, outcome::pass);
  EXPECT_EQ(fs::file_size(rq.log_path), 3000000u);
  EXPECT_EQ(r.output.bytes_dropped, 0u);
}

TEST_F(output_e2e, grandchild_holding_the_pipe_does_not_hold_the_run) {
  // `prog | cat` would wait 30 s for the grandchild's end of the pipe; the run ends with its
  // program, the grandchild is a leak (killed), and what it wrote before is in the log.
  auto rq = request("(echo grandchild-started; exec sleep 30) & sleep 0.2; echo leader-done");
  rq.grace = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_once(rq);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.verdict.result, outcome::leak);
  EXPECT_LT(took, 20s);
  const std::string log = slurp(rq.log_path);
  EXPECT_NE(log.find("grandchild-started"), std::string::npos) << log;
  EXPECT_NE(log.find("leader-done"), std::string::npos) << log;
  EXPECT_FALSE(r.output.still_open);  // the grandchild was part of the run: killed, pipe closed
}

TEST(output_capture, pipe_held_outside_the_run_is_dropped_after_the_grace_saying_so) {
  testing::scratch_dir dir;
  auto out = output_capture::open(dir.path() / "log");
  ASSERT_TRUE(out) << out.error().message();
  // A process that is not part of any run (as an escapee would be) holds the write end.
  spawn_options so;
  so.argv = {"/bin/sh", "-c", "echo before; sleep 30"};
  so.envp = current_environment();
  so.stdout_fd = out->write_fd();
  auto c = spawn(so);
  ASSERT_TRUE(c) << c.error().message();
  out->close_write_end();
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  const output_stats s = out->finish(150ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_TRUE(s.still_open);
  c->signal(SIGKILL);
  c->reap();
  const std::string log = slurp(dir.path() / "log");
  EXPECT_EQ(log.rfind("before\n", 0), 0u) << log;
  EXPECT_NE(log.find("still open 150 ms after it ended"), std::string::npos) << log;
  EXPECT_EQ(out->finish(1s).still_open, true);  // idempotent: the first answer
}

TEST(output_capture, unwritable_log_is_an_error_naming_it) {
  auto out = output_capture::open("/nonexistent-dir/for/sure/log");
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("/nonexistent-dir/for/sure/log"), std::string::npos);
}

}  // namespace
}  // namespace faultline::harness
