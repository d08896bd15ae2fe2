// The shared test main's crash stacks (crash_stacks.h): a test process that dies of SIGSEGV with
// FAULTLINE_TEST_CRASH_STACKS=1 prints every thread's stack, naming the function that faulted,
// and still dies of SIGSEGV; without the variable it prints nothing of the kind. Method: a child
// test re-executed from this binary faults in a named function; its stderr goes to a file.
#include "core/testing/crash_stacks.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/testing/child.h"

namespace faultline::core::testing {

// Outside the anonymous namespace and never inlined: the reader names it from the symbol table.
[[gnu::noinline]] void crash_stacks_test_faults_here(volatile int* p) { *p = 1; }

namespace {

bool have_reader() {
  return std::system("command -v eu-stack >/dev/null 2>&1 || command -v gdb >/dev/null 2>&1") == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct crashed {
  int status = 0;
  std::string stderr_text;
};

crashed crash_a_child(bool stacks_on) {
  const std::string err = ::testing::TempDir() + "/crash-stacks-" + std::to_string(::getpid()) +
                          (stacks_on ? "-on" : "-off") + ".err";
  std::vector<std::string> env{"FAULTLINE_CRASH_STACKS_CHILD=" + err};
  env.push_back(stacks_on ? "FAULTLINE_TEST_CRASH_STACKS=1" : "FAULTLINE_TEST_CRASH_STACKS=0");
  const pid_t pid = spawn_self("crash_stacks_child.DISABLED_faults", env,
                               {.drop_env_prefix = "FAULTLINE_", .quiet_stdout = true});
  crashed c;
  c.status = pid > 0 ? wait_exit(pid, std::chrono::seconds(60)) : -2;
  c.stderr_text = slurp(err);
  ::unlink(err.c_str());
  return c;
}

}  // namespace

TEST(crash_stacks_child, DISABLED_faults) {
  const char* err = std::getenv("FAULTLINE_CRASH_STACKS_CHILD");  // where its stderr goes
  if (err == nullptr) return;
  const int fd = ::open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << err;
  ASSERT_EQ(::dup2(fd, STDERR_FILENO), STDERR_FILENO);
  ::close(fd);
  crash_stacks_test_faults_here(nullptr);
}

TEST(crash_stacks, a_test_process_that_segfaults_prints_its_stack_and_still_dies_of_sigsegv) {
  if (!have_reader()) GTEST_SKIP() << "neither eu-stack nor gdb on PATH";
  const crashed c = crash_a_child(true);
  EXPECT_EQ(c.status, 128 + SIGSEGV) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("dies of SIGSEGV (signal 11)"), std::string::npos) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("crash_stacks_test_faults_here"), std::string::npos) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find("*** end of the stacks"), std::string::npos) << c.stderr_text;
}

TEST(crash_stacks, without_the_variable_nothing_is_installed) {
  const crashed c = crash_a_child(false);
  EXPECT_EQ(c.status, 128 + SIGSEGV) << c.stderr_text;
  EXPECT_EQ(c.stderr_text.find("***"), std::string::npos) << c.stderr_text;
}

}  // namespace faultline::core::testing
