#include "harness/containment.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "harness/detail/proc.h"
#include "harness/detail/sys.h"

namespace faultline::harness {
namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// The keeper's side. A keeper is a clone3 child of a multi-threaded process that never execs:
// another thread may have held any lock (malloc's, stdio's, a sanitizer's) at the moment of the
// clone, so from there on only system calls run — through syscall(2) directly, so that no libc or
// sanitizer wrapper can take a lock — on memory prepared before the clone (the keeper_plan).
// ---------------------------------------------------------------------------------------------

// What a keeper reports on its socket (SOCK_SEQPACKET: one record per message).
struct keeper_message {
  std::int32_t kind;
  std::int32_t value;  // errno for exec_failed, the wait status for exited
  std::int32_t pid;    // the program's pid as the harness sees it (started)
};
constexpr std::int32_t msg_started = 1;      // the program exec'd; its pidfd rides along
constexpr std::int32_t msg_exec_failed = 2;  // it could not: errno in value
constexpr std::int32_t msg_exited = 3;       // the program's wait status in value

// Everything a keeper and its program need, prepared by the harness before the clone.
struct keeper_plan {
  bool pid_namespace = false;
  int socket_fd = -1;    // the keeper's end of the report socket
  int lifeline_fd = -1;  // read end of the lifeline
  int sync_fd = -1;      // user namespace: one byte arrives once the id maps are written
  int null_fd = -1;      // /dev/null, read-write
  int stdout_fd = -1;
  int stderr_fd = -1;
  int cgroup_procs_fd = -1;  // the run's cgroup.procs (the program writes itself into it)
  int cgroup_kill_fd = -1;   // the run's cgroup.kill
  const char* cgroup_dir = nullptr;
  const int* keep_fds = nullptr;
  std::size_t keep_count = 0;
  bool new_process_group = true;
  const char* path = nullptr;
  const char* cwd = nullptr;  // chdir here before exec (nullptr: stay)
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

// The kernel's struct sigaction (x86-64, arm64 and the other generic layouts) and sigset size.
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};
constexpr unsigned long kernel_sigset_bytes = 8;

long sys(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  return ::syscall(nr, a, b, c, d, e);
}
long arg(const void* p) { return reinterpret_cast<long>(p); }

[[noreturn]] void sys_exit(int code) {
  for (;;) sys(SYS_exit_group, code);
}

long sys_read(int fd, void* buf, std::size_t n) {
  long r;
  do r = sys(SYS_read, fd, arg(buf), static_cast<long>(n));
  while (r < 0 && errno == EINTR);
  return r;
}

void sys_write_all(int fd, const void* buf, std::size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    long r = sys(SYS_write, fd, arg(p), static_cast<long>(n));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

void sys_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  sys(SYS_ppoll, 0, 0, arg(&ts), 0, 0);
}

// Parses a decimal number at p (advancing p); -1 when there is none.
long parse_number(const char*& p, const char* end) {
  while (p < end && (*p < '0' || *p > '9')) ++p;
  if (p == end) return -1;
  long v = 0;
  while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
  return v;
}

// "prefix" + n into buf (for /proc paths). No allocation.
void format_path(char* buf, std::size_t size, const char* prefix, long n, const char* suffix) {
  std::size_t i = 0;
  for (const char* s = prefix; *s && i + 1 < size; ++s) buf[i++] = *s;
  char digits[24];
  int k = 0;
  do digits[k++] = static_cast<char>('0' + n % 10);
  while ((n /= 10) > 0 && k < 23);
  while (k > 0 && i + 1 < size) buf[i++] = digits[--k];
  for (const char* s = suffix; *s && i + 1 < size; ++s) buf[i++] = *s;
  buf[i] = '\0';
}

bool plan_keeps(const keeper_plan& p, int fd) {
  if (fd == p.socket_fd || fd == p.lifeline_fd || fd == p.sync_fd || fd == p.null_fd || fd == p.stdout_fd ||
      fd == p.stderr_fd || fd == p.cgroup_procs_fd || fd == p.cgroup_kill_fd)
    return true;
  for (std::size_t i = 0; i < p.keep_count; ++i)
    if (p.keep_fds[i] == fd) return true;
  return false;
}

// Calls close_if(fd) on every open descriptor and closes those it says to (no allocation).
template <class F>
void close_fds_where(F close_if) {
  auto consider = [&](int fd) {
    if (close_if(fd)) sys(SYS_close, fd);
  };
  int dir = static_cast<int>(sys(SYS_openat, AT_FDCWD, arg("/proc/self/fd"), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir < 0) {
    for (int fd = 0; fd < 65536; ++fd) consider(fd);
    return;
  }
  alignas(8) char buf[4096];
  for (;;) {
    long n = sys(SYS_getdents64, dir, arg(buf), sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
      unsigned short reclen;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      off += reclen;
      if (name[0] < '0' || name[0] > '9') continue;
      const char* q = name;
      int fd = static_cast<int>(parse_number(q, name + 16));
      if (fd != dir) consider(fd);
    }
  }
  sys(SYS_close, dir);
}

// At the keeper's start: closes every close-on-exec descriptor it inherited from the harness
// except its own — above all the lifeline's write end (else the lifeline could never report
// EOF) and other runs' sockets and pipes (else their readers would wait for this keeper).
// Inheritable descriptors stay, for the program, as posix_spawn would pass them.
void close_foreign_fds(const keeper_plan& p) {
  close_fds_where([&](int fd) {
    if (plan_keeps(p, fd)) return false;
    long flags = sys(SYS_fcntl, fd, F_GETFD);
    return flags >= 0 && (flags & FD_CLOEXEC) != 0;
  });
}

// Once the program has exec'd: the keeper drops everything it held only for the program (its
// output pipes among them, whose readers wait for EOF), keeping what it watches.
void close_program_fds(const keeper_plan& p, int sigfd) {
  close_fds_where([&](int fd) {
    return fd != p.socket_fd && fd != p.lifeline_fd && fd != p.cgroup_kill_fd && fd != sigfd;
  });
}

void send_message(int sock, std::int32_t kind, std::int32_t value, std::int32_t pid, int pass_fd) {
  keeper_message m{kind, value, pid};
  iovec iov{&m, sizeof m};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  long r;
  do r = sys(SYS_sendmsg, sock, arg(&h), MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
}

// The pid behind a pidfd as /proc (the harness's view) numbers it: "Pid:" in its fdinfo.
std::int32_t host_pid_of(int pidfd) {
  char path[64];
  format_path(path, sizeof path, "/proc/self/fdinfo/", pidfd, "");
  int fd = static_cast<int>(sys(SYS_openat, AT_FDCWD, arg(path), O_RDONLY | O_CLOEXEC));
  if (fd < 0) return -1;
  char buf[1024];
  long n = sys_read(fd, buf, sizeof buf - 1);
  sys(SYS_close, fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  for (const char* p = buf; *p; ++p) {
    if ((p == buf || p[-1] == '\n') && std::strncmp(p, "Pid:", 4) == 0) {
      const char* q = p + 4;
      while (*q == ' ' || *q == '\t') ++q;
      if (*q == '-') return -1;
      return static_cast<std::int32_t>(parse_number(q, buf + n));
    }
  }
  return -1;
}

// Puts `from` on descriptor `to` for exec (dup onto itself only clears close-on-exec).
void place_fd(int from, int to) {
  if (from == to) sys(SYS_fcntl, to, F_SETFD, 0);
  else sys(SYS_dup3, from, to, 0);
}

// The program: from the keeper's clone3 to execve. Reports an exec failure's errno on err_fd.
[[noreturn]] void program_main(const keeper_plan& p, int err_fd, long keeper_pid) {
  if (!p.pid_namespace) {
    // SIGKILL when the keeper dies; and if it died before this line, go now.
    sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
    if (sys(SYS_getppid) != keeper_pid) sys_exit(127);
  }
  // Best effort: without the cgroup the keeper's kill loop still ends the tree.
  if (p.cgroup_procs_fd >= 0) sys_write_all(p.cgroup_procs_fd, "0", 1);
  if (p.new_process_group) sys(SYS_setpgid, 0, 0);
  place_fd(p.null_fd, 0);
  place_fd(p.stdout_fd >= 0 ? p.stdout_fd : p.null_fd, 1);
  place_fd(p.stderr_fd >= 0 ? p.stderr_fd : 1, 2);
  for (std::size_t i = 0; i < p.keep_count; ++i) sys(SYS_fcntl, p.keep_fds[i], F_SETFD, 0);
  // Default dispositions (an ignored signal would stay ignored across exec), empty mask.
  kernel_sigaction dfl{};
  for (int sig = 1; sig < 65; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) sys(SYS_rt_sigaction, sig, arg(&dfl), 0, kernel_sigset_bytes);
  std::uint64_t none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, arg(&none), 0, kernel_sigset_bytes);
  if (p.cwd != nullptr && sys(SYS_chdir, arg(p.cwd)) != 0) {
    int err = errno;
    sys_write_all(err_fd, &err, sizeof err);
    sys_exit(127);
  }
  sys(SYS_execve, arg(p.path), arg(p.argv), arg(p.envp));
  int err = errno;
  sys_write_all(err_fd, &err, sizeof err);
  sys_exit(127);
}

// Calls f(pid) for each child of the calling (single-threaded) process.
template <class F>
void for_each_child(F f) {
  char buf[4096];
  int fd = static_cast<int>(sys(SYS_openat, AT_FDCWD, arg("/proc/thread-self/children"), O_RDONLY | O_CLOEXEC));
  if (fd >= 0) {
    long carry = -1;  // a number cut by the end of the buffer
    for (;;) {
      long n = sys_read(fd, buf, sizeof buf);
      if (n <= 0) break;
      const char* q = buf;
      const char* end = buf + n;
      if (carry >= 0) {
        while (q < end && *q >= '0' && *q <= '9') carry = carry * 10 + (*q++ - '0');
        if (q == end) continue;
        f(static_cast<pid_t>(carry));
        carry = -1;
      }
      for (;;) {
        long v = parse_number(q, end);
        if (v < 0) break;
        if (q == end) {
          carry = v;
          break;
        }
        f(static_cast<pid_t>(v));
      }
    }
    if (carry >= 0) f(static_cast<pid_t>(carry));
    sys(SYS_close, fd);
    return;
  }
  // No CONFIG_PROC_CHILDREN: every process whose stat names us as parent.
  const long self = sys(SYS_getpid);
  int dir = static_cast<int>(sys(SYS_openat, AT_FDCWD, arg("/proc"), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir < 0) return;
  alignas(8) char ents[4096];
  for (;;) {
    long n = sys(SYS_getdents64, dir, arg(ents), sizeof ents);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      unsigned short reclen;
      std::memcpy(&reclen, ents + off + 16, sizeof reclen);
      const char* name = ents + off + 19;
      off += reclen;
      if (name[0] < '0' || name[0] > '9') continue;
      const char* q = name;
      long pid = parse_number(q, name + 16);
      char path[64];
      format_path(path, sizeof path, "/proc/", pid, "/stat");
      int sfd = static_cast<int>(sys(SYS_openat, AT_FDCWD, arg(path), O_RDONLY | O_CLOEXEC));
      if (sfd < 0) continue;
      long len = sys_read(sfd, buf, sizeof buf - 1);
      sys(SYS_close, sfd);
      if (len <= 0) continue;
      // "pid (comm) S ppid ...": comm may hold anything, so look after the last ')'.
      const char* close_paren = nullptr;
      for (const char* c = buf; c < buf + len; ++c)
        if (*c == ')') close_paren = c;
      if (close_paren == nullptr) continue;
      const char* r = close_paren + 3;  // ") S "
      if (r < buf + len && parse_number(r, buf + len) == self) f(static_cast<pid_t>(pid));
    }
  }
  sys(SYS_close, dir);
}

// Keeper without a namespace: kill the run's tree. Every orphan of the run is our child (we are
// its subreaper), so SIGKILL every child, reap, and repeat until none is left; cgroup.kill first
// catches at once what a fork would otherwise keep adding.
void end_tree(const keeper_plan& p) {
  if (p.cgroup_kill_fd >= 0) sys_write_all(p.cgroup_kill_fd, "1", 1);
  for (int round = 0; round < 2000; ++round) {  // ~10 s: only a process stuck in the kernel stays
    for_each_child([](pid_t pid) { sys(SYS_kill, pid, SIGKILL); });
    int status;
    long w;
    while ((w = sys(SYS_wait4, -1, arg(&status), WNOHANG | __WALL, 0)) > 0) {
    }
    if (w < 0 && errno == ECHILD) break;
    sys_sleep_ms(5);
  }
  if (p.cgroup_dir != nullptr) sys(SYS_unlinkat, AT_FDCWD, arg(p.cgroup_dir), AT_REMOVEDIR);
}

// vfork in a frame of its own: the child runs below it and never returns from it, so no local
// of the caller is shared with the child.
[[gnu::noinline]] long start_program(const keeper_plan& p, int err_fd, long keeper_pid) {
  long pid = ::vfork();
  if (pid == 0) program_main(p, err_fd, keeper_pid);
  return pid;
}

int sigchld_fd() {
  std::uint64_t chld = std::uint64_t{1} << (SIGCHLD - 1);
  return static_cast<int>(sys(SYS_signalfd4, -1, arg(&chld), kernel_sigset_bytes, SFD_CLOEXEC | SFD_NONBLOCK));
}

// Replaces the harness's stdio (a reader of the harness's output waits for EOF from everyone
// holding it) with /dev/null, except descriptors the plan keeps for the program.
void detach_stdio(const keeper_plan& p) {
  int null_fd = p.null_fd >= 0 ? p.null_fd
                               : static_cast<int>(sys(SYS_openat, AT_FDCWD, arg("/dev/null"), O_RDWR | O_CLOEXEC));
  for (int fd = 0; fd < 3; ++fd)
    if (!plan_keeps(p, fd) && null_fd >= 0) place_fd(null_fd, fd);
  if (p.null_fd < 0 && null_fd > 2) sys(SYS_close, null_fd);
}

[[noreturn]] void keeper_main(const keeper_plan& p) {
  close_foreign_fds(p);
  sys(SYS_prctl, PR_SET_NAME, arg("faultline-keep"));
  // The harness blocked every signal around the clone: the keeper keeps them blocked (it is
  // never interrupted) and takes SIGCHLD through a signalfd. SIGCHLD must not be ignored, or the
  // program would be reaped by the kernel before its status is read.
  kernel_sigaction dfl{};
  sys(SYS_rt_sigaction, SIGCHLD, arg(&dfl), 0, kernel_sigset_bytes);
  const int sigfd = sigchld_fd();
  detach_stdio(p);
  if (!p.pid_namespace) {
    // Its own process group, so that a kill of the harness's group leaves it to end the run;
    // and the reaper of every orphan of the run.
    sys(SYS_setpgid, 0, 0);
    sys(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1);
  }
  if (p.sync_fd >= 0) {
    char go = 0;
    if (sys_read(p.sync_fd, &go, 1) != 1) sys_exit(1);  // the harness could not map our ids
    sys(SYS_close, p.sync_fd);
  }

  int err_pipe[2];
  if (sys(SYS_pipe2, arg(err_pipe), O_CLOEXEC) != 0) {
    send_message(p.socket_fd, msg_exec_failed, errno, -1, -1);
    sys_exit(0);
  }
  const long self = sys(SYS_getpid);
  // vfork: the keeper is single-threaded, so, as posix_spawn does, the program borrows its
  // memory until exec instead of copying its page tables (a fork-like clone here would cost
  // the program hundreds of microseconds of start-up). The child only makes system calls and
  // never returns from this frame.
  long program = start_program(p, err_pipe[1], self);
  if (program < 0) {
    send_message(p.socket_fd, msg_exec_failed, errno, -1, -1);
    sys_exit(0);
  }
  // Our child, not reaped yet: the pid cannot have been reused.
  int pidfd = static_cast<int>(sys(SYS_pidfd_open, program, 0));
  sys(SYS_close, err_pipe[1]);
  int exec_errno = 0;
  long got = sys_read(err_pipe[0], &exec_errno, sizeof exec_errno);
  sys(SYS_close, err_pipe[0]);
  if (got == static_cast<long>(sizeof exec_errno)) {
    int status;
    while (sys(SYS_wait4, program, arg(&status), __WALL, 0) < 0 && errno == EINTR) {
    }
    send_message(p.socket_fd, msg_exec_failed, exec_errno, -1, -1);
    sys_exit(0);
  }
  // Out of the program's way on the CPUs: a task that has just been created carries a full
  // load weight, and its blocked load stays on its CPU's runqueue while it sleeps (decaying over
  // tens of milliseconds), so the scheduler would place the program's threads as if that CPU
  // were busy — measured: with a freshly created sleeper beside it, a program's main thread and
  // its spinning worker shared a CPU after a 5 ms sleep in 4 of 300 runs, against 181 of 300
  // bare, which changes how an exit race resolves on a small machine. As SCHED_IDLE the
  // keeper's weight is ~0 (158 of 300). Only now: the program, created above, must not inherit
  // the policy (an unprivileged process cannot leave SCHED_IDLE).
  struct sched_param idle_param {};
  sys(SYS_sched_setscheduler, 0, SCHED_IDLE, arg(&idle_param));
  // The program is our child and not reaped yet, so its pidfd still names it.
  std::int32_t host_pid = host_pid_of(pidfd);
  if (host_pid <= 0 && !p.pid_namespace) host_pid = static_cast<std::int32_t>(program);
  send_message(p.socket_fd, msg_started, 0, host_pid, pidfd);
  sys(SYS_close, pidfd);
  close_program_fds(p, sigfd);

  for (;;) {
    pollfd fds[3] = {{p.socket_fd, POLLIN, 0}, {p.lifeline_fd, POLLIN, 0}, {sigfd, POLLIN, 0}};
    struct timespec tick = {0, 20 * 1000000};  // only without a signalfd
    long r = sys(SYS_ppoll, arg(fds), sigfd >= 0 ? 3 : 2, sigfd >= 0 ? 0 : arg(&tick), 0, 0);
    if (r < 0 && errno != EINTR) break;
    if (sigfd >= 0 && fds[2].revents != 0) {
      signalfd_siginfo info[8];
      while (sys_read(sigfd, info, sizeof info) > 0) {
      }
    }
    int status;
    long w;
    while ((w = sys(SYS_wait4, -1, arg(&status), WNOHANG | __WALL, 0)) > 0)
      if (w == program) send_message(p.socket_fd, msg_exited, status, host_pid, -1);
    // The harness closed the socket (the run is over) or died (the lifeline's EOF).
    if (fds[0].revents != 0 || fds[1].revents != 0) break;
  }
  // In a PID namespace the kernel kills everything left when pid 1 exits.
  if (!p.pid_namespace) end_tree(p);
  sys_exit(0);
}

// A pooled keeper: pid 1 of its own PID namespace, lent to one run after another. The harness
// spawns each program into the namespace itself (setns), so the keeper creates nothing: it only
// reaps the orphans it inherits and exits when the lifeline reports EOF (the harness died) —
// and the kernel then kills every process in the namespace. It is SCHED_IDLE before anything
// else and never runs while a program runs (unless one of its orphans exits).
[[noreturn]] void pooled_keeper_main(const keeper_plan& p) {
  struct sched_param idle_param {};
  sys(SYS_sched_setscheduler, 0, SCHED_IDLE, arg(&idle_param));
  // It starts no program: it keeps nothing of the harness's but the lifeline.
  close_fds_where([&](int fd) { return fd != p.lifeline_fd; });
  sys(SYS_prctl, PR_SET_NAME, arg("faultline-keep"));
  kernel_sigaction dfl{};
  sys(SYS_rt_sigaction, SIGCHLD, arg(&dfl), 0, kernel_sigset_bytes);
  const int sigfd = sigchld_fd();
  detach_stdio(p);
  for (;;) {
    pollfd fds[2] = {{p.lifeline_fd, POLLIN, 0}, {sigfd, POLLIN, 0}};
    struct timespec tick = {0, 20 * 1000000};  // only without a signalfd
    long r = sys(SYS_ppoll, arg(fds), sigfd >= 0 ? 2 : 1, sigfd >= 0 ? 0 : arg(&tick), 0, 0);
    if (r < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    if (sigfd >= 0 && fds[1].revents != 0) {
      signalfd_siginfo info[8];
      while (sys_read(sigfd, info, sizeof info) > 0) {
      }
    }
    int status;
    while (sys(SYS_wait4, -1, arg(&status), WNOHANG | __WALL, 0) > 0) {
    }
  }
  sys_exit(0);
}

// A clone3 child that only exits, after the harness's byte on sync_fd when there is one: does
// the kernel let us create a process with these flags?
[[noreturn]] void probe_main(int sync_fd) {
  if (sync_fd >= 0) {
    char go = 0;
    sys_read(sync_fd, &go, 1);
  }
  sys_exit(0);
}

// ---------------------------------------------------------------------------------------------
// The harness's side.
// ---------------------------------------------------------------------------------------------

// The lifeline: the harness holds the write end for its whole life and never writes; every
// keeper holds a read end. Both ends close-on-exec. Made once, never closed.
struct lifeline_pipe {
  int read_fd = -1;
  int write_fd = -1;
  core::status error;
};

const lifeline_pipe& lifeline() {
  static const lifeline_pipe l = [] {
    lifeline_pipe out;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      out.error = detail::sys_error(errno, "lifeline pipe");
      return out;
    }
    out.read_fd = fds[0];
    out.write_fd = fds[1];
    return out;
  }();
  return l;
}

std::mutex keepers_mu;
std::unordered_map<pid_t, pid_t> keepers;  // program -> keeper

// Every signal blocked in the calling thread while alive, so that a clone starts with all
// blocked and no handler of the harness runs in it.
class signals_blocked {
 public:
  signals_blocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~signals_blocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  signals_blocked(const signals_blocked&) = delete;
  signals_blocked& operator=(const signals_blocked&) = delete;

 private:
  sigset_t old_;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Waits up to `d` for the process behind `pidfd` to exit.
bool wait_pidfd(int pidfd, std::chrono::milliseconds d) {
  pollfd p{pidfd, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + d;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;
  }
}

// A child started by clone_child: its pid (-1 when clone3 failed, with its errno in `error`) and
// its pidfd.
struct cloned {
  pid_t pid = -1;
  int pidfd = -1;
  int error = 0;
};

// clone3 with CLONE_PIDFD and `flags`, every signal blocked across the call and the child recorded
// as the harness's own (start_owned). The child runs `child_main`, which never returns.
template <class ChildMain>
cloned clone_child(std::uint64_t flags, ChildMain&& child_main) {
  cloned out;
  clone_args ca{};
  ca.flags = flags | CLONE_PIDFD;
  ca.pidfd = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&out.pidfd));
  ca.exit_signal = SIGCHLD;
  signals_blocked blocked;
  out.pid = start_owned([&]() -> pid_t {
    long r = ::syscall(SYS_clone3, &ca, sizeof ca);
    if (r == 0) child_main();
    out.error = errno;
    return static_cast<pid_t>(r);
  });
  return out;
}

// Kills (when still running) and reaps a child started with start_owned, and forgets it.
void kill_and_reap(pid_t pid, int pidfd) {
  if (pidfd >= 0) detail::pidfd_send_signal(pidfd, SIGKILL);
  for (;;) {
    int status;
    const pid_t r = ::waitpid(pid, &status, __WALL | WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    // The init of a pid namespace finishes exiting only once every process of the namespace
    // was reaped — the harness's own children in it (pooled keepers' programs) included.
    reap_strays();
    pollfd gone{pidfd, POLLIN, 0};
    if (pidfd >= 0) ::poll(&gone, 1, 10);
    else ::usleep(1000);
  }
  disown(pid);
}

core::status write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return detail::sys_error(errno, "open " + path);
  auto s = detail::write_all(fd, text, "write " + path);
  ::close(fd);
  return s;
}

// An identity map of the harness's uid and gid in the new user namespace of `pid`.
core::status write_id_maps(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
  if (auto s = write_text(proc + "/uid_map", uid + " " + uid + " 1\n"); !s) return s;
  if (auto s = write_text(proc + "/setgroups", "deny"); !s && s.code() != core::errc::not_found) return s;
  return write_text(proc + "/gid_map", gid + " " + gid + " 1\n");
}

// Can the kernel clone3 a child with these flags (and, for a user namespace, map its ids)?
core::status probe_clone(std::uint64_t flags, const char* what) {
  const bool user_ns = (flags & CLONE_NEWUSER) != 0;
  int sync[2] = {-1, -1};
  if (user_ns && ::pipe2(sync, O_CLOEXEC) != 0) return detail::sys_error(errno, "pipe");
  auto [pid, pidfd, clone_errno] = clone_child(flags, [&] { probe_main(sync[0]); });
  close_fd(sync[0]);
  if (pid < 0) {
    close_fd(sync[1]);
    return core::status(core::errc::unavailable, std::string(what) + ": " + std::strerror(clone_errno));
  }
  core::status maps;
  if (user_ns) {
    maps = write_id_maps(pid);
    if (maps) detail::write_all(sync[1], "g", "sync");
    close_fd(sync[1]);
  }
  kill_and_reap(pid, maps ? -1 : pidfd);
  close_fd(pidfd);
  if (!maps) return core::status(core::errc::unavailable, std::string(what) + ": " + maps.message());
  return {};
}

// Where this process's cgroup v2 is mounted ("" and why not when there is none we can use).
struct cgroup_home {
  std::string dir;
  std::string why;
};

cgroup_home find_cgroup_home() {
  auto own = detail::read_file("/proc/self/cgroup");
  if (!own) return {"", "cannot read /proc/self/cgroup"};
  std::string path;
  {
    std::istringstream in(*own);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  if (path.empty()) return {"", "no cgroup v2 hierarchy"};
  auto mounts = detail::read_file("/proc/self/mountinfo");
  if (!mounts) return {"", "cannot read /proc/self/mountinfo"};
  std::istringstream in(*mounts);
  for (std::string line; std::getline(in, line);) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS"
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mountpoint;
    head >> id >> parent >> dev >> root >> mountpoint;
    if (root != "/" && path.rfind(root, 0) != 0) continue;  // our cgroup is not below this mount
    std::string rel = root == "/" ? path : path.substr(root.size());
    std::string dir = mountpoint + (rel == "/" ? "" : rel);
    const std::string probe = dir + "/faultline.probe." + std::to_string(::getpid());
    if (::mkdir(probe.c_str(), 0755) != 0) return {"", "cannot create a cgroup in " + dir + ": " + std::strerror(errno)};
    const bool can_kill = ::access((probe + "/cgroup.kill").c_str(), W_OK) == 0;
    ::rmdir(probe.c_str());
    if (!can_kill) return {"", "no cgroup.kill in " + dir + " (Linux < 5.14)"};
    if (::access((dir + "/cgroup.procs").c_str(), W_OK) != 0) return {"", "cannot move processes in " + dir};
    return {dir, ""};
  }
  return {"", "no cgroup2 mount holds " + path};
}

const cgroup_home& cgroups() {
  static const cgroup_home home = find_cgroup_home();
  return home;
}

// The harness's own PID namespace (every thread's active one), to return to after a setns.
int own_pid_namespace() {
  static const int fd = ::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
  return fd;
}

[[noreturn]] void die(const char* what) {
  const char* text = "faultline: broken invariant: ";
  (void)!::write(2, text, std::strlen(text));
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, "\n", 1);
  std::abort();
}

// Points the calling thread's new children at the PID namespace `ns_fd` for as long as it lives,
// then back at the harness's own.
class children_in_namespace {
 public:
  explicit children_in_namespace(int ns_fd) { ok_ = ::setns(ns_fd, CLONE_NEWPID) == 0; error_ = errno; }
  ~children_in_namespace() {
    if (ok_ && ::setns(own_pid_namespace(), CLONE_NEWPID) != 0)
      die("setns back to the harness's PID namespace failed: this thread would start every later child in a run's namespace");
  }
  children_in_namespace(const children_in_namespace&) = delete;
  children_in_namespace& operator=(const children_in_namespace&) = delete;
  [[nodiscard]] bool ok() const noexcept { return ok_; }
  [[nodiscard]] int error() const noexcept { return error_; }

 private:
  bool ok_ = false;
  int error_ = 0;
};

// Can this thread start children in a PID namespace it did not create (setns needs CAP_SYS_ADMIN
// in the harness's own user namespace: root, in practice)?
core::status probe_setns() {
  if (own_pid_namespace() < 0) return detail::sys_error(errno, "open /proc/self/ns/pid");
  int sync[2];
  if (::pipe2(sync, O_CLOEXEC) != 0) return detail::sys_error(errno, "pipe");
  auto [pid, pidfd, clone_errno] = clone_child(CLONE_NEWPID, [&] { probe_main(sync[0]); });
  close_fd(sync[0]);
  if (pid < 0) {
    close_fd(sync[1]);
    return core::status(core::errc::unavailable, std::string("clone3(CLONE_NEWPID): ") + std::strerror(clone_errno));
  }
  core::status out;
  int ns = ::open(("/proc/" + std::to_string(pid) + "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) {
    out = detail::sys_error(errno, "open /proc/PID/ns/pid");
  } else {
    children_in_namespace in(ns);
    if (!in.ok()) out = core::status(core::errc::unavailable, std::string("setns(CLONE_NEWPID): ") + std::strerror(in.error()));
    ::close(ns);
  }
  // The probe holds a copy of the write end too (it never execs): EOF would never come.
  detail::write_all(sync[1], "g", "probe sync");
  close_fd(sync[1]);
  kill_and_reap(pid, -1);
  close_fd(pidfd);
  return out;
}

struct pid_namespace_support {
  core::status status;
  bool user_namespace = false;  // needs CLONE_NEWUSER (then the keeper must start the program)
  bool pooled = false;          // setns works: pooled keepers, programs spawned by the harness
};

const pid_namespace_support& pid_namespaces() {
  static const pid_namespace_support support = [] {
    pid_namespace_support out;
    auto plain = probe_clone(CLONE_NEWPID, "clone3(CLONE_NEWPID)");
    if (plain) {
      out.pooled = probe_setns().is_ok();
      return out;
    }
    auto user = probe_clone(CLONE_NEWPID | CLONE_NEWUSER, "clone3(CLONE_NEWPID|CLONE_NEWUSER)");
    if (user) {
      out.user_namespace = true;
      return out;
    }
    out.status = core::status(core::errc::unavailable, plain.message() + "; " + user.message());
    return out;
  }();
  return support;
}

const core::status& keepers_supported() {
  static const core::status s = probe_clone(0, "clone3");
  return s;
}

// argv[0] as posix_spawnp finds it: through the harness's PATH when it has no '/'.
core::result<std::string> resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env_path = std::getenv("PATH");
  std::string search = env_path != nullptr ? env_path : "/bin:/usr/bin";
  int err = ENOENT;
  std::size_t start = 0;
  for (;;) {
    auto colon = search.find(':', start);
    std::string dir = search.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      err = EACCES;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return detail::sys_error(err, "spawn " + name);
}

std::atomic<std::uint64_t> cgroup_sequence{0};

// The run's own cgroup, made for a keeper_cgroup spawn. Without it the run still has its keeper.
struct run_cgroup {
  std::string dir;
  int procs_fd = -1;
  int kill_fd = -1;
};

run_cgroup make_run_cgroup() {
  run_cgroup c;
  if (cgroups().dir.empty()) return c;
  std::string dir = cgroups().dir + "/faultline." + std::to_string(::getpid()) + "." + std::to_string(++cgroup_sequence);
  if (::mkdir(dir.c_str(), 0755) != 0) return c;
  c.procs_fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  c.kill_fd = ::open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (c.procs_fd < 0 || c.kill_fd < 0) {
    close_fd(c.procs_fd);
    close_fd(c.kill_fd);
    ::rmdir(dir.c_str());
    return c;
  }
  c.dir = std::move(dir);
  return c;
}

// Reads the keeper's first report: started (with the program's pidfd) or exec_failed.
struct first_report {
  keeper_message message{};
  int pidfd = -1;
  bool received = false;
};

first_report receive_first(int sock, int keeper_pidfd, std::chrono::milliseconds limit) {
  first_report out;
  pollfd fds[2] = {{sock, POLLIN, 0}, {keeper_pidfd, POLLIN, 0}};
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    int r = ::poll(fds, 2, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return out;
    if (fds[0].revents != 0) break;
    if (fds[1].revents != 0) {  // the keeper died; a report it sent first is still queued
      fds[1].fd = -1;
      if (::poll(fds, 1, 0) <= 0) return out;
      break;
    }
  }
  iovec iov{&out.message, sizeof out.message};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = control;
  h.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &h, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof out.message)) return out;
  out.received = true;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&out.pidfd, CMSG_DATA(c), sizeof(int));
  return out;
}

// The pool of idle keepers (pid_namespace with setns). A keeper is created when none is idle —
// so a campaign holds as many as it runs at once — and reused while its namespace is empty.
struct pooled_keeper {
  pid_t pid = -1;
  int pidfd = -1;
  int ns_fd = -1;  // its PID namespace, for setns
};

std::mutex pool_mu;
std::vector<pooled_keeper> idle_keepers;

void retire(pooled_keeper& k) {
  if (k.pid > 0) kill_and_reap(k.pid, k.pidfd);  // the kernel kills whatever is left inside
  close_fd(k.pidfd);
  close_fd(k.ns_fd);
  k.pid = -1;
}

// True when nothing but the keeper lives in its namespace: the program is gone (`program_pidfd`
// readable, or -1) and every child the keeper adopted has exited.
bool keeper_reusable(const pooled_keeper& k, int program_pidfd) {
  pollfd self{k.pidfd, POLLIN, 0};
  if (::poll(&self, 1, 0) != 0) return false;  // the keeper itself died
  if (program_pidfd >= 0) {
    pollfd prog{program_pidfd, POLLIN, 0};
    if (::poll(&prog, 1, 0) == 0) return false;  // the program still runs
  }
  std::vector<pid_t> kids;
  if (auto listed = detail::children_of(k.pid)) {
    kids = std::move(*listed);
  } else {  // no CONFIG_PROC_CHILDREN
    for (const auto& p : detail::snapshot())
      if (p.ppid == k.pid) kids.push_back(p.pid);
  }
  for (pid_t kid : kids)
    if (auto st = detail::read_stat(kid); st && st->state != 'Z' && st->state != 'X') return false;
  return true;
}

core::result<pooled_keeper> new_pooled_keeper() {
  keeper_plan plan;
  plan.pid_namespace = true;
  plan.lifeline_fd = lifeline().read_fd;
  pooled_keeper k;
  const cloned c = clone_child(CLONE_NEWPID, [&] { pooled_keeper_main(plan); });
  if (c.pid < 0) return detail::sys_error(c.error, "clone3 (keeper)");
  k.pid = c.pid;
  k.pidfd = c.pidfd;
  k.ns_fd = ::open(("/proc/" + std::to_string(k.pid) + "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
  if (k.ns_fd < 0) {
    auto s = detail::sys_error(errno, "open /proc/PID/ns/pid of a keeper");
    retire(k);
    return s;
  }
  return k;
}

core::result<pooled_keeper> acquire_keeper() {
  for (;;) {
    pooled_keeper k;
    {
      std::lock_guard lock(pool_mu);
      if (idle_keepers.empty()) break;
      k = idle_keepers.back();
      idle_keepers.pop_back();
    }
    if (keeper_reusable(k, -1)) return k;
    retire(k);
  }
  return new_pooled_keeper();
}

void release_keeper(pooled_keeper k, int program_pidfd) {
  if (!keeper_reusable(k, program_pidfd)) {
    retire(k);
    return;
  }
  std::lock_guard lock(pool_mu);
  idle_keepers.push_back(k);
}

const char* summary_of(containment_kind k, bool user_ns) {
  switch (k) {
    case containment_kind::pid_namespace:
      return user_ns ? "pid namespace (in a user namespace, its keeper starting each program)" : "pid namespace";
    case containment_kind::keeper_cgroup: return "cgroup+keeper+pdeathsig";
    case containment_kind::keeper: return "keeper+pdeathsig";
    case containment_kind::none: return "process group only";
  }
  return "?";
}

}  // namespace

const char* to_string(containment_kind kind) noexcept {
  switch (kind) {
    case containment_kind::none: return "none";
    case containment_kind::keeper: return "keeper";
    case containment_kind::keeper_cgroup: return "keeper_cgroup";
    case containment_kind::pid_namespace: return "pid_namespace";
  }
  return "?";
}

core::status containment_available(containment_kind kind) {
  switch (kind) {
    case containment_kind::none: return {};
    case containment_kind::keeper: break;
    case containment_kind::keeper_cgroup:
      if (!cgroups().why.empty()) return core::status(core::errc::unavailable, "cgroup: " + cgroups().why);
      break;
    case containment_kind::pid_namespace:
      if (!pid_namespaces().status) return core::status(core::errc::unavailable, "pid namespace: " + pid_namespaces().status.message());
      break;
  }
  if (!keepers_supported()) return core::status(core::errc::unavailable, "keeper: " + keepers_supported().message());
  if (!lifeline().error.is_ok()) return core::status(core::errc::unavailable, "keeper: " + lifeline().error.message());
  return {};
}

const containment_info& containment() {
  static const containment_info info = [] {
    containment_info out;
    // A pid namespace is opt-in: inside one the program sees other pids than the harness and
    // every tool beside it (its own getpid(), a core's pid, a log named by pid), which a
    // measuring instrument must not change by default. cgroup.kill ends a tree as surely.
    containment_kind cap = containment_kind::keeper_cgroup;
    std::string why;
    const char* env = std::getenv(containment_env);
    const std::string want = env != nullptr ? env : "";
    if (want == "pidns") cap = containment_kind::pid_namespace;
    else if (want == "auto" || want.empty()) cap = containment_kind::keeper_cgroup;
    else if (want == "cgroup") cap = containment_kind::keeper_cgroup;
    else if (want == "keeper") cap = containment_kind::keeper;
    else if (want == "none") cap = containment_kind::none;
    else why = std::string(containment_env) + "=" + want + " is not auto, pidns, cgroup, keeper or none";
    if (cap < containment_kind::keeper_cgroup && why.empty()) why = std::string(containment_env) + "=" + want;
    const containment_kind order[] = {containment_kind::pid_namespace, containment_kind::keeper_cgroup,
                                      containment_kind::keeper, containment_kind::none};
    for (containment_kind k : order) {
      if (static_cast<int>(k) > static_cast<int>(cap)) continue;
      auto s = containment_available(k);
      if (s) {
        out.kind = k;
        break;
      }
      why += (why.empty() ? "" : "; ") + s.message();
    }
    out.user_namespace = out.kind == containment_kind::pid_namespace && pid_namespaces().user_namespace;
    out.summary = summary_of(out.kind, out.user_namespace);
    out.why = why;
    return out;
  }();
  return info;
}

std::string containment_summary() {
  const auto& c = containment();
  return c.why.empty() ? c.summary : c.summary + " (" + c.why + ")";
}

bool keepers_pooled(containment_kind kind) {
  return kind == containment_kind::pid_namespace && containment_available(kind) && pid_namespaces().pooled;
}

core::status prepare_containment(unsigned runs_at_once) {
  if (!keepers_pooled(containment().kind)) return {};
  std::vector<pooled_keeper> made;
  {
    std::lock_guard lock(pool_mu);
    if (idle_keepers.size() >= runs_at_once) return {};
    runs_at_once -= static_cast<unsigned>(idle_keepers.size());
  }
  core::status out;
  for (unsigned i = 0; i < runs_at_once; ++i) {
    auto k = new_pooled_keeper();
    if (!k) {
      out = k.error();
      break;
    }
    made.push_back(*k);
  }
  std::lock_guard lock(pool_mu);
  idle_keepers.insert(idle_keepers.end(), made.begin(), made.end());
  return out;
}

pid_t keeper_of(pid_t program) {
  std::lock_guard lock(keepers_mu);
  auto it = keepers.find(program);
  return it == keepers.end() ? -1 : it->second;
}

core::result<child> spawn_contained(const spawn_options& o, containment_kind kind) {
  if (o.argv.empty() || o.argv[0].empty()) return core::status(core::errc::invalid_argument, "empty command");
  if (kind == containment_kind::none) {
    spawn_options plain = o;
    plain.contain = false;
    return spawn(plain);
  }
  if (auto s = containment_available(kind); !s) return s;
  if (kind == containment_kind::pid_namespace && pid_namespaces().pooled) {
    // The program is started exactly as without containment — posix_spawn from this thread —
    // only into the namespace of an idle keeper: no process is created beside it, so the
    // scheduler places it as it would bare (a keeper that starts the program, or one created
    // for the run, measurably changes how exit races resolve; see the header).
    auto k = acquire_keeper();
    if (!k) return k.error();
    spawn_options plain = o;
    plain.contain = false;
    core::result<child> c = core::status(core::errc::internal, "not started");
    {
      children_in_namespace in(k->ns_fd);
      if (!in.ok()) {
        release_keeper(*k, -1);
        return detail::sys_error(in.error(), "setns(CLONE_NEWPID)");
      }
      c = spawn(plain);
    }
    if (!c) {
      release_keeper(*k, -1);
      return c.error();
    }
    {
      std::lock_guard lock(keepers_mu);
      keepers[c->pid()] = k->pid;
    }
    c->keeper_ = std::make_unique<detail::keeper_handle>(k->pid, k->pidfd, k->ns_fd, c->pid(), c->pidfd());
    return c;
  }
  auto path = resolve_program(o.argv[0]);
  if (!path) return path.error();
  if (!o.cwd.empty() && (*path)[0] != '/') {
    std::error_code ec;
    *path = (std::filesystem::current_path(ec) / *path).string();  // found from here, not o.cwd
  }

  // Everything the keeper and the program touch, made before the clone.
  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : o.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int sock[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) != 0) return detail::sys_error(errno, "socketpair");
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) {
    int e = errno;
    close_fd(sock[0]);
    close_fd(sock[1]);
    return detail::sys_error(e, "open /dev/null");
  }
  const bool pid_ns = kind == containment_kind::pid_namespace;
  const bool user_ns = pid_ns && pid_namespaces().user_namespace;
  int sync[2] = {-1, -1};
  if (user_ns && ::pipe2(sync, O_CLOEXEC) != 0) {
    int e = errno;
    close_fd(sock[0]);
    close_fd(sock[1]);
    close_fd(null_fd);
    return detail::sys_error(e, "pipe");
  }
  run_cgroup cg = kind == containment_kind::keeper_cgroup ? make_run_cgroup() : run_cgroup{};

  keeper_plan plan;
  plan.pid_namespace = pid_ns;
  plan.socket_fd = sock[1];
  plan.lifeline_fd = lifeline().read_fd;
  plan.sync_fd = sync[0];
  plan.null_fd = null_fd;
  plan.stdout_fd = o.stdout_fd;
  plan.stderr_fd = o.stderr_fd;
  plan.cgroup_procs_fd = cg.procs_fd;
  plan.cgroup_kill_fd = cg.kill_fd;
  plan.cgroup_dir = cg.dir.empty() ? nullptr : cg.dir.c_str();
  plan.keep_fds = o.keep_fds.data();
  plan.keep_count = o.keep_fds.size();
  plan.new_process_group = o.new_process_group;
  plan.path = path->c_str();
  plan.cwd = o.cwd.empty() ? nullptr : o.cwd.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();

  const cloned started =
      clone_child((pid_ns ? CLONE_NEWPID : 0) | (user_ns ? CLONE_NEWUSER : 0), [&] { keeper_main(plan); });
  const pid_t keeper = started.pid;
  int keeper_pidfd = started.pidfd;
  const int clone_errno = started.error;
  close_fd(sock[1]);
  close_fd(null_fd);
  close_fd(sync[0]);
  close_fd(cg.procs_fd);
  close_fd(cg.kill_fd);
  auto fail = [&](core::status s) -> core::result<child> {
    close_fd(sock[0]);
    close_fd(sync[1]);
    if (keeper > 0) kill_and_reap(keeper, keeper_pidfd);
    close_fd(keeper_pidfd);
    if (!cg.dir.empty()) ::rmdir(cg.dir.c_str());
    return s;
  };
  if (keeper < 0) return fail(detail::sys_error(clone_errno, "clone3 (keeper of " + o.argv[0] + ")"));
  if (user_ns) {
    if (auto s = write_id_maps(keeper); !s) return fail(s);
    if (auto s = detail::write_all(sync[1], "g", "keeper sync"); !s) return fail(s);
    close_fd(sync[1]);
  }
  // The keeper reports within milliseconds (clone, exec); the limit is for a machine that is
  // swapping, not a tuning knob.
  first_report first = receive_first(sock[0], keeper_pidfd, std::chrono::seconds(60));
  if (!first.received) return fail(core::status(core::errc::io_error, "keeper of " + o.argv[0] + " did not report"));
  if (first.message.kind == msg_exec_failed) {
    if (first.pidfd >= 0) ::close(first.pidfd);
    return fail(detail::sys_error(first.message.value, "spawn " + o.argv[0]));
  }
  if (first.message.kind != msg_started || first.pidfd < 0 || first.message.pid <= 0) {
    if (first.pidfd >= 0) ::close(first.pidfd);
    return fail(core::status(core::errc::internal, "keeper of " + o.argv[0] + " sent a malformed report"));
  }
  const pid_t program = first.message.pid;
  {
    std::lock_guard lock(keepers_mu);
    keepers[program] = keeper;
  }
  auto handle = std::make_unique<detail::keeper_handle>(keeper, keeper_pidfd, sock[0], program, std::move(cg.dir));
  return child(program, first.pidfd, std::move(handle));
}

namespace detail {

keeper_handle::keeper_handle(pid_t keeper, int keeper_pidfd, int socket, pid_t program, std::string cgroup_dir)
    : keeper_(keeper), keeper_pidfd_(keeper_pidfd), socket_(socket), program_(program), cgroup_dir_(std::move(cgroup_dir)) {}

keeper_handle::keeper_handle(pid_t keeper, int keeper_pidfd, int ns_fd, pid_t program, int program_pidfd)
    : keeper_(keeper), keeper_pidfd_(keeper_pidfd), ns_fd_(ns_fd), program_(program),
      program_pidfd_(::fcntl(program_pidfd, F_DUPFD_CLOEXEC, 0)) {}

keeper_handle::~keeper_handle() {
  {
    std::lock_guard lock(keepers_mu);
    if (auto it = keepers.find(program_); it != keepers.end() && it->second == keeper_) keepers.erase(it);
  }
  if (relays()) end_relaying_keeper();
  else release_keeper(pooled_keeper{keeper_, keeper_pidfd_, ns_fd_}, program_pidfd_);
  close_fd(program_pidfd_);
}

void keeper_handle::end_relaying_keeper() {
  // Closing the socket tells the keeper the run is over: it ends what is left and exits.
  close_fd(socket_);
  bool gone = wait_pidfd(keeper_pidfd_, 10s);
  if (!gone) {
    pidfd_send_signal(keeper_pidfd_, SIGKILL);
    gone = wait_pidfd(keeper_pidfd_, 5s);
  }
  if (gone) {
    int status;
    while (::waitpid(keeper_, &status, __WALL) < 0 && errno == EINTR) {
    }
  }
  disown(keeper_);  // a keeper stuck in the kernel is left to reap_strays
  close_fd(keeper_pidfd_);
  if (!cgroup_dir_.empty()) ::rmdir(cgroup_dir_.c_str());
}

int keeper_handle::wait_status() {
  if (!relays()) return SIGKILL;  // not a relaying keeper: the program is the harness's child
  for (;;) {
    keeper_message m{};
    ssize_t n = ::recv(socket_, &m, sizeof m, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof m) && m.kind == msg_exited) return m.value;
    if (n <= 0) return SIGKILL;  // the keeper died: the program died with it, by SIGKILL
  }
}

}  // namespace detail
}  // namespace faultline::harness
