// Goal: with remote control on, the real `fiu-ctrl` tool enables fault points of a running
// faultline process from outside, and such a point fires like fail(failnum). Method: re-exec this
// binary as a child that turns remote control on through FAULTLINE_FIU_CTRL=1 and polls two points;
// the parent waits for the child's control pipe, runs /usr/bin/fiu-ctrl against the child's pid
// (both the deprecated `-e NAME` form and `-c 'enable name=...,failnum=N'`), and checks the
// child's exit status. Timeouts are generous; nothing asserts speed.
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "faults/engine.h"
#include "core/points/point.h"
#include "core/testing/child.h"

extern char** environ;

namespace faultline::faults {
namespace {

using namespace std::chrono_literals;

constexpr auto generous = 30s;
constexpr const char* fiu_ctrl = "/usr/bin/fiu-ctrl";

int hit(const char* name) {
  static_cast<void>(name);
  return FAULTLINE_POINT(name);
}

// Runs fiu-ctrl with `args` and returns its exit code (-1 when it could not run or hung).
int run_fiu_ctrl(std::vector<std::string> args) {
  args.insert(args.begin(), fiu_ctrl);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, fiu_ctrl, nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return testing::wait_exit(pid, generous);
}

TEST(remote_control, DISABLED_child_obeys_fiu_ctrl) {
  if (std::getenv("FAULTLINE_FIU_CTRL") == nullptr) GTEST_SKIP() << "only runs when spawned";
  core::status s = configure_from_environment();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(remote_control_enabled());
  EXPECT_TRUE(points::is_armed()) << "remote control arms the points";
  EXPECT_TRUE(enable_remote_control().is_ok()) << "a second call is a no-op";

  // A local spec still works, and disabling it keeps the points armed for remote control.
  ASSERT_TRUE(configure("remote/local=fail(EIO)").is_ok());
  EXPECT_EQ(hit("remote/local"), EIO);
  disable_all();
  EXPECT_TRUE(points::is_armed());

  // The parent enables remote/other (-e form, failnum 1) first, then remote/point (failnum 7).
  const auto deadline = std::chrono::steady_clock::now() + generous;
  int code = 0;
  while ((code = hit("remote/point")) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(code, 7);
  EXPECT_EQ(hit("remote/other"), 1);
  EXPECT_EQ(hit("remote/not-enabled"), 0);
  EXPECT_GE(counter("remote/point").fires, 1u);
}

TEST(remote_control, fiu_ctrl_enables_points_of_a_running_process) {
  if (!compiled_in()) GTEST_SKIP() << "fault points are compiled out";
  if (access(fiu_ctrl, X_OK) != 0) GTEST_SKIP() << fiu_ctrl << " is not installed";

  pid_t child = testing::spawn_self("remote_control.DISABLED_child_obeys_fiu_ctrl", {"FAULTLINE_FIU_CTRL=1"});
  ASSERT_GT(child, 0);
  const std::filesystem::path pipe = default_fifo_basename() + "-" + std::to_string(child) + ".in";
  const auto deadline = std::chrono::steady_clock::now() + generous;
  while (!std::filesystem::exists(pipe) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(std::filesystem::exists(pipe)) << "the child never opened " << pipe;

  EXPECT_EQ(run_fiu_ctrl({"-e", "remote/other", std::to_string(child)}), 0);
  EXPECT_EQ(run_fiu_ctrl({"-c", "enable name=remote/point,failnum=7", std::to_string(child)}), 0);
  EXPECT_EQ(testing::wait_exit(child, generous), 0);
  EXPECT_FALSE(std::filesystem::exists(pipe)) << "libfiu removes its pipes at exit";
}

TEST(remote_control, reports_a_pipe_that_cannot_be_made) {
  if (!compiled_in()) GTEST_SKIP() << "fault points are compiled out";
  core::status s = enable_remote_control("/nonexistent-dir/fiu-ctrl");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.message().rfind("fiu_rc_fifo /nonexistent-dir/fiu-ctrl: cannot create the remote-control pipes", 0), 0u)
      << s.message();
  EXPECT_FALSE(remote_control_enabled());
  EXPECT_FALSE(points::is_armed()) << "a failed attempt leaves the points disarmed";
}

}  // namespace
}  // namespace faultline::faults
