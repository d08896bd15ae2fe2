// The calling process's and thread's ids as the host sees them, for names other processes look
// up: a process in a PID namespace of its own (a contained run, see harness/run/containment.h) has a
// getpid() that means nothing to the harness outside it, while /proc, when it was not remounted
// inside, still names it by the host's pid. Both functions fall back to getpid()/gettid() when
// /proc is not there or is the namespace's own.
//
// Async-signal-safe (one readlink(2), no allocation): usable in crash and dump handlers.
//
//   std::string name = "phase." + std::to_string(faultline::core::host_pid());
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>

namespace faultline::core {

namespace detail {

/// The decimal number that ends `text[0, n)` (after its last '/'), or -1 when there is none.
inline pid_t trailing_id(const char* text, std::size_t n) noexcept {
  std::size_t start = n;
  while (start > 0 && text[start - 1] != '/') --start;
  if (start == n) return -1;
  long value = 0;
  for (std::size_t i = start; i < n; ++i) {
    if (text[i] < '0' || text[i] > '9' || value > 100000000) return -1;
    value = value * 10 + (text[i] - '0');
  }
  return value > 0 ? static_cast<pid_t>(value) : -1;
}

inline pid_t id_from_link(const char* link) noexcept {
  char target[64];
  const ssize_t n = ::readlink(link, target, sizeof target);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) return -1;
  return trailing_id(target, static_cast<std::size_t>(n));
}

}  // namespace detail

/// This process's pid in the PID namespace of the /proc mounted here.
inline pid_t host_pid() noexcept {
  const pid_t id = detail::id_from_link("/proc/self");  // "1234"
  return id > 0 ? id : ::getpid();
}

/// This thread's id in the PID namespace of the /proc mounted here.
inline pid_t host_tid() noexcept {
  const pid_t id = detail::id_from_link("/proc/thread-self");  // "1234/task/1240"
  return id > 0 ? id : static_cast<pid_t>(::syscall(SYS_gettid));
}

}  // namespace faultline::core
