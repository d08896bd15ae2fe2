// What the agent's tests share (agent_test.cc: install, markers, crashes, stack dumps;
// agent_preload_test.cc: the preload and the phase table): the child programs and a fresh run
// directory per test, spawning a child (posix_spawn, never fork) with its output on pipes, and
// parsers of the files of protocol.h.
#pragma once

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

namespace faultline::agent::test_support {

using namespace std::chrono_literals;

inline const std::string child_program = FAULTLINE_AGENT_TEST_CHILD;
inline const std::string plain_program = FAULTLINE_AGENT_TEST_PLAIN;
inline const std::string preload_library = FAULTLINE_AGENT_PRELOAD;
inline constexpr auto child_timeout = 60s;

inline std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

inline std::vector<std::string> lines_of(const std::string& text) {
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
inline std::vector<std::string> child_env(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string text = *entry;
    if (text.rfind("FAULTLINE_", 0) == 0 || text.rfind("LD_PRELOAD=", 0) == 0) continue;
    env.push_back(text);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

inline std::vector<std::string> run_env(const run_directory& dir, std::vector<std::string> extra = {}) {
  extra.push_back(std::string(run_dir_env) + "=" + dir.path());
  return child_env(extra);
}

inline std::vector<std::string> preload_env(const run_directory& dir) {
  return run_env(dir, {"LD_PRELOAD=" + preload_library});
}

inline std::vector<char*> c_strings(std::vector<std::string>& strings) {
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

inline frame_line parse_frame(const std::string& line) {
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

inline crash_report parse_crash(const std::string& text) {
  crash_report report;
  std::vector<std::string> lines = lines_of(text);
  if (lines.size() > 0) report.signal_line = lines[0];
  if (lines.size() > 1) report.thread_line = lines[1];
  for (std::size_t i = 2; i < lines.size(); ++i) report.frames.push_back(parse_frame(lines[i]));
  return report;
}

// Index of the first frame whose function contains `text`, or -1.
inline int find_frame(const std::vector<frame_line>& frames, const std::string& text) {
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

inline stack_dump parse_stacks(const std::string& text) {
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
inline std::string wait_for_dumps(const run_directory& dir, pid_t pid, std::size_t dumps) {
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

inline std::set<pid_t> task_ids(pid_t pid) {
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

}  // namespace faultline::agent::test_support
