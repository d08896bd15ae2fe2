#include "core/process_identity.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "core/host_ids.h"

namespace faultline::core {

namespace {

struct stat_fields {
  bool found = false;    // the file was read and parsed
  bool no_such = false;  // ENOENT/ESRCH: the process does not exist
  char state = '?';
  std::uint64_t flags = 0;  // field 9, the kernel's PF_* flags
  std::uint64_t start_time = 0;
};

// Formats "/proc/<pid>/stat" into buf without allocating.
void stat_path(pid_t pid, char (&buf)[48]) noexcept {
  const char prefix[] = "/proc/";
  std::size_t n = 0;
  for (const char* p = prefix; *p != '\0'; ++p) buf[n++] = *p;
  char digits[16];
  std::size_t d = 0;
  auto v = static_cast<unsigned long>(pid);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < sizeof digits);
  while (d > 0) buf[n++] = digits[--d];
  const char suffix[] = "/stat";
  for (const char* p = suffix; *p != '\0'; ++p) buf[n++] = *p;
  buf[n] = '\0';
}

stat_fields read_stat(pid_t pid) noexcept {
  stat_fields out;
  if (pid <= 0) {
    out.no_such = true;
    return out;
  }
  char path[48];
  stat_path(pid, path);
  int fd;
  do {
    fd = ::open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    out.no_such = errno == ENOENT || errno == ESRCH;
    return out;
  }
  char buf[1024];
  std::size_t len = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf + len, sizeof buf - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.no_such = errno == ESRCH;  // the process went away between open and read
      ::close(fd);
      return out;
    }
    if (n == 0) break;
    len += static_cast<std::size_t>(n);
    if (len == sizeof buf - 1) break;
  }
  ::close(fd);
  if (len == 0) {
    out.no_such = true;
    return out;
  }
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so parse after the last ')'.
  std::size_t i = len;
  while (i > 0 && buf[i - 1] != ')') --i;
  if (i == 0) return out;
  // Fields from 3 (state) onwards, separated by single spaces.
  int field = 2;
  std::uint64_t value = 0;
  bool in_field = false;
  for (; i < len; ++i) {
    const char c = buf[i];
    if (c == ' ' || c == '\n') {
      if (in_field && field == 22) {
        out.start_time = value;
        out.found = true;
        return out;
      }
      in_field = false;
      continue;
    }
    if (!in_field) {
      in_field = true;
      ++field;
      value = 0;
      if (field == 3) out.state = c;
    }
    if (field == 9 || field == 22) {
      if (c < '0' || c > '9') return out;
      value = value * 10 + static_cast<std::uint64_t>(c - '0');
      if (field == 9) out.flags = value;
    }
  }
  if (in_field && field == 22) {
    out.start_time = value;
    out.found = true;
  }
  return out;
}

std::atomic<pid_t> cached_pid{0};
std::atomic<std::uint64_t> cached_start{0};

}  // namespace

std::uint64_t process_start_time(pid_t pid) noexcept {
  const stat_fields f = read_stat(pid);
  return f.found ? f.start_time : 0;
}

void refresh_self_identity() noexcept {
  const pid_t pid = core::host_pid();
  cached_start.store(process_start_time(pid), std::memory_order_relaxed);
  cached_pid.store(pid, std::memory_order_release);
}

pid_t self_pid() noexcept {
  // A forked child inherits the cache: compare against the kernel's getpid() of the moment.
  static std::atomic<pid_t> cached_getpid{0};
  const pid_t now = ::getpid();
  if (cached_getpid.load(std::memory_order_acquire) != now) {
    refresh_self_identity();
    cached_getpid.store(now, std::memory_order_release);
  }
  return cached_pid.load(std::memory_order_acquire);
}

std::uint64_t self_start_time() noexcept {
  (void)self_pid();
  return cached_start.load(std::memory_order_relaxed);
}

liveness process_liveness(pid_t pid, std::uint64_t start_time, bool pid_only) noexcept {
  if (pid <= 0) return liveness::dead;
  if (!pid_only) {
    const stat_fields f = read_stat(pid);
    if (f.found) {
      // PF_EXITING: inside do_exit, past the last user-space instruction (a SIGKILLed lock holder
      // is in this state when its robust futex is released, before it becomes a zombie).
      constexpr std::uint64_t pf_exiting = 0x4;
      if (f.state == 'Z' || f.state == 'X' || f.state == 'x' || (f.flags & pf_exiting) != 0) return liveness::dead;
      return f.start_time == start_time ? liveness::alive : liveness::dead;
    }
    if (f.no_such) return liveness::dead;
    // /proc could not answer (not mounted, hidepid): the pid alone is the best evidence left.
  }
  if (::kill(pid, 0) == 0 || errno == EPERM) return liveness::alive;
  return liveness::dead;
}

}  // namespace faultline::core
