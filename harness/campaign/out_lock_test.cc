// out_dir_lock: one live campaign per output directory. The goal: while one process holds a
// directory, every other acquire (another process, or a second lock in the same process) is
// refused with errc::busy and a message naming the holder's pid; a holder killed by SIGKILL
// blocks nobody; the lock's descriptor never reaches a spawned program. Method: the holders and
// the second acquirers are re-execs of this binary running one DISABLED_ child test (as
// GoogleTest's threadsafe death tests do), reporting through a file; the holder is SIGKILLed.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "core/testing/child.h"
#include "harness/campaign/out_lock.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* role_env = "FAULTLINE_OUT_LOCK_ROLE";
constexpr const char* dir_env = "FAULTLINE_OUT_LOCK_DIR";
constexpr const char* report_env = "FAULTLINE_OUT_LOCK_REPORT";
constexpr int exit_refused = 3;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Written whole or not at all: the parent polls for it.
void report(const std::string& text) {
  const fs::path path = std::getenv(report_env);
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream(tmp, std::ios::binary) << text;
  fs::rename(tmp, path);
}

// The child's roles: `hold` acquires and waits to be killed (60 s at most); `try` acquires and
// exits 0 (it got the lock) or exit_refused; `fds` lists what its descriptors point to. A run of
// this binary without the variables does nothing.
TEST(out_lock_child, DISABLED_run) {
  const char* role = std::getenv(role_env);
  const char* dir = std::getenv(dir_env);
  if (role == nullptr || dir == nullptr || std::getenv(report_env) == nullptr) GTEST_SKIP() << "only as a spawned child";
  const std::string r = role;
  if (r == "fds") {
    std::string text;
    for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      text += e.path().filename().string() + " -> " + fs::read_symlink(e.path(), ec).string() + "\n";
    }
    report(text);
    std::_Exit(0);
  }
  auto lock = out_dir_lock::acquire(dir);
  if (!lock) {
    report("refused " + std::string(core::to_string(lock.code())) + ": " + lock.error().message());
    std::_Exit(exit_refused);
  }
  report("acquired");
  if (r == "hold") std::this_thread::sleep_for(60s);
  std::_Exit(0);
}

// A child of this binary in `role`, killed and reaped by the destructor if still running.
class child_process {
 public:
  child_process(const std::string& role, const fs::path& dir, fs::path report)
      : report_(std::move(report)) {
    fs::remove(report_);
    pid_ = faults::testing::spawn_self("out_lock_child.DISABLED_run",
                                       {std::string(role_env) + "=" + role, std::string(dir_env) + "=" + dir.string(),
                                        std::string(report_env) + "=" + report_.string()},
                                       {.drop_env_prefix = "FAULTLINE_OUT_LOCK_", .quiet_stdout = true});
  }
  ~child_process() {
    if (pid_ > 0) faults::testing::wait_exit(pid_, 0ms, false);
  }
  pid_t pid() const { return pid_; }
  // The child's report, waiting up to `bound` for it ("" when none came).
  std::string report(std::chrono::milliseconds bound = 10s) const {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!fs::exists(report_) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return slurp(report_);
  }
  // Exit code, 128 + signal, or -1 (killed at the deadline).
  int wait(std::chrono::milliseconds bound = 10s) {
    const int code = faults::testing::wait_exit(pid_, bound);
    pid_ = -1;
    return code;
  }

 private:
  fs::path report_;
  pid_t pid_ = -1;
};

class out_lock : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("faultline-out-lock-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path out() const { return root_ / "out"; }
  fs::path report(const std::string& name) const { return root_ / (name + ".report"); }

  fs::path root_;
};

TEST_F(out_lock, another_process_is_refused_naming_the_holder_until_the_holder_is_killed) {
  child_process holder("hold", out(), report("holder"));
  ASSERT_GT(holder.pid(), 0);
  ASSERT_EQ(holder.report(), "acquired");
  const std::string holder_pid = "pid " + std::to_string(holder.pid());

  child_process second("try", out(), report("second"));
  ASSERT_EQ(second.wait(), exit_refused) << second.report();
  const std::string refused = second.report();
  EXPECT_EQ(refused.rfind("refused busy: ", 0), 0u) << refused;
  EXPECT_NE(refused.find(holder_pid), std::string::npos) << refused;
  EXPECT_NE(refused.find(out().string()), std::string::npos) << refused;

  // This process too; and the holder's command line comes with its pid.
  {
    auto here = out_dir_lock::acquire(out());
    ASSERT_FALSE(here.has_value());
    EXPECT_EQ(here.code(), core::errc::busy);
    EXPECT_NE(here.error().message().find(holder_pid + " ("), std::string::npos) << here.error().message();
    EXPECT_NE(here.error().message().find("out_lock_child.DISABLED_run"), std::string::npos) << here.error().message();
  }

  ASSERT_EQ(::kill(holder.pid(), SIGKILL), 0);
  ASSERT_EQ(holder.wait(), 128 + SIGKILL);
  // The dead holder's pid is still in the file: only a hint, the flock is gone with it.
  auto after = out_dir_lock::acquire(out());
  ASSERT_TRUE(after.has_value()) << after.error().message();
  EXPECT_EQ(slurp(out() / out_lock_file).rfind(std::to_string(::getpid()) + "\n", 0), 0u);

  child_process third("try", out(), report("third"));
  ASSERT_EQ(third.wait(), exit_refused) << third.report();
  EXPECT_NE(third.report().find("pid " + std::to_string(::getpid())), std::string::npos) << third.report();
}

TEST_F(out_lock, released_at_its_end_and_never_by_a_moved_from_lock) {
  std::optional<out_dir_lock> held;
  {
    auto first = out_dir_lock::acquire(out());
    ASSERT_TRUE(first.has_value()) << first.error().message();
    held.emplace(std::move(*first));
  }  // `first`, moved from, is destroyed here
  EXPECT_EQ(held->dir(), out());
  child_process refused("try", out(), report("refused"));
  EXPECT_EQ(refused.wait(), exit_refused) << refused.report();

  held.reset();
  EXPECT_FALSE(fs::exists(out() / out_lock_file)) << "a released lock leaves its file behind";
  child_process next("try", out(), report("next"));
  EXPECT_EQ(next.wait(), 0) << next.report();
  EXPECT_EQ(next.report(), "acquired");
}

TEST_F(out_lock, one_process_cannot_hold_a_directory_twice) {
  auto first = out_dir_lock::acquire(out());
  ASSERT_TRUE(first.has_value()) << first.error().message();
  auto second = out_dir_lock::acquire(out());
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.code(), core::errc::busy);
  EXPECT_NE(second.error().message().find("already held by this process"), std::string::npos) << second.error().message();
  EXPECT_TRUE(out_dir_lock::acquire(root_ / "elsewhere").has_value()) << "another directory is another lock";
}

TEST_F(out_lock, a_spawned_program_does_not_inherit_the_lock) {
  auto lock = out_dir_lock::acquire(out());
  ASSERT_TRUE(lock.has_value()) << lock.error().message();
  child_process lister("fds", out(), report("fds"));
  ASSERT_EQ(lister.wait(), 0);
  const std::string fds = lister.report();
  ASSERT_NE(fds.find("/proc/"), std::string::npos) << "the listing's own directory is missing: " << fds;
  EXPECT_EQ(fds.find(out_lock_file), std::string::npos) << fds;
}

TEST_F(out_lock, a_file_of_garbage_or_of_a_dead_pid_does_not_block) {
  fs::create_directories(out());
  std::ofstream(out() / out_lock_file) << "not a pid\n";
  EXPECT_TRUE(out_dir_lock::acquire(out()).has_value());
  std::ofstream(out() / out_lock_file) << "999999999\nfaultline soak\n";
  EXPECT_TRUE(out_dir_lock::acquire(out()).has_value());
}

TEST_F(out_lock, an_output_directory_that_cannot_be_created_is_an_io_error) {
  std::ofstream(root_ / "file") << "x";
  auto r = out_dir_lock::acquire(root_ / "file" / "out");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.code(), core::errc::io_error) << r.error().message();
}

}  // namespace
}  // namespace faultline::harness
