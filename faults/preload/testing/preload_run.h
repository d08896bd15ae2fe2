// For tests of the preloaded agent's call points: runs a program with libfaultline_agent.so
// preloaded, a fresh run directory and FAULTLINE_FAULTS, and returns its status and output.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

#include "faults/preload/phase_table.h"

namespace faultline::agent::testing {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct finished {
  pid_t pid = 0;
  int status = 0;
  std::string out, err;
  std::chrono::steady_clock::duration took{};
};

inline bool exited_0(const finished& f) { return WIFEXITED(f.status) && WEXITSTATUS(f.status) == 0; }

/// How many times `what` occurs in `text`.
inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// A run directory (removed at the end) and the runs in it.
class preload_runner {
 public:
  explicit preload_runner(std::string preload) : preload_(std::move(preload)) {
    char pattern[] = "/tmp/fl-preload-run-XXXXXX";
    if (::mkdtemp(pattern) != nullptr) dir_ = pattern;
  }
  ~preload_runner() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  preload_runner(const preload_runner&) = delete;
  preload_runner& operator=(const preload_runner&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  /// Gives the run directory an empty phase table, as faultline's runner does before each run:
  /// the agent then records markers there and hands each process its place (process_index()).
  void make_phase_table() const {
    std::string table(agent::phase_table_bytes, '\0');
    const agent::phase_table_header header{agent::phase_table_magic, agent::phase_slot_bytes,
                                           agent::phase_table_slots, 0};
    std::memcpy(table.data(), &header, sizeof header);
    std::ofstream(dir_ / agent::phase_table_file, std::ios::binary | std::ios::trunc) << table;
  }

  /// Runs argv with the agent, FAULTLINE_FAULTS=spec (none when empty) and `extra` variables.
  finished run(const std::string& spec, std::vector<std::string> args, const std::vector<std::string>& extra = {}) {
    finished f = start(spec, std::move(args), extra);
    if (f.pid > 0) {
      ::waitpid(f.pid, &f.status, 0);
      collect(f);
    }
    return f;
  }

  /// Starts argv as run() does and returns at once (pid set; 0 when it could not start).
  finished start(const std::string& spec, std::vector<std::string> args, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("FAULTLINE_", 0) == 0 || kv.rfind("LD_PRELOAD=", 0) == 0) continue;
      env.push_back(kv);
    }
    env.push_back("LD_PRELOAD=" + preload_);
    env.push_back("FAULTLINE_RUN_DIR=" + dir_.string());
    env.push_back("FAULTLINE_AGENT_QUIET=1");
    if (!spec.empty()) env.push_back("FAULTLINE_FAULTS=" + spec);
    env.insert(env.end(), extra.begin(), extra.end());
    auto c_strings = [](std::vector<std::string>& v) {
      std::vector<char*> out;
      for (auto& s : v) out.push_back(s.data());
      out.push_back(nullptr);
      return out;
    };
    auto argv = c_strings(args);
    auto envp = c_strings(env);
    const auto out = dir_ / "out.txt", err = dir_ / "err.txt";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    finished f;
    begin_ = std::chrono::steady_clock::now();
    const int rc = ::posix_spawnp(&f.pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << args[0];
    if (rc != 0) f.pid = 0;
    return f;
  }

  /// The output so far and the time since start() (the status is the caller's).
  void collect(finished& f) const {
    f.took = std::chrono::steady_clock::now() - begin_;
    f.out = slurp(dir_ / "out.txt");
    f.err = slurp(dir_ / "err.txt");
  }

  /// points.PID of process `pid`.
  std::string reached(pid_t pid) const { return slurp(dir_ / ("points." + std::to_string(pid))); }

  /// Every points.* line of the directory, sorted and once each.
  std::vector<std::string> all_reached() const {
    std::vector<std::string> lines;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind("points.", 0) != 0) continue;
      std::istringstream in(slurp(e.path()));
      for (std::string line; std::getline(in, line);) lines.push_back(line);
    }
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    return lines;
  }

 private:
  std::string preload_;
  std::filesystem::path dir_;
  std::chrono::steady_clock::time_point begin_{};
};

}  // namespace faultline::agent::testing
