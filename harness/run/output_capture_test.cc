// A run's output through a pipe (output_capture.h), end to end through run_once and alone: the
// program sees a pipe (never a file), everything it writes at exit reaches the log, a flood is
// drained as it comes and the log keeps its head and tail within the limit, and a grandchild that
// keeps the pipe open holds neither the run nor the harness. Nothing here asserts a timing but
// the coarse "not held for the grandchild's 30 s".
#include "harness/run/output_capture.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <thread>

#include "harness/detail/sys.h"
#include "harness/run/process.h"
#include "harness/run/runner.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::slurp;

namespace fs = std::filesystem;
using namespace std::chrono_literals;


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

// A campaign keeps few passing runs' logs: keep_log decides once the run is classified, and a
// run it drops leaves no file; a failure's invariant is still read from its log first.
TEST_F(output_e2e, keep_log_decides_whether_the_log_file_exists_once_the_run_is_classified) {
  for (const char* script : {"echo passing", "echo 'invariant violated: counter_went_negative: at 3' >&2; exit 4"}) {
    for (bool keep : {true, false}) {
      auto rq = request(script);
      outcome seen = outcome::error;
      rq.keep_log = [&](const run_report& r) {
        seen = r.verdict.result;
        return keep;
      };
      auto r = run_once(rq);
      EXPECT_EQ(seen, r.verdict.result) << "asked with the final verdict";
      EXPECT_EQ(fs::exists(rq.log_path), keep) << script;
      if (r.verdict.result == outcome::fail) {
        EXPECT_NE(r.verdict.signature.find("counter_went_negative"), std::string::npos) << r.verdict.signature;
      } else {
        EXPECT_EQ(r.verdict.result, outcome::pass) << r.verdict.signature;
      }
      if (keep) {
        EXPECT_NE(slurp(rq.log_path).find(r.verdict.result == outcome::pass ? "passing" : "counter"), std::string::npos);
      }
      fs::remove(rq.log_path);
    }
  }
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
  EXPECT_TRUE(out->commit());
  const std::string log = slurp(dir.path() / "log");
  EXPECT_EQ(log.rfind("before\n", 0), 0u) << log;
  EXPECT_NE(log.find("still open 150 ms after it ended"), std::string::npos) << log;
  EXPECT_EQ(out->finish(1s).still_open, true);  // idempotent: the first answer
}

// The log file is written when its owner keeps the run, and never exists when it does not; a
// run that writes much, or for long, has it written as it goes.
TEST(output_capture, the_log_file_is_written_on_commit_and_never_on_discard) {
  testing::scratch_dir dir;
  for (bool keep : {true, false}) {
    const auto path = dir.path() / (keep ? "kept.log" : "dropped.log");
    auto out = output_capture::open(path);
    ASSERT_TRUE(out) << out.error().message();
    ASSERT_EQ(::write(out->write_fd(), "hello\n", 6), 6);
    out->close_write_end();
    EXPECT_EQ(out->finish(100ms).bytes, 6u);
    EXPECT_FALSE(fs::exists(path)) << "nothing on disk before the owner decides";
    if (keep) {
      EXPECT_TRUE(out->commit());
      EXPECT_EQ(slurp(path), "hello\n");
    } else {
      out->discard();
      EXPECT_FALSE(fs::exists(path));
    }
  }
}

TEST(output_capture, output_past_the_spill_size_or_time_reaches_the_file_while_the_run_goes_on) {
  testing::scratch_dir dir;
  {
    auto out = output_capture::open(dir.path() / "big.log", 0);
    ASSERT_TRUE(out) << out.error().message();
    const std::string chunk(64 * 1024, 'x');
    for (std::size_t written = 0; written <= output_spill_bytes; written += chunk.size())
      ASSERT_TRUE(detail::write_all(out->write_fd(), chunk, "pipe"));
    EXPECT_TRUE(testing::eventually([&] { return fs::exists(dir.path() / "big.log") && fs::file_size(dir.path() / "big.log") > 0; }, 10s));
    out->close_write_end();
    out->finish(100ms);
    out->discard();
    EXPECT_FALSE(fs::exists(dir.path() / "big.log")) << "discard removes what was spilled";
  }
  auto out = output_capture::open(dir.path() / "slow.log");
  ASSERT_TRUE(out) << out.error().message();
  ASSERT_EQ(::write(out->write_fd(), "early\n", 6), 6);
  EXPECT_TRUE(testing::eventually([&] { return slurp(dir.path() / "slow.log") == "early\n"; },
                                  output_spill_after + 10s));
  ASSERT_EQ(::write(out->write_fd(), "late\n", 5), 5);
  out->close_write_end();
  out->finish(100ms);
  EXPECT_TRUE(out->commit());
  EXPECT_EQ(slurp(dir.path() / "slow.log"), "early\nlate\n");
}

TEST(output_capture, unwritable_log_is_an_error_naming_it) {
  auto out = output_capture::open("/nonexistent-dir/for/sure/log");
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("/nonexistent-dir/for/sure/log"), std::string::npos);
}

}  // namespace
}  // namespace faultline::harness
