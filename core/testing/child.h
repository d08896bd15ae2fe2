// Test helper: re-executes the running test binary as a child process that runs one test.
//
//   pid_t pid = core::testing::spawn_self("rendezvous.DISABLED_child_meets", {"FAULTLINE_TEST_RV=x"});
//   EXPECT_EQ(core::testing::wait_exit(pid, std::chrono::seconds(30)), 0);
//
// This is GoogleTest's "threadsafe" death-test style applied to cooperating processes: the child
// starts from exec, never from a fork of a process that may already run threads. Child tests are
// named DISABLED_* so that they run only when spawned (the helper passes
// --gtest_also_run_disabled_tests) and check an environment variable so a stray run is a no-op.
// Test-only; header-only.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace faultline::core::testing {

/// How spawn_self starts the child, beyond its filter and extra environment.
struct spawn_options {
  /// Variables of this process's environment starting with this are not passed on (a child
  /// protocol's own variables, which a child spawning a child must not inherit); "" keeps all.
  std::string drop_env_prefix;
  /// The child's stdout goes to /dev/null (its gtest chatter); stderr stays, for its reports.
  bool quiet_stdout = false;
};

/// Starts this binary with --gtest_filter=`filter` and `extra_env` ("NAME=value") added to the
/// environment. Returns the child's pid, or -1 when posix_spawn failed (errno-style code lost).
inline pid_t spawn_self(const std::string& filter, const std::vector<std::string>& extra_env,
                        const spawn_options& options = {}) {
  std::string exe = "/proc/self/exe";
  std::string filter_arg = "--gtest_filter=" + filter;
  std::string disabled_arg = "--gtest_also_run_disabled_tests";
  std::vector<char*> argv{exe.data(), filter_arg.data(), disabled_arg.data(), nullptr};
  std::vector<std::string> env_storage(extra_env);
  std::vector<char*> envp;
  const std::string& drop = options.drop_env_prefix;
  for (char** e = environ; *e != nullptr; ++e) {
    if (drop.empty() || std::string_view(*e).substr(0, drop.size()) != drop) envp.push_back(*e);
  }
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (options.quiet_stdout) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

/// Prints to stderr what a child still running at its deadline was doing: its signal state (from
/// /proc: pending, blocked, caught) and every thread's stack (eu-stack, else gdb, when installed),
/// so that a test whose child hangs says where.
inline void print_hung_child(pid_t pid, std::chrono::milliseconds timeout) {
  const std::string p = std::to_string(pid);
  std::fprintf(stderr, "*** child %s still running after %lld ms; its state and stacks:\n", p.c_str(),
               static_cast<long long>(timeout.count()));
  std::fflush(stderr);
  const std::string command =
      "grep -E '^(State|SigQ|SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt):' /proc/" + p + "/status >&2; "
      "for t in /proc/" + p + "/task/*; do echo \"thread ${t##*/}: $(cat $t/comm) wchan=$(cat $t/wchan 2>/dev/null)"
      " $(grep -E '^(State|SigPnd|SigBlk):' $t/status | tr '\\n\\t' '  ')\" >&2; done; "
      "if command -v eu-stack >/dev/null 2>&1; then eu-stack -p " + p + " >&2 2>&1; "
      "elif command -v gdb >/dev/null 2>&1; then gdb -batch -nx -ex 'thread apply all bt' -p " + p + " >&2 2>&1; fi";
  (void)std::system(command.c_str());
}

/// Waits for `pid` at most `timeout`. Returns its exit code when it exited, 128 + signal when a
/// signal killed it, or -1 when it was still running at the deadline (then, unless the test expects
/// it (`show_if_running` false), its state and stacks are printed; it is SIGKILLed and reaped, so
/// no child outlives the test).
inline int wait_exit(pid_t pid, std::chrono::milliseconds timeout, bool show_if_running = true) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int wstatus = 0;
    pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
      if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    } else if (r < 0 && errno != EINTR) {
      return -1;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (show_if_running) print_hung_child(pid, timeout);
      kill(pid, SIGKILL);
      while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace faultline::core::testing

// The spelling the tests of faults/ and harness/ use (the helper lived in faults/testing/ until it
// moved down to core/, whose own tests need it too).
namespace faultline::faults::testing {
using core::testing::spawn_options;
using core::testing::spawn_self;
using core::testing::wait_exit;
}  // namespace faultline::faults::testing
