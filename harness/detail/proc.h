// Reading process state from /proc: the runner's view of a run's process tree. Private to
// faultline::harness.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace faultline::harness::detail {

/// The fields of /proc/PID/stat the runner uses.
struct proc_stat {
  pid_t pid = 0;
  std::string comm;
  char state = '?';            ///< R, S, D, Z, T, t, X, I, ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  std::uint64_t start_time = 0;  ///< clock ticks after boot: with pid, identifies a process
};

/// Parses the text of a /proc/PID/stat file (comm may hold spaces and parentheses).
std::optional<proc_stat> parse_stat(const std::string& text);

/// Reads /proc/PID/stat; nullopt when the process is gone.
std::optional<proc_stat> read_stat(pid_t pid);

/// Every process visible in /proc (thread-group leaders only). Processes that vanish while
/// scanning are skipped.
std::vector<proc_stat> snapshot();

/// The children of `pid` (every thread's /proc/PID/task/TID/children); nullopt when the kernel
/// does not provide those files (CONFIG_PROC_CHILDREN).
std::optional<std::vector<pid_t>> children_of(pid_t pid);

/// Every descendant of `root` (root excluded), walking children_of; falls back to snapshot()
/// (every process) when children_of is not available. Much cheaper than a full scan when root's
/// subtree is small: the harness, a subreaper, is the root of every run's processes.
std::vector<proc_stat> descendants(pid_t root);

/// The value of environment variable `name` in /proc/PID/environ, if readable and present.
std::optional<std::string> read_environ_var(pid_t pid, const std::string& name);

/// Thread ids of a process (/proc/PID/task).
std::vector<pid_t> threads_of(pid_t pid);

}  // namespace faultline::harness::detail
