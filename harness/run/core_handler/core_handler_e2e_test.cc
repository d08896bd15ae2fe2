// faultline-core-handler end to end, with the kernel: every test installs the built handler
// (install_core_handler, which crashes a test program through it first) over core_pattern
// "core", crashes fl_core_crasher and looks where its core went. The goal is the handler's
// promise: a process with FAULTLINE_RUN_DIR gets RUN_DIR/core.PID even when its directory holds
// a core/ folder (where "core" gets nothing) and however many crash at once in one directory
// (where "core" keeps one); any other process gets what the previous pattern would have given it,
// specifiers, core_uses_pid and RLIMIT_CORE included, written as its own user (a directory only
// root can write gets nothing); the harness's capture_core reads a run's core from the run
// directory; installing twice changes nothing, a foreign pipe or a pattern too long is refused,
// a handler the kernel runs but that brings no core back is not left installed, and removing
// restores the previous pattern. The tests change a machine-wide setting: they need root and a
// writable /proc/sys/kernel/core_pattern (they skip otherwise, saying which), hold the CTest lock
// core_pattern, and the fixture puts the original pattern back whatever happens.
#include "harness/run/core_handler/core_handler.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/detail/sys.h"
#include "harness/run/core_dump.h"
#include "harness/run/dwfl_stacks.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* core_pattern_path = "/proc/sys/kernel/core_pattern";
constexpr uid_t nobody = 65534;

fs::path bin(const std::string& name) { return detail::self_dir() / name; }

std::string pattern_now() {
  auto text = detail::read_file(core_pattern_path, 4096);
  std::string s = text ? *text : "";
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

bool write_pattern(const std::string& text) {
  std::ofstream f(core_pattern_path);
  f << text;
  f.flush();
  return f.good() && pattern_now() == text;
}

bool uses_pid() {
  auto text = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  return text && text->rfind('1', 0) == 0;
}

// A fresh directory under /tmp, owned by `owner`, removed with everything in it.
class temp_dir {
 public:
  explicit temp_dir(uid_t owner = 0) {
    char name[] = "/tmp/fl_core_handler.XXXXXX";
    if (::mkdtemp(name)) path_ = name;
    ::chmod(path_.c_str(), 0755);
    if (owner != 0 && ::chown(path_.c_str(), owner, owner) != 0) path_.clear();
  }
  ~temp_dir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// fl_core_crasher, started in `cwd` (as `uid`), with FAULTLINE_RUN_DIR when `run_dir` is given.
// With --wait-stdin it crashes when release() closes its stdin.
class crasher {
 public:
  crasher(const fs::path& cwd, const std::optional<fs::path>& run_dir, const std::vector<std::string>& args = {},
          uid_t uid = 0) {
    std::vector<std::string> argv_s = {bin("fl_core_crasher").string()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s = {"PATH=/usr/bin:/bin"};
    if (run_dir) env_s.push_back("FAULTLINE_RUN_DIR=" + run_dir->string());
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    for (auto& e : env_s) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    const std::string dir = cwd.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[0], STDIN_FILENO);
      if (uid != 0 && (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(126);
      if (::chdir(dir.c_str()) != 0) ::_exit(125);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[0]);
    release_fd_ = fds[1];
  }
  ~crasher() {
    release();
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void release() {
    if (release_fd_ >= 0) ::close(release_fd_);
    release_fd_ = -1;
  }
  // Its wait status, once it has ended (at most 30 s).
  std::optional<int> wait() {
    release();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (pid_ > 0 && !status_ && std::chrono::steady_clock::now() < deadline) {
      int s = 0;
      if (::waitpid(pid_, &s, WNOHANG) == pid_) status_ = s;
      else std::this_thread::sleep_for(2ms);
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  std::optional<int> status_;
};

::testing::AssertionResult crashed_with_core(crasher& c) {
  auto s = c.wait();
  if (!s) return ::testing::AssertionFailure() << "pid " << c.pid() << " did not end in 30 s";
  if (!WIFSIGNALED(*s) || WTERMSIG(*s) != SIGSEGV)
    return ::testing::AssertionFailure() << "pid " << c.pid() << " did not die of SIGSEGV: wait status " << *s;
  return ::testing::AssertionSuccess();
}

// Whether `core` becomes a core of `pid` (its notes say so) within 10 s: the kernel does not wait
// for the handler, which may still be writing when the crashed process has ended.
::testing::AssertionResult is_core_of(const fs::path& core, pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string last = "no such file";
  while (std::chrono::steady_clock::now() < deadline) {
    auto id = read_core_identity(core);
    if (id && id->pid == pid) return ::testing::AssertionSuccess();
    last = id ? "a core of pid " + std::to_string(id->pid) : id.error().message();
    std::this_thread::sleep_for(5ms);
  }
  return ::testing::AssertionFailure() << core << " is not a core of pid " << pid << ": " << last;
}

// Waits for whatever handler is still at work to finish (no file appears later than this).
void settle() { std::this_thread::sleep_for(300ms); }

class core_handler_e2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the tests write /proc/sys/kernel/core_pattern";
    // core_pattern is the machine's: two copies of this suite at once (two CI jobs, a hunt at
    // --jobs 2) took turns on it per test, and one restored the other's pattern as "the original"
    // (3 of 60 runs failed so). Each test holds this lock, machine-wide, from reading the pattern to
    // putting it back; CTest's RESOURCE_LOCK orders it against the other tests that crash.
    lock_fd_ = ::open("/tmp/faultline-core-pattern.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(lock_fd_, 0) << "/tmp/faultline-core-pattern.lock: " << std::strerror(errno);
    while (::flock(lock_fd_, LOCK_EX) != 0) ASSERT_EQ(errno, EINTR) << std::strerror(errno);
    original_ = pattern_now();
    if (::access(core_pattern_path, W_OK) != 0 || !write_pattern(original_))
      GTEST_SKIP() << "/proc/sys/kernel/core_pattern is not writable here (in a container /proc/sys is often read-only)";
    // A run that died before its TearDown left ours: the pattern to go back to is its previous.
    if (auto ours = parse_core_handler_pattern(original_)) original_ = ours->previous.value_or("core");
    restore_ = true;
    ASSERT_TRUE(write_pattern("core"));
    install("core");
  }
  void TearDown() override {
    if (restore_) {
      EXPECT_TRUE(write_pattern(original_)) << "core_pattern could not be restored to " << original_;
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  }

  // Installs the built handler over `previous`.
  void install(const std::string& previous) {
    ASSERT_TRUE(write_pattern(previous));
    auto s = install_core_handler(bin(std::string(core_handler_name)));
    if (!s && s.error().message().find("root's alone") != std::string::npos)
      GTEST_SKIP() << "the built handler cannot be installed from here: " << s.error().message();
    ASSERT_TRUE(s) << s.error().message();
    ASSERT_TRUE(s->installed);
    ASSERT_EQ(s->previous, previous);
  }

  std::string original_;
  bool restore_ = false;
  int lock_fd_ = -1;
};

TEST_F(core_handler_e2e, a_runs_core_lands_in_its_run_directory_even_beside_a_core_folder) {
  temp_dir cwd, run;
  fs::create_directory(cwd.path() / "core");  // "core" cannot be created here
  const auto since = std::chrono::system_clock::now();
  crasher c(cwd.path(), run.path());
  ASSERT_TRUE(crashed_with_core(c));
  const fs::path core = handler_core_path(run.path(), c.pid());
  EXPECT_TRUE(is_core_of(core, c.pid()));
  settle();
  EXPECT_EQ(entries(run.path()), std::vector<std::string>{core.filename().string()}) << "no .part is left";
  EXPECT_EQ(entries(cwd.path()), std::vector<std::string>{"core"});
  EXPECT_TRUE(entries(cwd.path() / "core").empty());
  struct stat st {};
  ASSERT_EQ(::stat(core.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // The harness: cores can be used whatever cwd holds, and capture_core finds it in the run dir.
  EXPECT_EQ(enable_core_capture(), "");
  EXPECT_EQ(core_destination_problem(cwd.path()), "");
  EXPECT_TRUE(core_names_are_unique());
  const fs::path out = run.path() / "crash-stacks.txt";
  auto s = capture_core({c.pid()}, cwd.path(), run.path(), since, out);
  ASSERT_TRUE(s) << s.message();
  auto text = detail::read_file(out);
  ASSERT_TRUE(text);
  EXPECT_NE(text->find("=== process " + std::to_string(c.pid()) + " (core) thread "), std::string::npos) << *text;
  EXPECT_FALSE(fs::exists(core)) << "capture_core deletes the core it read";
}

TEST_F(core_handler_e2e, runs_crashing_at_once_in_one_directory_all_keep_their_cores) {
  constexpr int n = 4;
  temp_dir cwd;
  std::vector<std::unique_ptr<temp_dir>> runs;
  std::vector<std::unique_ptr<crasher>> crashers;
  for (int i = 0; i < n; ++i) {
    runs.push_back(std::make_unique<temp_dir>());
    crashers.push_back(std::make_unique<crasher>(cwd.path(), runs.back()->path(), std::vector<std::string>{"--wait-stdin"}));
  }
  std::this_thread::sleep_for(100ms);  // all of them blocked in read()
  for (auto& c : crashers) c->release();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(crashed_with_core(*crashers[i]));
    EXPECT_TRUE(is_core_of(handler_core_path(runs[i]->path(), crashers[i]->pid()), crashers[i]->pid()));
  }
  settle();
  EXPECT_TRUE(entries(cwd.path()).empty());
}

TEST_F(core_handler_e2e, the_zeros_of_untouched_pages_become_holes) {
  temp_dir cwd, run;
  crasher c(cwd.path(), run.path(), {"--sparse", "64"});
  ASSERT_TRUE(crashed_with_core(c));
  const fs::path core = handler_core_path(run.path(), c.pid());
  ASSERT_TRUE(is_core_of(core, c.pid()));
  settle();
  struct stat st {};
  ASSERT_EQ(::stat(core.c_str(), &st), 0);
  EXPECT_GE(st.st_size, 64 << 20) << "the mapping is in the core, at its full length";
  EXPECT_LT(st.st_blocks * 512, 16 << 20) << "its 64 MiB of zeros take no room";
}

TEST_F(core_handler_e2e, a_process_outside_a_run_gets_its_core_where_core_would_have_put_it) {
  temp_dir cwd;
  crasher c(cwd.path(), std::nullopt);
  ASSERT_TRUE(crashed_with_core(c));
  const std::string name = uses_pid() ? "core." + std::to_string(c.pid()) : "core";
  EXPECT_TRUE(is_core_of(cwd.path() / name, c.pid()));
  settle();
  EXPECT_EQ(entries(cwd.path()), std::vector<std::string>{name});

  // And beside a core/ folder, like the kernel: nothing, and the crash still ends.
  temp_dir tree;
  fs::create_directory(tree.path() / "core");
  crasher blocked(tree.path(), std::nullopt);
  ASSERT_TRUE(crashed_with_core(blocked));
  settle();
  EXPECT_EQ(entries(tree.path()), std::vector<std::string>{"core"});
  if (!uses_pid()) {
    EXPECT_TRUE(entries(tree.path() / "core").empty());
  }
}

TEST_F(core_handler_e2e, the_previous_patterns_specifiers_and_directories_are_honoured) {
  temp_dir cwd;
  fs::create_directory(cwd.path() / "cores");
  install("cores/core.%e.%p.%s");
  crasher c(cwd.path(), std::nullopt);
  ASSERT_TRUE(crashed_with_core(c));
  // The comm is the program's name (15 characters: all of it); SIGSEGV is 11.
  const std::string name = "core.fl_core_crasher." + std::to_string(c.pid()) + ".11";
  EXPECT_TRUE(is_core_of(cwd.path() / "cores" / name, c.pid()))
      << "in cores/: " << ::testing::PrintToString(entries(cwd.path() / "cores"));
}

TEST_F(core_handler_e2e, cores_are_written_as_the_crashing_processs_user) {
  // Owned by nobody: its core is nobody's.
  temp_dir own(nobody);
  ASSERT_FALSE(own.path().empty());
  crasher c(own.path(), std::nullopt, {}, nobody);
  ASSERT_TRUE(crashed_with_core(c));
  const std::string name = uses_pid() ? "core." + std::to_string(c.pid()) : "core";
  ASSERT_TRUE(is_core_of(own.path() / name, c.pid()));
  struct stat st {};
  ASSERT_EQ(::stat((own.path() / name).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody);

  // A directory only root can write: the handler (root) could, nobody cannot, so nothing. A run
  // directory that is not nobody's is not used either.
  temp_dir roots;
  temp_dir roots_run;
  crasher d(roots.path(), roots_run.path(), {}, nobody);
  ASSERT_TRUE(crashed_with_core(d));
  settle();
  EXPECT_TRUE(entries(roots.path()).empty()) << "written as root";
  EXPECT_TRUE(entries(roots_run.path()).empty()) << "a run directory of another user was used";
}

TEST_F(core_handler_e2e, rlimit_core_bounds_the_core_and_zero_means_none) {
  temp_dir cwd, run;
  crasher none(cwd.path(), run.path(), {"--limit", "0"});
  ASSERT_TRUE(crashed_with_core(none));
  crasher small(cwd.path(), run.path(), {"--limit", "8192"});
  ASSERT_TRUE(crashed_with_core(small));
  crasher outside(cwd.path(), std::nullopt, {"--limit", "8192"});
  ASSERT_TRUE(crashed_with_core(outside));
  settle();
  EXPECT_FALSE(fs::exists(handler_core_path(run.path(), none.pid())));
  const fs::path bounded = handler_core_path(run.path(), small.pid());
  ASSERT_TRUE(fs::exists(bounded)) << ::testing::PrintToString(entries(run.path()));
  EXPECT_EQ(fs::file_size(bounded), 8192u);
  const fs::path file = cwd.path() / (uses_pid() ? "core." + std::to_string(outside.pid()) : "core");
  ASSERT_TRUE(fs::exists(file)) << ::testing::PrintToString(entries(cwd.path()));
  EXPECT_LE(fs::file_size(file), 8192u);
}

TEST_F(core_handler_e2e, installing_twice_changes_nothing_and_removing_restores_the_previous_pattern) {
  const std::string once = pattern_now();
  auto again = install_core_handler(bin(std::string(core_handler_name)));
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(pattern_now(), once);
  auto removed = remove_core_handler();
  ASSERT_TRUE(removed) << removed.error().message();
  EXPECT_FALSE(removed->installed);
  EXPECT_EQ(pattern_now(), "core");
  auto nothing = remove_core_handler();
  ASSERT_TRUE(nothing);
  EXPECT_EQ(pattern_now(), "core");

  install("core.%p");
  ASSERT_TRUE(remove_core_handler());
  EXPECT_EQ(pattern_now(), "core.%p");
}

TEST_F(core_handler_e2e, refusals_leave_core_pattern_as_it_was) {
  ASSERT_TRUE(remove_core_handler());
  const std::string foreign = "|/bin/false %p";
  ASSERT_TRUE(write_pattern(foreign));
  auto s = install_core_handler(bin(std::string(core_handler_name)));
  const std::string after_foreign = pattern_now();
  ASSERT_TRUE(write_pattern("core"));  // at once: every crash on the machine goes to /bin/false meanwhile
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("core_pattern pipes cores to " + foreign), std::string::npos) << s.error().message();
  EXPECT_EQ(after_foreign, foreign);

  const std::string long_pattern = "/tmp/" + std::string(110, 'x') + "/core";
  ASSERT_TRUE(write_pattern(long_pattern));
  auto too_long = install_core_handler(bin(std::string(core_handler_name)));
  EXPECT_EQ(pattern_now(), long_pattern);
  ASSERT_TRUE(write_pattern("core"));
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message().find("core_pattern holds 127"), std::string::npos) << too_long.error().message();
}

TEST_F(core_handler_e2e, a_handler_that_brings_no_core_back_is_not_left_installed) {
  ASSERT_TRUE(remove_core_handler());
  // Named like the handler and run by the kernel, but it only drains the core.
  temp_dir dir;
  const fs::path fake = dir.path() / std::string(core_handler_name);
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\n[ \"$1\" = --self-test-crash ] && exec " << bin("fl_core_crasher").string() << "\nexec cat >/dev/null\n";
  }
  fs::permissions(fake, fs::perms(0755));
  auto s = install_core_handler(fake);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), core::errc::unavailable) << s.error().message();
  EXPECT_NE(s.error().message().find("core_pattern is 'core' again"), std::string::npos) << s.error().message();
  EXPECT_EQ(pattern_now(), "core");
}

}  // namespace
}  // namespace faultline::harness
