// Tests of the in-process agent, watched from outside as the runner sees it: each test runs a
// child program (posix_spawn, never fork) in a fresh run directory and checks the files of
// protocol.h, the child's output and how it died. faultline_agent_test_child links the agent;
// faultline_agent_test_plain knows nothing of it and gets libfaultline_agent.so by LD_PRELOAD.
// Waits are bounded but generous (a loaded 2-core machine); nothing asserts a duration.
#include "faults/preload/agent.h"

#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "faults/preload/phase_table.h"
#include "faults/preload/protocol.h"

extern char** environ;

namespace faultline::agent {
namespace {

using namespace std::chrono_literals;

const std::string child_program = FAULTLINE_AGENT_TEST_CHILD;
const std::string plain_program = FAULTLINE_AGENT_TEST_PLAIN;
const std::string preload_library = FAULTLINE_AGENT_PRELOAD;
constexpr auto child_timeout = 60s;

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A fresh run directory, removed with its files afterwards.
class run_directory {
 public:
  run_directory() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/faultline-agent-test-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    EXPECT_NE(::mkdtemp(buffer.data()), nullptr) << std::strerror(errno);
    path_ = real_path(buffer.data());
  }
  ~run_directory() {
    if (DIR* dir = ::opendir(path_.c_str())) {
      while (dirent* entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
      }
      ::closedir(dir);
    }
    ::rmdir(path_.c_str());
  }
  run_directory(const run_directory&) = delete;
  run_directory& operator=(const run_directory&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string file(const char* prefix, pid_t pid) const {
    return path_ + "/" + prefix + std::to_string(pid);
  }
  /// A PID file's text; for phase.PID, which the agent maps at a fixed size, up to its first NUL.
  [[nodiscard]] std::string read(const char* prefix, pid_t pid) const {
    std::string text = read_file(file(prefix, pid));
    if (std::string_view(prefix) == phase_file_prefix) {
      EXPECT_EQ(text.size(), phase_file_bytes) << "phase." << pid << " is mapped at a fixed size";
      text.resize(std::min(text.size(), text.find('\0')));
    }
    return text;
  }
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> found;
    if (DIR* dir = ::opendir(path_.c_str())) {
      while (dirent* entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") found.push_back(name);
      }
      ::closedir(dir);
    }
    std::sort(found.begin(), found.end());
    return found;
  }

 private:
  std::string path_;
};

// The environment for a child: this process's, without anything of faultline's, plus `extra`.
std::vector<std::string> child_env(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string text = *entry;
    if (text.rfind("FAULTLINE_", 0) == 0 || text.rfind("LD_PRELOAD=", 0) == 0) continue;
    env.push_back(text);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<std::string> run_env(const run_directory& dir, std::vector<std::string> extra = {}) {
  extra.push_back(std::string(run_dir_env) + "=" + dir.path());
  return child_env(extra);
}

std::vector<std::string> preload_env(const run_directory& dir) {
  return run_env(dir, {"LD_PRELOAD=" + preload_library});
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// A spawned child with its stdout and stderr on pipes.
class child_process {
 public:
  // `broken_stderr`: the read end of the child's stderr is closed at once, so that writing to
  // stderr raises SIGPIPE in the child.
  child_process(std::vector<std::string> argv, std::vector<std::string> env,
                const std::string& cwd = "", bool broken_stderr = false) {
    // Crashing children must not leave core files behind.
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    int out[2];
    int err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    ::posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    if (!cwd.empty()) ::posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    std::vector<char*> args = c_strings(argv);
    std::vector<char*> envp = c_strings(env);
    int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    EXPECT_EQ(rc, 0) << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
    if (rc != 0) pid_ = -1;
    if (broken_stderr) {
      ::close(err_fd_);
      err_fd_ = -1;
      err_open_ = false;
    }
  }
  ~child_process() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& out() const { return out_; }
  [[nodiscard]] const std::string& err() const { return err_; }

  // Reads output until `line` appears on stdout; false on EOF or after the timeout.
  bool wait_for_line(const std::string& line) {
    auto until = std::chrono::steady_clock::now() + child_timeout;
    while (out_.find(line + "\n") == std::string::npos) {
      if (std::chrono::steady_clock::now() >= until || !pump(100)) return false;
    }
    return true;
  }

  // Reads all output, then reaps the child (SIGKILL after the timeout). Returns the wait status.
  int finish() {
    auto until = std::chrono::steady_clock::now() + child_timeout;
    while (pump(100)) {
      if (std::chrono::steady_clock::now() >= until) {
        ADD_FAILURE() << "child " << pid_ << " did not finish; killing it";
        ::kill(pid_, SIGKILL);
        break;
      }
    }
    return wait();
  }

  [[nodiscard]] bool running() const {
    int status;
    return pid_ > 0 && !reaped_ && ::waitpid(pid_, &status, WNOHANG) == 0;
  }

  int kill_and_reap() {
    ::kill(pid_, SIGKILL);
    return wait();
  }

 private:
  // Reads what is available within `timeout_ms`; false once both pipes reached EOF.
  bool pump(int timeout_ms) {
    pollfd fds[2] = {{out_open_ ? out_fd_ : -1, POLLIN, 0}, {err_open_ ? err_fd_ : -1, POLLIN, 0}};
    if (!out_open_ && !err_open_) return false;
    if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) return false;
    char chunk[4096];
    if (fds[0].revents != 0) {
      ssize_t n = ::read(out_fd_, chunk, sizeof(chunk));
      if (n > 0) out_.append(chunk, n); else out_open_ = false;
    }
    if (fds[1].revents != 0) {
      ssize_t n = ::read(err_fd_, chunk, sizeof(chunk));
      if (n > 0) err_.append(chunk, n); else err_open_ = false;
    }
    return out_open_ || err_open_;
  }

  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool out_open_ = true;
  bool err_open_ = true;
  bool reaped_ = false;
  std::string out_;
  std::string err_;
};

::testing::AssertionResult killed_by(int status, int sig) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == sig) return ::testing::AssertionSuccess();
  if (WIFSIGNALED(status)) {
    return ::testing::AssertionFailure() << "killed by signal " << WTERMSIG(status)
                                         << ", expected " << sig;
  }
  return ::testing::AssertionFailure() << "exited with " << WEXITSTATUS(status)
                                       << ", expected death by signal " << sig;
}

::testing::AssertionResult exited_with(int status, int code) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == code) return ::testing::AssertionSuccess();
  if (WIFSIGNALED(status)) {
    return ::testing::AssertionFailure() << "killed by signal " << WTERMSIG(status);
  }
  return ::testing::AssertionFailure() << "exited with " << WEXITSTATUS(status) << ", expected "
                                       << code;
}

// One parsed frame line: "#K ADDR MODULE+OFFSET FUNCTION".
struct frame_line {
  int index = -1;
  std::string address;
  std::string module;
  std::string offset;
  std::string function;
};

frame_line parse_frame(const std::string& line) {
  frame_line frame;
  std::istringstream in(line);
  std::string index;
  std::string location;
  in >> index >> frame.address >> location;
  std::getline(in >> std::ws, frame.function);
  if (index.size() > 1 && index[0] == '#') frame.index = std::atoi(index.c_str() + 1);
  auto plus = location.rfind('+');
  if (plus != std::string::npos) {
    frame.module = location.substr(0, plus);
    frame.offset = location.substr(plus + 1);
  }
  return frame;
}

struct crash_report {
  std::string signal_line;
  std::string thread_line;
  std::vector<frame_line> frames;
};

crash_report parse_crash(const std::string& text) {
  crash_report report;
  std::vector<std::string> lines = lines_of(text);
  if (lines.size() > 0) report.signal_line = lines[0];
  if (lines.size() > 1) report.thread_line = lines[1];
  for (std::size_t i = 2; i < lines.size(); ++i) report.frames.push_back(parse_frame(lines[i]));
  return report;
}

// Index of the first frame whose function contains `text`, or -1.
int find_frame(const std::vector<frame_line>& frames, const std::string& text) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].function.find(text) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

struct thread_block {
  pid_t tid = 0;
  std::string name;
  std::vector<frame_line> frames;
};

struct stack_dump {
  std::vector<std::vector<thread_block>> dumps;  // one entry per "end"
  bool well_formed = true;
};

stack_dump parse_stacks(const std::string& text) {
  stack_dump result;
  std::vector<thread_block> current;
  bool in_block = false;
  for (const std::string& line : lines_of(text)) {
    if (line.rfind("thread ", 0) == 0 && !in_block) {
      thread_block block;
      std::istringstream in(line.substr(7));
      in >> block.tid;
      std::getline(in >> std::ws, block.name);
      current.push_back(block);
      in_block = true;
    } else if (line.empty() && in_block) {
      in_block = false;
    } else if (line.rfind("#", 0) == 0 && in_block) {
      current.back().frames.push_back(parse_frame(line));
    } else if (line == stacks_end_line && !in_block) {
      result.dumps.push_back(current);
      current.clear();
    } else {
      result.well_formed = false;
    }
  }
  if (!current.empty() || in_block) result.well_formed = false;
  return result;
}

// Waits until stacks.PID holds `dumps` complete dumps.
std::string wait_for_dumps(const run_directory& dir, pid_t pid, std::size_t dumps) {
  auto until = std::chrono::steady_clock::now() + child_timeout;
  std::string text;
  while (std::chrono::steady_clock::now() < until) {
    text = dir.read(stacks_file_prefix, pid);
    std::size_t ends = 0;
    for (const std::string& line : lines_of(text)) ends += line == stacks_end_line ? 1 : 0;
    if (ends >= dumps) return text;
    std::this_thread::sleep_for(20ms);
  }
  ADD_FAILURE() << "stack dump " << dumps << " did not complete; have:\n" << text;
  return text;
}

std::set<pid_t> task_ids(pid_t pid) {
  std::set<pid_t> tids;
  std::string path = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* dir = ::opendir(path.c_str())) {
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] >= '0' && entry->d_name[0] <= '9') tids.insert(std::atoi(entry->d_name));
    }
    ::closedir(dir);
  }
  return tids;
}

// --- install ------------------------------------------------------------------------------

TEST(agent_install, does_nothing_without_a_run_dir) {
  child_process child({child_program, "install"}, child_env({}));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "disabled 0\ndisabled 0\nrun_dir (none)\n");
}

TEST(agent_install, fails_with_enoent_for_a_missing_directory) {
  run_directory dir;
  child_process child({child_program, "install"},
                      child_env({std::string(run_dir_env) + "=" + dir.path() + "/missing"}));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "failed " + std::to_string(ENOENT) + "\nfailed " +
                             std::to_string(ENOENT) + "\nrun_dir (none)\n");
  EXPECT_TRUE(dir.names().empty());
}

TEST(agent_install, is_idempotent_and_registers_the_process_once) {
  run_directory dir;
  child_process child({child_program, "install"}, run_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "installed 0\ninstalled 0\nrun_dir " + dir.path() + "\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\n");
}

TEST(agent_install, resolves_a_relative_run_dir_against_the_working_directory) {
  run_directory dir;
  std::string parent = dir.path().substr(0, dir.path().rfind('/'));
  std::string leaf = dir.path().substr(dir.path().rfind('/') + 1);
  child_process child({child_program, "install"},
                      child_env({std::string(run_dir_env) + "=" + leaf}), parent);
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "installed 0\ninstalled 0\nrun_dir " + dir.path() + "\n");
}

// --- markers ------------------------------------------------------------------------------

TEST(agent_mark, appends_markers_in_order_and_rejects_malformed_ones) {
  run_directory dir;
  child_process child({child_program, "marks"}, run_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  // work-end and custom accepted; empty, multi-line, null and over-long markers refused.
  EXPECT_EQ(child.out(), "110000\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nwork-end\ncustom\n");
}

// --- crash handler ------------------------------------------------------------------------

TEST(agent_crash, reports_the_faulting_frame_and_dies_by_the_same_signal) {
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line, "signal " + std::to_string(SIGSEGV) + " SIGSEGV");
  EXPECT_EQ(report.thread_line.rfind("thread " + std::to_string(child.pid()) + " ", 0), 0u)
      << report.thread_line;
  ASSERT_FALSE(report.frames.empty());
  // Frame 0 is the faulting instruction itself: the handler's own frames are gone, and the main
  // thread runs the handler on the agent's alternate stack, so the name is demangled.
  EXPECT_EQ(report.frames[0].index, 0);
  EXPECT_EQ(report.frames[0].function, "agent_test_child::segv_frame(int)");
  EXPECT_EQ(report.frames[0].module, real_path(child_program));
  EXPECT_GE(find_frame(report.frames, "main"), 1);
  for (std::size_t k = 0; k < report.frames.size(); ++k) {
    EXPECT_EQ(report.frames[k].index, static_cast<int>(k));
    EXPECT_EQ(report.frames[k].address.rfind("0x", 0), 0u);
  }
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nwork-end\n");
  EXPECT_NE(child.err().find("faultline-agent: signal 11 SIGSEGV"), std::string::npos)
      << child.err();
  EXPECT_NE(child.err().find("agent_test_child::segv_frame(int)"), std::string::npos);
}

TEST(agent_crash, frame_offsets_are_what_addr2line_takes) {
  if (::access("/usr/bin/addr2line", X_OK) != 0) GTEST_SKIP() << "addr2line not installed";
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  std::string command = "/usr/bin/addr2line -f -C -e '" + report.frames[0].module + "' " +
                        report.frames[0].offset;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[512] = {};
  ASSERT_NE(std::fgets(line, sizeof(line), pipe), nullptr);
  ::pclose(pipe);
  EXPECT_EQ(std::string(line), "agent_test_child::segv_frame(int)\n");
}

TEST(agent_crash, quiet_env_keeps_stderr_clean) {
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir, {std::string(quiet_env) + "=1"}));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  EXPECT_EQ(child.err().find("faultline-agent"), std::string::npos) << child.err();
  EXPECT_TRUE(file_exists(dir.file(crash_file_prefix, child.pid())));
}

TEST(agent_crash, a_stderr_nobody_reads_does_not_change_the_signal) {
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir), "", /*broken_stderr=*/true);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  EXPECT_TRUE(file_exists(dir.file(crash_file_prefix, child.pid())));
}

class agent_crash_signal : public ::testing::TestWithParam<int> {};

TEST_P(agent_crash_signal, is_reported_and_kept) {
  int sig = GetParam();
  run_directory dir;
  child_process child({child_program, "raise", std::to_string(sig)}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), sig)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line.rfind("signal " + std::to_string(sig) + " SIG", 0), 0u)
      << report.signal_line;
  EXPECT_GE(find_frame(report.frames, "agent_test_child::raise_frame(int)"), 0);
}

INSTANTIATE_TEST_SUITE_P(all, agent_crash_signal,
                         ::testing::Values(SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return std::string(sigabbrev_np(param_info.param));
                         });

TEST(agent_crash, names_the_crashing_thread) {
  run_directory dir;
  child_process child({child_program, "thread-segv"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  std::istringstream thread_line(report.thread_line);
  std::string word;
  pid_t tid = 0;
  std::string name;
  thread_line >> word >> tid >> name;
  EXPECT_EQ(word, "thread");
  EXPECT_NE(tid, child.pid());  // not the main thread
  EXPECT_GT(tid, 0);
  EXPECT_EQ(name, "fl-crasher");
  ASSERT_FALSE(report.frames.empty());
  // This thread has no alternate stack from the agent: names stay mangled, still recognisable.
  EXPECT_NE(report.frames[0].function.find("segv_frame"), std::string::npos);
  EXPECT_GE(find_frame(report.frames, "thread_segv_frame"), 1);
}

TEST(agent_crash, reports_a_stack_overflow_from_the_alternate_stack) {
  run_directory dir;
  child_process child({child_program, "stack-overflow"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line, "signal " + std::to_string(SIGSEGV) + " SIGSEGV");
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_child::recurse_frame(int)");
}

TEST(agent_crash, hands_over_to_the_handler_installed_before_it) {
  run_directory dir;
  child_process child({child_program, "chain-segv"}, run_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 42)) << child.err();
  EXPECT_EQ(child.out(), "previous handler ran\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_child::segv_frame(int)");
}

TEST(agent_crash, a_forked_child_reports_under_its_own_pid) {
  run_directory dir;
  child_process parent({child_program, "fork-segv"}, run_env(dir));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  std::istringstream out(parent.out());
  std::string word;
  pid_t forked = 0;
  int status = 0;
  out >> word >> forked >> status;
  ASSERT_EQ(word, "child") << parent.out();
  EXPECT_TRUE(killed_by(status, SIGSEGV));
  EXPECT_EQ(dir.read(phase_file_prefix, forked), "run\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, forked));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_child::segv_frame(int)");
  EXPECT_FALSE(file_exists(dir.file(crash_file_prefix, parent.pid())));
}

TEST(agent_crash, without_a_run_dir_the_signal_is_untouched) {
  child_process child({child_program, "segv-unchecked"}, child_env({}));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  EXPECT_EQ(child.out(), "disabled\n");
  EXPECT_EQ(child.err().find("faultline-agent"), std::string::npos) << child.err();
}

// --- stack dump ---------------------------------------------------------------------------

const thread_block* block_named(const std::vector<thread_block>& blocks, const std::string& name) {
  for (const thread_block& block : blocks) {
    if (block.name == name) return &block;
  }
  return nullptr;
}

TEST(agent_stack_dump, lists_every_thread_and_the_process_survives) {
  run_directory dir;
  child_process child({child_program, "hang", "3"}, run_env(dir));
  ASSERT_TRUE(child.wait_for_line("ready")) << child.err();
  std::set<pid_t> tids = task_ids(child.pid());
  // main, 3 workers, bare, masked (and a sanitizer's own thread, where there is one)
  ASSERT_GE(tids.size(), 6u);

  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  std::string text = wait_for_dumps(dir, child.pid(), 1);
  SCOPED_TRACE("stacks." + std::to_string(child.pid()) + ":\n" + text);
  stack_dump dump = parse_stacks(text);
  EXPECT_TRUE(dump.well_formed);
  ASSERT_EQ(dump.dumps.size(), 1u);
  const std::vector<thread_block>& blocks = dump.dumps[0];

  std::set<pid_t> dumped;
  for (const thread_block& block : blocks) dumped.insert(block.tid);
  EXPECT_EQ(dumped, tids);
  EXPECT_EQ(blocks.size(), tids.size());

  for (int k = 0; k < 3; ++k) {
    const thread_block* worker = block_named(blocks, "fl-worker-" + std::to_string(k));
    ASSERT_NE(worker, nullptr) << "fl-worker-" << k;
    ASSERT_FALSE(worker->frames.empty());
    int blocked =
        find_frame(worker->frames, "agent_test_child::blocked_frame(std::atomic<int>*)");
    ASSERT_GE(blocked, 1);
    // The handler's frames are skipped: above the blocked call there is only libc's read.
    for (int f = 0; f < blocked; ++f) {
      EXPECT_NE(worker->frames[f].module, real_path(child_program)) << worker->frames[f].function;
    }
  }
  const thread_block* bare = block_named(blocks, "fl-bare");
  ASSERT_NE(bare, nullptr);
  int bare_frame = find_frame(bare->frames, "blocked_frame");
  ASSERT_GE(bare_frame, 0);
  EXPECT_EQ(bare->frames[bare_frame].function.rfind("_Z", 0), 0u)
      << "no alternate stack: the name stays mangled";
  const thread_block* masked = block_named(blocks, "fl-masked");
  ASSERT_NE(masked, nullptr);
  EXPECT_TRUE(masked->frames.empty()) << "a thread that blocks the signal cannot answer";
  for (const thread_block& block : blocks) {
    if (block.tid == child.pid()) {
      // Demangled normally; under TSan, which runs handlers late and off the alternate stack,
      // it may stay mangled.
      EXPECT_GE(find_frame(block.frames, "main_wait_frame"), 0);
    }
  }

  EXPECT_TRUE(child.running());
  // A second request appends a second complete dump.
  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  stack_dump again = parse_stacks(wait_for_dumps(dir, child.pid(), 2));
  EXPECT_TRUE(again.well_formed);
  ASSERT_EQ(again.dumps.size(), 2u);
  EXPECT_EQ(again.dumps[1].size(), tids.size());
  EXPECT_TRUE(child.running());
  EXPECT_TRUE(killed_by(child.kill_and_reap(), SIGKILL));
  EXPECT_FALSE(file_exists(dir.file(crash_file_prefix, child.pid())));
}

TEST(agent_stack_dump, gives_up_on_a_thread_that_cannot_answer_and_goes_on) {
  run_directory dir;
  child_process child({child_program, "hang-stuck"}, run_env(dir));
  ASSERT_TRUE(child.wait_for_line("ready")) << child.err();
  std::set<pid_t> tids = task_ids(child.pid());
  ASSERT_GE(tids.size(), 3u);

  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  stack_dump dump = parse_stacks(wait_for_dumps(dir, child.pid(), 1));
  EXPECT_TRUE(dump.well_formed);
  ASSERT_EQ(dump.dumps.size(), 1u);
  EXPECT_EQ(dump.dumps[0].size(), tids.size());
  const thread_block* stuck = block_named(dump.dumps[0], "fl-stuck");
  ASSERT_NE(stuck, nullptr);
  EXPECT_TRUE(stuck->frames.empty());
  const thread_block* worker = block_named(dump.dumps[0], "fl-worker-0");
  ASSERT_NE(worker, nullptr);
  EXPECT_GE(find_frame(worker->frames, "blocked_frame"), 1);
  EXPECT_TRUE(child.running());
}

// --- preload ------------------------------------------------------------------------------

TEST(agent_preload, marks_main_returned_then_exit_and_keeps_the_exit_code) {
  run_directory dir;
  child_process child({plain_program, "return", "7"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 7)) << child.err();
  EXPECT_EQ(child.out(), "ok\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
}

TEST(agent_preload, marks_exit_called_before_main_returns) {
  run_directory dir;
  child_process child({plain_program, "exit", "5"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 5)) << child.err();
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nexit\n");
}

TEST(agent_preload, reports_a_crash_during_work) {
  run_directory dir;
  child_process child({plain_program, "segv"}, preload_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_plain::plain_segv_frame()");
  EXPECT_EQ(report.frames[0].module, real_path(plain_program));
}

TEST(agent_preload, puts_a_crash_in_a_static_destructor_in_the_exit_phase) {
  run_directory dir;
  child_process child({plain_program, "exit-segv"}, preload_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(child.out(), "done\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_plain::plain_exit_segv_frame()");
  bool through_exit = false;  // libc's exit(), reached from the preload's exit()
  for (const frame_line& frame : report.frames) through_exit |= frame.function == "exit";
  EXPECT_TRUE(through_exit);
}

// The crash capture modes of protocol.h: what reaches crash.PID, and the stop handshake.
TEST(agent_preload, minimal_crash_mode_writes_the_header_and_the_faulting_frame_only) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=minimal");
  child_process child({plain_program, "segv"}, env);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line, "signal 11 SIGSEGV");
  ASSERT_EQ(report.frames.size(), 1u);
  // Not demangled in the handler (that takes time): the runner demangles it.
  EXPECT_EQ(report.frames[0].function, "_ZN16agent_test_plain16plain_segv_frameEv");
}

char process_state(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

TEST(agent_preload, stop_crash_mode_tells_the_runner_and_waits_for_sigcont) {
  run_directory dir;
  int channel[2];
  ASSERT_EQ(::pipe(channel), 0);  // the write end is inherited, as the runner's is
  ::fcntl(channel[0], F_SETFD, FD_CLOEXEC);
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=stop");
  env.push_back(std::string(crash_fd_env) + "=" + std::to_string(channel[1]));
  child_process child({plain_program, "segv"}, env);
  ::close(channel[1]);
  pollfd p{channel[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "no crash record from the agent";
  char line[128] = {};
  ASSERT_GT(::read(channel[0], line, sizeof(line) - 1), 0);
  ::close(channel[0]);
  EXPECT_EQ(std::string(line), "crash " + std::to_string(child.pid()) + " " +
                                   std::to_string(child.pid()) + " " + std::to_string(SIGSEGV) + "\n");
  // The whole process stops and stays stopped until it is continued.
  char state = '?';
  for (int i = 0; i < 200 && (state = process_state(child.pid())) != 'T'; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(state, 'T');
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(process_state(child.pid()), 'T');
  EXPECT_EQ(dir.read(crash_file_prefix, child.pid()), "");  // nothing written before SIGCONT
  ::kill(child.pid(), SIGCONT);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_EQ(report.frames.size(), 1u);
  // Not demangled in the handler (that takes time): the runner demangles it.
  EXPECT_EQ(report.frames[0].function, "_ZN16agent_test_plain16plain_segv_frameEv");
}

TEST(agent_preload, stop_crash_mode_without_a_pipe_does_not_stop) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=stop");
  env.push_back(std::string(crash_fd_env) + "=not-a-number");
  child_process child({plain_program, "segv"}, env);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(parse_crash(dir.read(crash_file_prefix, child.pid())).frames.size(), 1u);
}

// Mode off: no crash handler at all (a handler changes how exit races end), the dump signal's
// handler still there (hangs are still dumped).
TEST(agent_preload, off_crash_mode_installs_no_crash_handler) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=off");
  child_process child({plain_program, "hang", "0"}, env);
  ASSERT_TRUE(child.wait_for_line("ready"));
  std::string status = read_file("/proc/" + std::to_string(child.pid()) + "/status");
  auto at = status.find("SigCgt:");
  ASSERT_NE(at, std::string::npos);
  const std::uint64_t caught = std::stoull(status.substr(at + 7, status.find('\n', at) - at - 7), nullptr, 16);
  auto bit = [](int sig) { return std::uint64_t{1} << (sig - 1); };
  EXPECT_EQ(caught & bit(SIGSEGV), 0u);
  EXPECT_EQ(caught & bit(SIGABRT), 0u);
  EXPECT_NE(caught & bit(stack_dump_signal()), 0u);
  EXPECT_TRUE(killed_by(child.kill_and_reap(), SIGKILL));
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\n");
}

// exit/start and exit/end, the preload's own fault points.
TEST(agent_preload, exit_points_fire_in_order_and_are_recorded_as_reached) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back("FAULTLINE_FAULTS=sim/*=fail;exit/start=print;exit/*=print");
  child_process child({plain_program, "return", "3"}, env);
  EXPECT_TRUE(exited_with(child.finish(), 3)) << child.err();
  const std::string& err = child.err();
  auto start = err.find("fault point exit/start reached");
  auto end = err.find("fault point exit/end reached");
  ASSERT_NE(start, std::string::npos) << err;
  ASSERT_NE(end, std::string::npos) << err;
  EXPECT_LT(start, end);
  EXPECT_EQ(dir.read(points_file_prefix, child.pid()), "exit/start\nexit/*\n");
}

TEST(agent_preload, exit_end_comes_after_static_destructors) {
  // The program's static destructor crashes: exit/end, which runs after every destructor, is
  // never reached, while exit/start is.
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back("FAULTLINE_FAULTS=exit/start=print;exit/end=print");
  child_process child({plain_program, "exit-segv"}, env);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(dir.read(points_file_prefix, child.pid()), "exit/start\n");
}

TEST(agent_preload, exit_kill_and_delay_act) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back("FAULTLINE_FAULTS=exit/end=kill");
  child_process killed({plain_program, "return", "0"}, env);
  EXPECT_TRUE(killed_by(killed.finish(), SIGKILL)) << killed.err();

  env.back() = "FAULTLINE_FAULTS=exit/start=delay(300ms)";
  auto begin = std::chrono::steady_clock::now();
  child_process delayed({plain_program, "return", "0"}, env);
  EXPECT_TRUE(exited_with(delayed.finish(), 0)) << delayed.err();
  EXPECT_GE(std::chrono::steady_clock::now() - begin, 300ms);
}

TEST(agent_preload, is_harmless_without_a_run_dir) {
  std::vector<std::string> env = child_env({"LD_PRELOAD=" + preload_library});
  child_process returns({plain_program, "return", "3"}, env);
  EXPECT_TRUE(exited_with(returns.finish(), 3)) << returns.err();
  EXPECT_EQ(returns.out(), "ok\n");
  EXPECT_EQ(returns.err(), "");
  child_process crashes({plain_program, "segv"}, env);
  EXPECT_TRUE(killed_by(crashes.finish(), SIGSEGV));
  EXPECT_EQ(crashes.err().find("faultline-agent"), std::string::npos);
}

TEST(agent_preload, spawned_children_write_their_own_files) {
  run_directory dir;
  child_process parent({plain_program, "spawn"}, preload_env(dir));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  // The spawned program shares stdout and prints its "ok" first.
  std::size_t report = std::min(parent.out().find("child "), parent.out().size());
  std::istringstream out(parent.out().substr(report));
  std::string word;
  pid_t spawned = 0;
  int status = -1;
  out >> word >> spawned >> status;
  ASSERT_EQ(word, "child") << parent.out();
  EXPECT_TRUE(exited_with(status, 0));
  EXPECT_EQ(dir.read(phase_file_prefix, spawned), "run\nmain-returned\nexit\n");
  EXPECT_EQ(dir.read(phase_file_prefix, parent.pid()), "run\nmain-returned\nexit\n");
}

// --- phase table -----------------------------------------------------------------------------

// Makes DIR/phases as the runner does (zeroed, with its header), `taken` slots already handed out.
void make_phase_table(const run_directory& dir, std::uint32_t taken = 0) {
  std::string bytes(phase_table_bytes, '\0');
  phase_table_header header{phase_table_magic, phase_slot_bytes, phase_table_slots, taken};
  std::memcpy(bytes.data(), &header, sizeof header);
  std::ofstream(dir.path() + "/" + phase_table_file, std::ios::binary) << bytes;
}

// The published slots of DIR/phases: pid -> markers, and how many slots were handed out.
std::map<pid_t, std::string> read_phase_table(const run_directory& dir, std::uint32_t* handed = nullptr) {
  std::string bytes = read_file(dir.path() + "/" + phase_table_file);
  EXPECT_EQ(bytes.size(), phase_table_bytes) << "the agent never resizes the table";
  std::map<pid_t, std::string> slots;
  if (bytes.size() != phase_table_bytes) return slots;
  phase_table_header header{};
  std::memcpy(&header, bytes.data(), sizeof header);
  if (handed) *handed = header.next;
  for (std::uint32_t k = 0; k < std::min(header.next, phase_table_slots); ++k) {
    phase_slot slot{};
    std::memcpy(&slot, bytes.data() + (k + 1) * phase_slot_bytes, sizeof slot);
    if (slot.pid == 0) continue;  // not handed to any process (the test made it so)
    EXPECT_TRUE(slots.emplace(slot.pid, std::string(slot.markers, std::min<std::size_t>(slot.used, sizeof slot.markers))).second)
        << "pid " << slot.pid << " holds two slots";
  }
  return slots;
}

TEST(agent_phase_table, each_process_of_a_tree_writes_its_markers_in_a_slot_of_its_own) {
  run_directory dir;
  make_phase_table(dir);
  child_process parent({plain_program, "spawn"}, preload_env(dir));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  std::istringstream out(parent.out().substr(std::min(parent.out().find("child "), parent.out().size())));
  std::string word;
  pid_t spawned = 0;
  out >> word >> spawned;
  ASSERT_EQ(word, "child") << parent.out();
  std::uint32_t handed = 0;
  auto slots = read_phase_table(dir, &handed);
  EXPECT_EQ(handed, 2u);
  EXPECT_EQ(slots[parent.pid()], "run\nmain-returned\nexit\n");
  EXPECT_EQ(slots[spawned], "run\nmain-returned\nexit\n");
  EXPECT_EQ(dir.names(), std::vector<std::string>{phase_table_file}) << "no phase.PID file beside a table";
}

TEST(agent_phase_table, a_forked_child_takes_its_own_slot) {
  run_directory dir;
  make_phase_table(dir);
  child_process parent({child_program, "fork-segv"}, run_env(dir, {"FAULTLINE_AGENT_QUIET=1"}));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  std::istringstream out(parent.out());
  std::string word;
  pid_t forked = 0;
  out >> word >> forked;
  ASSERT_EQ(word, "child") << parent.out();
  auto slots = read_phase_table(dir);
  EXPECT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[forked], "run\n");
  EXPECT_EQ(slots[parent.pid()].rfind("run\n", 0), 0u) << slots[parent.pid()];
}

TEST(agent_phase_table, an_exec_keeps_the_slot_and_its_markers) {
  run_directory dir;
  make_phase_table(dir);
  child_process child({plain_program, "exec", "4"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 4)) << child.err();
  std::uint32_t handed = 0;
  auto slots = read_phase_table(dir, &handed);
  EXPECT_EQ(handed, 1u);
  // The first image marked "run" and never returned from main; the second carried on.
  EXPECT_EQ(slots[child.pid()], "run\nrun\nmain-returned\nexit\n");
}

TEST(agent_phase_table, a_process_that_finds_it_full_writes_its_phase_file) {
  run_directory dir;
  make_phase_table(dir, phase_table_slots);
  child_process child({plain_program, "return", "0"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  std::uint32_t handed = 0;
  EXPECT_TRUE(read_phase_table(dir, &handed).empty());
  EXPECT_EQ(handed, phase_table_slots + 1);
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
}

TEST(agent_phase_table, a_table_of_another_layout_is_left_alone) {
  run_directory dir;
  std::ofstream(dir.path() + "/" + phase_table_file, std::ios::binary) << std::string(phase_table_bytes, 'x');
  child_process child({plain_program, "return", "0"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(read_file(dir.path() + "/" + phase_table_file), std::string(phase_table_bytes, 'x'));
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
}

TEST(agent_preload, dumps_the_stacks_of_a_program_that_knows_nothing_of_it) {
  run_directory dir;
  child_process child({plain_program, "hang", "2"}, preload_env(dir));
  ASSERT_TRUE(child.wait_for_line("ready")) << child.err();
  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  stack_dump dump = parse_stacks(wait_for_dumps(dir, child.pid(), 1));
  EXPECT_TRUE(dump.well_formed);
  ASSERT_EQ(dump.dumps.size(), 1u);
  EXPECT_EQ(dump.dumps[0].size(), 3u);
  for (const char* name : {"fl-plain-0", "fl-plain-1"}) {
    const thread_block* block = block_named(dump.dumps[0], name);
    ASSERT_NE(block, nullptr) << name;
    EXPECT_GE(find_frame(block->frames, "plain_blocked_frame"), 0);
  }
  EXPECT_TRUE(child.running());
}

// The preload goes into C programs too: it must need nothing beyond libc.
TEST(agent_preload, library_needs_only_libc) {
  int fd = ::open(preload_library.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  std::string image(static_cast<std::size_t>(st.st_size), '\0');
  ASSERT_EQ(::pread(fd, image.data(), image.size(), 0), static_cast<ssize_t>(image.size()));
  ::close(fd);
  ASSERT_GE(image.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr header;
  std::memcpy(&header, image.data(), sizeof(header));
  ASSERT_EQ(std::memcmp(header.e_ident, ELFMAG, SELFMAG), 0);
  ASSERT_EQ(header.e_ident[EI_CLASS], ELFCLASS64);
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  ASSERT_LE(header.e_shoff + sections.size() * sizeof(Elf64_Shdr), image.size());
  std::memcpy(sections.data(), image.data() + header.e_shoff, sections.size() * sizeof(Elf64_Shdr));
  std::vector<std::string> needed;
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_type != SHT_DYNAMIC) continue;
    const Elf64_Shdr& strings = sections.at(section.sh_link);
    for (std::size_t at = 0; at + sizeof(Elf64_Dyn) <= section.sh_size; at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry;
      std::memcpy(&entry, image.data() + section.sh_offset + at, sizeof(entry));
      if (entry.d_tag == DT_NEEDED) {
        needed.emplace_back(image.data() + strings.sh_offset + entry.d_un.d_val);
      }
    }
  }
  EXPECT_EQ(needed, std::vector<std::string>{"libc.so.6"});
}

}  // namespace
}  // namespace faultline::agent
