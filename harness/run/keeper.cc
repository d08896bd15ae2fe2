#include "harness/run/keeper.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness/run/detail/clone_on_stack.h"

namespace faultline::harness::keeper {

bool send_record(int sock, const void* data, std::size_t size, int pass_fd) noexcept {
  iovec iov{const_cast<void*>(data), size};
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
  do r = ::syscall(SYS_sendmsg, sock, &h, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  return r == static_cast<long>(size);
}

namespace {

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

bool plan_keeps(const plan& p, int fd) {
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
void close_foreign_fds(const plan& p) {
  close_fds_where([&](int fd) {
    if (plan_keeps(p, fd)) return false;
    long flags = sys(SYS_fcntl, fd, F_GETFD);
    return flags >= 0 && (flags & FD_CLOEXEC) != 0;
  });
}

// Once the program has exec'd: the keeper drops everything it held only for the program (its
// output pipes among them, whose readers wait for EOF), keeping what it watches.
void close_program_fds(const plan& p, int sigfd) {
  close_fds_where([&](int fd) {
    return fd != p.socket_fd && fd != p.lifeline_fd && fd != p.cgroup_kill_fd && fd != sigfd;
  });
}

void send_message(int sock, std::int32_t kind, std::int32_t value, std::int32_t pid, int pass_fd) {
  const message m{kind, value, pid};
  send_record(sock, &m, sizeof m, pass_fd);
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
[[noreturn]] void program_main(const plan& p, int err_fd, long keeper_pid, bool in_cgroup) {
  if (!p.pid_namespace) {
    // SIGKILL when the keeper dies; and if it died before this line, go now.
    sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
    if (sys(SYS_getppid) != keeper_pid) sys_exit(127);
  }
  // Best effort: without the cgroup the keeper's kill loop still ends the tree.
  if (p.cgroup_procs_fd >= 0 && !in_cgroup) sys_write_all(p.cgroup_procs_fd, "0", 1);
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
//
// cgroup.kill only once the harness is gone: the harness, alive, kills a populated cgroup itself
// and never lends a killed one again — on Linux 6.18 a process cloned into a cgroup
// (CLONE_INTO_CGROUP) whose cgroup.kill was ever written is killed at birth.
void end_tree(const plan& p, bool harness_gone) {
  if (harness_gone && p.cgroup_kill_fd >= 0) sys_write_all(p.cgroup_kill_fd, "1", 1);
  for (int round = 0; round < 2000; ++round) {  // ~10 s: only a process stuck in the kernel stays
    for_each_child([](pid_t pid) { sys(SYS_kill, pid, SIGKILL); });
    int status;
    long w;
    while ((w = sys(SYS_wait4, -1, arg(&status), WNOHANG | __WALL, 0)) > 0) {
    }
    if (w < 0 && errno == ECHILD) break;
    sys_sleep_ms(5);
  }
  // The harness lends an empty cgroup to its next run; once it is gone, nobody else removes it.
  if (harness_gone && p.cgroup_dir != nullptr) sys(SYS_unlinkat, AT_FDCWD, arg(p.cgroup_dir), AT_REMOVEDIR);
}

// vfork in a frame of its own: the child runs below it and never returns from it, so no local
// of the caller is shared with the child.
[[gnu::noinline]] long vfork_program(const plan& p, int err_fd, long keeper_pid) {
  long pid = ::vfork();
  if (pid == 0) program_main(p, err_fd, keeper_pid, false);
  return pid;
}

// What the program's first frame needs, for clone_into_cgroup's child.
struct program_start {
  const plan* p;
  int err_fd;
  long keeper_pid;
};

void program_trampoline(void* s) {
  auto* start = static_cast<program_start*>(s);
  program_main(*start->p, start->err_fd, start->keeper_pid, true);
}

// The program's stack until its exec (the keeper is single-threaded, and waits: CLONE_VFORK).
alignas(64) unsigned char program_stack[64 * 1024];

// clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP): the program starts inside the run's cgroup
// instead of moving itself there by writing cgroup.procs, which takes the kernel's
// cgroup_threadgroup_rwsem for writing (an RCU grace period, on every run).
long clone_into_cgroup(const plan& p, int err_fd, long keeper_pid, int cgroup_fd) {
  program_start start{&p, err_fd, keeper_pid};
  clone_args ca{};
  ca.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
  ca.exit_signal = SIGCHLD;
  ca.stack = reinterpret_cast<std::uint64_t>(program_stack);
  ca.stack_size = sizeof program_stack;
  ca.cgroup = static_cast<std::uint64_t>(cgroup_fd);
  return detail::clone_on_stack(&ca, program_trampoline, &start);
}

// Starts the program: straight into the run's cgroup where the kernel can, else by vfork (the
// program then writes itself into cgroup.procs).
long start_program(const plan& p, int err_fd, long keeper_pid) {
  if (detail::clone_on_stack_supported && p.cgroup_dir != nullptr) {
    const int cgroup_fd =
        static_cast<int>(sys(SYS_openat, AT_FDCWD, arg(p.cgroup_dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (cgroup_fd >= 0) {
      const long pid = clone_into_cgroup(p, err_fd, keeper_pid, cgroup_fd);
      const int clone_errno = errno;
      sys(SYS_close, cgroup_fd);
      if (pid > 0) return pid;
      errno = clone_errno;  // ENOSYS, E2BIG (Linux < 5.7): the way every kernel has
    }
  }
  return vfork_program(p, err_fd, keeper_pid);
}

int sigchld_fd() {
  std::uint64_t chld = std::uint64_t{1} << (SIGCHLD - 1);
  return static_cast<int>(sys(SYS_signalfd4, -1, arg(&chld), kernel_sigset_bytes, SFD_CLOEXEC | SFD_NONBLOCK));
}

// Replaces the harness's stdio (a reader of the harness's output waits for EOF from everyone
// holding it) with /dev/null, except descriptors the plan keeps for the program.
void detach_stdio(const plan& p) {
  int null_fd = p.null_fd >= 0 ? p.null_fd
                               : static_cast<int>(sys(SYS_openat, AT_FDCWD, arg("/dev/null"), O_RDWR | O_CLOEXEC));
  for (int fd = 0; fd < 3; ++fd)
    if (!plan_keeps(p, fd) && null_fd >= 0) place_fd(null_fd, fd);
  if (p.null_fd < 0 && null_fd > 2) sys(SYS_close, null_fd);
}

// The keeper's own state before it starts the program: the descriptors it keeps, its name,
// SIGCHLD, stdio, its process group, and (in a user namespace) the harness's go once our id maps
// are written. Returns the signalfd it takes SIGCHLD through (-1 without one).
int become_keeper(const plan& p) {
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
  return sigfd;
}

// The program, once its exec succeeded: our child (not reaped yet) and its pidfd.
struct started_program {
  long pid = -1;
  int pidfd = -1;
};

// Starts the program and waits for its exec; when it cannot start, tells the harness
// (msg_exec_failed) and exits.
started_program start_confirmed(const plan& p) {
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
  return {program, pidfd};
}

// Out of the program's way on the CPUs: a task that has just been created carries a full
// load weight, and its blocked load stays on its CPU's runqueue while it sleeps (decaying over
// tens of milliseconds), so the scheduler would place the program's threads as if that CPU
// were busy — measured: with a freshly created sleeper beside it, a program's main thread and
// its spinning worker shared a CPU after a 5 ms sleep in 4 of 300 runs, against 181 of 300
// bare, which changes how an exit race resolves on a small machine. As SCHED_IDLE the
// keeper's weight is ~0 (158 of 300). Only once the program runs: it must not inherit the
// policy (an unprivileged process cannot leave SCHED_IDLE).
void yield_cpus() {
  struct sched_param idle_param {};
  sys(SYS_sched_setscheduler, 0, SCHED_IDLE, arg(&idle_param));
}

// Reaps every child (orphans of the run included) and relays the program's exit status until
// the harness closes the socket (the run is over) or dies (the lifeline's EOF). True when the
// harness died.
bool relay_until_run_over(const plan& p, int sigfd, long program, std::int32_t host_pid) {
  bool harness_gone = false;
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
    if (fds[1].revents != 0) harness_gone = true;
    if (fds[0].revents != 0 || harness_gone) break;
  }
  return harness_gone;
}

}  // namespace

[[noreturn]] void keeper_main(const plan& p) {
  const int sigfd = become_keeper(p);
  const started_program program = start_confirmed(p);
  yield_cpus();
  // The program is our child and not reaped yet, so its pidfd still names it.
  std::int32_t host_pid = host_pid_of(program.pidfd);
  if (host_pid <= 0 && !p.pid_namespace) host_pid = static_cast<std::int32_t>(program.pid);
  send_message(p.socket_fd, msg_started, 0, host_pid, program.pidfd);
  sys(SYS_close, program.pidfd);
  close_program_fds(p, sigfd);
  const bool harness_gone = relay_until_run_over(p, sigfd, program.pid, host_pid);
  // In a PID namespace the kernel kills everything left when pid 1 exits.
  if (!p.pid_namespace) end_tree(p, harness_gone);
  sys_exit(0);
}

// A pooled keeper: pid 1 of its own PID namespace, lent to one run after another. The harness
// spawns each program into the namespace itself (setns), so the keeper creates nothing: it only
// reaps the orphans it inherits and exits when the lifeline reports EOF (the harness died) —
// and the kernel then kills every process in the namespace. It is SCHED_IDLE before anything
// else and never runs while a program runs (unless one of its orphans exits).
[[noreturn]] void pooled_keeper_main(const plan& p) {
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


[[noreturn]] void watchdog_main(int socket_fd, int lifeline_fd) {
  struct sched_param idle_param {};
  sys(SYS_sched_setscheduler, 0, SCHED_IDLE, arg(&idle_param));
  sys(SYS_prctl, PR_SET_NAME, arg("faultline-watch"));
  close_fds_where([&](int fd) { return fd > 2 && fd != socket_fd && fd != lifeline_fd; });
  plan quiet;
  detach_stdio(quiet);
  struct watched {
    std::uint32_t id;
    int kill_fd;
    std::string dir;
  };
  std::vector<watched> cgroups;
  bool harness_gone = false;
  while (!harness_gone) {
    pollfd fds[2] = {{socket_fd, POLLIN, 0}, {lifeline_fd, POLLIN, 0}};
    long r = sys(SYS_ppoll, arg(fds), 2, 0, 0, 0);
    if (r < 0 && errno != EINTR) break;
    // Every message first: a harness that dies right after telling of a cgroup has it killed.
    for (;;) {
      watch_message m{};
      iovec iov{&m, sizeof m};
      msghdr h{};
      h.msg_iov = &iov;
      h.msg_iovlen = 1;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      h.msg_control = control;
      h.msg_controllen = sizeof control;
      const long n = sys(SYS_recvmsg, socket_fd, arg(&h), MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {  // EOF: the harness's end is closed
        harness_gone = true;
        break;
      }
      int passed = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
      m.dir[sizeof m.dir - 1] = '\0';
      if (m.kind == watch_add && passed >= 0) {
        cgroups.push_back({m.id, passed, m.dir});
        passed = -1;
      } else if (m.kind == watch_forget) {
        for (auto it = cgroups.begin(); it != cgroups.end(); ++it) {
          if (it->id != m.id) continue;
          sys(SYS_close, it->kill_fd);
          cgroups.erase(it);
          break;
        }
      }
      if (passed >= 0) sys(SYS_close, passed);
    }
    if (fds[1].revents != 0) harness_gone = true;
  }
  for (const auto& c : cgroups) sys_write_all(c.kill_fd, "1", 1);
  // Removed once empty: a killed process leaves its cgroup when it has exited (a zombie does not
  // hold it). ~10 s for what is stuck in the kernel; what is left then stays.
  for (int round = 0; round < 1000 && !cgroups.empty(); ++round) {
    for (auto it = cgroups.begin(); it != cgroups.end();) {
      if (sys(SYS_unlinkat, AT_FDCWD, arg(it->dir.c_str()), AT_REMOVEDIR) == 0 || errno == ENOENT) {
        sys(SYS_close, it->kill_fd);
        it = cgroups.erase(it);
      } else {
        ++it;
      }
    }
    if (!cgroups.empty()) sys_sleep_ms(10);
  }
  sys_exit(0);
}

namespace {

// Options of faultline-keeper that carry a descriptor, and where each goes in the plan.
struct fd_option {
  const char* name;
  int plan::*field;
};
constexpr fd_option fd_options[] = {
    {"--socket", &plan::socket_fd},          {"--lifeline", &plan::lifeline_fd}, {"--null", &plan::null_fd},
    {"--stdout", &plan::stdout_fd},          {"--stderr", &plan::stderr_fd},     {"--cgroup-procs", &plan::cgroup_procs_fd},
    {"--cgroup-kill", &plan::cgroup_kill_fd},
};

bool parse_fd(const char* text, int& out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > 1 << 30) return false;
  out = static_cast<int>(v);
  return true;
}

// Where parse_keeper_arguments is in its arguments, and the first error it met.
struct argument_cursor {
  argument_cursor(int count, char* const* arguments, std::string& first_error)
      : argc(count), args(arguments), error(first_error) {}
  int argc;
  char* const* args;
  std::string& error;
  int i = 0;

  // The value after the option at i, which moves onto it; nullptr, with the error, at the end.
  const char* value(const char* name) {
    if (i + 1 >= argc) {
      error = std::string(name) + " needs a value";
      return nullptr;
    }
    return args[++i];
  }

  // A descriptor as the option's value; false, with the error, when there is none.
  bool fd_value(const char* name, int& fd) {
    const char* v = value(name);
    if (v == nullptr) return false;
    if (!parse_fd(v, fd)) {
      error = std::string(name) + ": not a descriptor: " + v;
      return false;
    }
    return true;
  }
};

// The option at the cursor, into `out` (or `env_fd`, `keep_fds`); false, with the error, when wrong.
bool parse_option(argument_cursor& at, plan& out, int& env_fd, std::vector<int>& keep_fds) {
  const char* a = at.args[at.i];
  for (const auto& o : fd_options)
    if (std::strcmp(a, o.name) == 0) return at.fd_value(o.name, out.*o.field);
  if (std::strcmp(a, "--env-fd") == 0) return at.fd_value(a, env_fd);
  if (std::strcmp(a, "--keep") == 0) {
    int fd = -1;
    if (!at.fd_value(a, fd)) return false;
    keep_fds.push_back(fd);
    return true;
  }
  if (std::strcmp(a, "--cgroup-dir") == 0 || std::strcmp(a, "--cwd") == 0 || std::strcmp(a, "--path") == 0) {
    const char* v = at.value(a);
    if (v == nullptr) return false;
    (a[2] == 'c' && a[3] == 'g' ? out.cgroup_dir : a[2] == 'c' ? out.cwd : out.path) = v;
    return true;
  }
  if (std::strcmp(a, "--same-group") == 0) {
    out.new_process_group = false;
    return true;
  }
  at.error = std::string("unknown argument: ") + a;
  return false;
}

// The program's environment as the harness wrote it to `env_fd` (NUL-terminated strings), into
// storage.env (null-terminated, pointing into storage.env_block).
bool read_environment(int env_fd, parsed_storage& storage, std::string& error) {
  char buf[65536];
  for (;;) {
    const long n = sys_read(env_fd, buf, sizeof buf);
    if (n < 0) {
      error = std::string("--env-fd: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    storage.env_block.append(buf, static_cast<std::size_t>(n));
  }
  ::close(env_fd);
  if (!storage.env_block.empty() && storage.env_block.back() != '\0') {
    error = "--env-fd: the environment does not end with a NUL";
    return false;
  }
  for (std::size_t at = 0; at < storage.env_block.size(); at = storage.env_block.find('\0', at) + 1)
    storage.env.push_back(storage.env_block.data() + at);
  storage.env.push_back(nullptr);
  return true;
}

}  // namespace

std::string environment_block(char* const* envp) {
  std::string out;
  for (char* const* e = envp; e != nullptr && *e != nullptr; ++e) {
    out += *e;
    out += '\0';
  }
  return out;
}

std::vector<std::string> keeper_arguments(const plan& p, int env_fd) {
  std::vector<std::string> out;
  if (env_fd >= 0) {
    out.emplace_back("--env-fd");
    out.push_back(std::to_string(env_fd));
  }
  for (const auto& o : fd_options) {
    if (p.*o.field < 0) continue;
    out.emplace_back(o.name);
    out.push_back(std::to_string(p.*o.field));
  }
  for (std::size_t i = 0; i < p.keep_count; ++i) {
    out.emplace_back("--keep");
    out.push_back(std::to_string(p.keep_fds[i]));
  }
  if (p.cgroup_dir != nullptr) {
    out.emplace_back("--cgroup-dir");
    out.emplace_back(p.cgroup_dir);
  }
  if (!p.new_process_group) out.emplace_back("--same-group");
  if (p.cwd != nullptr) {
    out.emplace_back("--cwd");
    out.emplace_back(p.cwd);
  }
  out.emplace_back("--path");
  out.emplace_back(p.path != nullptr ? p.path : "");
  out.emplace_back("--");
  for (char* const* a = p.argv; a != nullptr && *a != nullptr; ++a) out.emplace_back(*a);
  return out;
}

bool parse_keeper_arguments(int argc, char* const* args, char* const* envp, parsed_storage& storage, plan& out,
                            std::string& error) {
  out = plan{};
  storage.keep_fds.clear();
  storage.env_block.clear();
  storage.env.clear();
  int env_fd = -1;
  argument_cursor at(argc, args, error);
  for (; at.i < argc; ++at.i) {
    if (std::strcmp(args[at.i], "--") == 0) break;
    if (!parse_option(at, out, env_fd, storage.keep_fds)) return false;
  }
  const int i = at.i;
  if (i >= argc || i + 1 >= argc) {
    error = "no program after --";
    return false;
  }
  if (out.socket_fd < 0 || out.lifeline_fd < 0) {
    error = "--socket and --lifeline are required";
    return false;
  }
  if (out.path == nullptr || *out.path == '\0') {
    error = "--path is required";
    return false;
  }
  out.argv = args + i + 1;
  out.envp = envp;
  if (env_fd >= 0) {
    if (!read_environment(env_fd, storage, error)) return false;
    out.envp = storage.env.data();
  }
  out.keep_fds = storage.keep_fds.data();
  out.keep_count = storage.keep_fds.size();
  return true;
}

}  // namespace faultline::harness::keeper
