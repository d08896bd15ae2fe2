// faultline-core-handler: core_pattern's pipe program (core_handler.h says what it is for).
//
//   |/usr/local/libexec/faultline-core-handler %P %s %c %e PREVIOUS
//
// The kernel runs it for every crash on the machine, as root with full capabilities, in the
// initial namespaces, with the core on stdin, cwd "/", and no stdout or stderr. The crashing
// process waits in the kernel while its core is read, so the handler must end: it reads what it
// needs from /proc/PID first (the process is there until the pipe is drained), reads stdin only
// as long as it keeps what it reads (then exits, which ends the kernel's dump), stops when no
// byte came for idle_limit_s, and exits 0 whatever happened.
// Problems go to the kernel log (/dev/kmsg), the only place anyone would look.
//
// Files are opened as the kernel would for a file pattern: in the crashing process's root and
// working directory (chroot to /proc/PID/root, fchdir to /proc/PID/cwd), as its filesystem
// user and groups (setgroups, setresgid, setresuid before any output file is opened), with
// O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, at most %c bytes and nothing below a page. A process
// that is dumpable only by root (suid_dumpable 2: /proc/PID is root's) is dumped as the kernel
// does it, as root and only to an absolute path of the previous pattern; its FAULTLINE_RUN_DIR
// is not trusted.
//
// `faultline-core-handler --self-test-crash` (never an argv the kernel gives) dies of SIGSEGV:
// install_core_handler crashes it to check that the kernel runs the handler.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "harness/run/core_handler/core_handler.h"

namespace {

using namespace faultline::harness;

constexpr unsigned idle_limit_s = 120;
constexpr std::size_t status_limit_bytes = 64 << 10;
constexpr std::size_t environ_limit_bytes = 4 << 20;
constexpr const char* run_dir_env = "FAULTLINE_RUN_DIR";  // faults/preload/protocol.h's run_dir_env

int kmsg_fd = -1;
pid_t crashing_pid = 0;

void note(const std::string& what) {
  if (kmsg_fd < 0) return;
  const std::string line =
      "<4>faultline-core-handler: pid " + std::to_string(crashing_pid) + ": " + what + "\n";
  ssize_t n;
  do {
    n = ::write(kmsg_fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
}

std::string error_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// The kernel starts a usermode helper with stdin only: a file opened as fd 1 or 2 would take
// whatever anything prints to stdout or stderr.
void ensure_standard_fds() {
  for (;;) {
    const int fd = ::open("/dev/null", O_RDWR | O_NOCTTY);
    if (fd < 0) return;
    if (fd > 2) {
      ::close(fd);
      return;
    }
  }
}

bool read_file(const std::string& path, std::size_t limit_bytes, std::string& out) {
  out.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  bool ok = true;
  while (out.size() < limit_bytes) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return ok;
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool drop_to(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  if (::setgroups(groups.size(), groups.data()) != 0) return false;
  if (::setresgid(gid, gid, gid) != 0) return false;
  if (::setresuid(uid, uid, uid) != 0) return false;
  uid_t r = 0, e = 0, s = 0;
  gid_t rg = 0, eg = 0, sg = 0;
  return ::getresuid(&r, &e, &s) == 0 && ::getresgid(&rg, &eg, &sg) == 0 && r == uid && e == uid && s == uid &&
         rg == gid && eg == gid && sg == gid;
}

// Where the core goes: `fd` (-1: nowhere); for a run's core, the .part name to rename.
struct destination {
  int fd = -1;
  int dir_fd = -1;
  std::string part;
  std::string name;
};

destination open_in_run_dir(const std::string& run_dir, pid_t pid, uid_t uid) {
  destination d;
  const int dir_fd = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) {
    note(error_text(std::string(run_dir_env) + " " + run_dir));
    return d;
  }
  struct stat st {};
  if (::fstat(dir_fd, &st) != 0 || st.st_uid != uid) {
    note(std::string(run_dir_env) + " " + run_dir + " is not the crashing process's user's");
    ::close(dir_fd);
    return d;
  }
  d.name = handler_core_path("", pid).string();
  d.part = d.name + ".part";
  ::unlinkat(dir_fd, d.part.c_str(), 0);  // a leftover of an earlier process of this pid
  d.fd = ::openat(dir_fd, d.part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (d.fd < 0) {
    note(error_text("create " + run_dir + "/" + d.part));
    ::close(dir_fd);
    return destination{};
  }
  d.dir_fd = dir_fd;
  return d;
}

// The previous pattern's file, opened under the kernel's rules for a file core (fs/coredump.c).
destination open_previous(const std::string& name, bool root_only, uid_t uid) {
  destination d;
  if (name.empty()) return d;
  if (root_only && name[0] != '/') return d;  // "can only dump core to fully qualified path"
  const auto slash = name.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : slash == 0 ? "/" : name.substr(0, slash);
  const std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
  if (base.empty()) return d;
  int dir_fd = AT_FDCWD;
  if (!dir.empty()) {
    dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return d;
  }
  if (!root_only) ::unlinkat(dir_fd, base.c_str(), 0);  // the kernel unlinks any non-directory
  const int fd = ::openat(dir_fd, base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_LARGEFILE, 0600);
  if (dir_fd != AT_FDCWD) ::close(dir_fd);
  if (fd < 0) return d;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != (root_only ? 0 : uid) ||
      (st.st_mode & 0677) != 0600) {
    ::close(fd);
    return d;
  }
  d.fd = fd;
  return d;
}

destination prepare(int argc, char** argv, std::uint64_t& limit_bytes) {
  limit_bytes = 0;
  std::vector<std::string_view> args(argv, argv + argc);
  auto a = parse_core_handler_args(args);
  if (!a) {
    note("unexpected arguments: core_pattern must be |HANDLER " + std::string(core_handler_specifiers) + " PREVIOUS");
    return {};
  }
  crashing_pid = a->host_pid;
  limit_bytes = a->limit_bytes;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (a->limit_bytes < static_cast<std::uint64_t>(page > 0 ? page : 4096)) return {};  // RLIMIT_CORE says no core

  const std::string proc = "/proc/" + std::to_string(a->host_pid);
  std::string text;
  if (!read_file(proc + "/status", status_limit_bytes, text)) {
    note(error_text("read " + proc + "/status"));
    return {};
  }
  auto ids = parse_proc_status(text);
  if (!ids) {
    note("cannot parse " + proc + "/status");
    return {};
  }
  struct stat proc_st {};
  if (::stat(proc.c_str(), &proc_st) != 0) return {};
  // /proc/PID is owned by the process's euid while it is dumpable by its user, by root (of its
  // user namespace) once it is dumpable by root only (suid_dumpable 2).
  const bool root_only = proc_st.st_uid != ids->euid;
  std::string env_image;
  if (!root_only) read_file(proc + "/environ", environ_limit_bytes, env_image);
  char exe[PATH_MAX] = {};
  const ssize_t exe_len = ::readlink((proc + "/exe").c_str(), exe, sizeof exe - 1);
  std::string uses_pid;
  read_file("/proc/sys/kernel/core_uses_pid", 64, uses_pid);
  utsname uts {};
  ::uname(&uts);

  crashed_process p;
  p.host_pid = a->host_pid;
  p.pid = ids->ns_pid > 0 ? ids->ns_pid : a->host_pid;
  p.uid = ids->uid;
  p.gid = ids->gid;
  p.signal = a->signal;
  p.limit_bytes = a->limit_bytes;
  p.time_s = static_cast<std::int64_t>(::time(nullptr));
  p.dumpable = root_only ? 2 : 1;
  p.comm = a->comm;
  if (exe_len > 0) p.executable.assign(exe, static_cast<std::size_t>(exe_len));
  p.hostname = uts.nodename;
  const std::string name = expand_core_pattern(a->previous, p, uses_pid.rfind('1', 0) == 0);

  if (root_only) {
    if (::chdir("/") != 0) return {};
    ::umask(077);
    return open_previous(name, true, 0);
  }
  // The process's view of the file system, as its user.
  const int root_fd = ::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const int cwd_fd = ::open((proc + "/cwd").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const bool entered = root_fd >= 0 && cwd_fd >= 0 && ::fchdir(root_fd) == 0 && ::chroot(".") == 0 && ::fchdir(cwd_fd) == 0;
  if (root_fd >= 0) ::close(root_fd);
  if (cwd_fd >= 0) ::close(cwd_fd);
  if (!entered) {
    note(error_text("cannot enter the root and working directory of " + proc));
    return {};
  }
  if (!drop_to(ids->fsuid, ids->fsgid, ids->groups)) {
    note(error_text("cannot become uid " + std::to_string(ids->fsuid) + " gid " + std::to_string(ids->fsgid)));
    return {};
  }
  ::umask(077);
  if (auto run_dir = environ_value(env_image, run_dir_env); run_dir && !run_dir->empty() && (*run_dir)[0] == '/') {
    destination d = open_in_run_dir(*run_dir, p.pid, ids->fsuid);
    if (d.fd >= 0) return d;
  }
  return open_previous(name, false, ids->fsuid);
}

int self_test_crash() {
  rlimit lim {};
  if (::getrlimit(RLIMIT_CORE, &lim) == 0) {
    if (::geteuid() == 0) lim.rlim_max = RLIM_INFINITY;
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_CORE, &lim);
  }
  ::signal(SIGSEGV, SIG_DFL);
  ::raise(SIGSEGV);
  return 111;
}

constexpr int core_pipe_bytes = 1 << 20;
constexpr std::size_t hole_bytes = 4096;

// Writes `n` bytes at the file's offset, skipping whole blocks of zeros (a hole, read back as
// zeros): through a pipe the kernel writes every page a core's mappings never touched as zeros,
// most of a CUDA process's 70 MB core. The caller sets the final length with ftruncate.
bool write_sparse(int fd, const char* data, std::size_t n) {
  static const char zeros[hole_bytes] = {};
  std::size_t at = 0;
  while (at < n) {
    const std::size_t block = std::min(hole_bytes, n - at);
    if (block == hole_bytes && std::memcmp(data + at, zeros, hole_bytes) == 0) {
      if (::lseek(fd, static_cast<off_t>(hole_bytes), SEEK_CUR) < 0) return false;
      at += block;
      continue;
    }
    std::size_t run = block;  // extend over the following blocks that hold data
    while (at + run + hole_bytes <= n && std::memcmp(data + at + run, zeros, hole_bytes) != 0) run += hole_bytes;
    if (at + run + hole_bytes > n) run = n - at;
    if (!write_all(fd, data + at, run)) return false;
    at += run;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--self-test-crash") == 0) return self_test_crash();
  ensure_standard_fds();
  ::signal(SIGALRM, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);
  ::alarm(idle_limit_s);
  kmsg_fd = ::open("/dev/kmsg", O_WRONLY | O_CLOEXEC | O_NOCTTY);

  destination d;
  std::uint64_t limit_bytes = 0;
  try {
    d = prepare(argc, argv, limit_bytes);
  } catch (...) {  // std::bad_alloc: no core, but the pipe is still drained
    note("out of memory");
  }

  // The crashing process is held until its whole core has passed through this pipe: a pipe of
  // 1 MiB instead of 64 KiB takes a sixteenth of the round trips. (Measured on an H100: a dumping
  // CUDA process keeps its context and raises the crash rate of the runs beside it.) Only now:
  // prepare() reads the process's /proc files, which a full pipe keeps there (the kernel may reap
  // a process whose whole core fit in the pipe). A failure leaves the default size.
  ::fcntl(STDIN_FILENO, F_SETPIPE_SZ, core_pipe_bytes);
  static char buf[1 << 20];
  std::uint64_t written = 0;
  bool failed = false;
  // Read only while something is kept: once the handler stops reading and exits, the kernel's
  // next write into the pipe fails and the dump ends, so a process whose core nobody keeps
  // (RLIMIT_CORE 0, no destination) is not held for its whole memory to be copied.
  while (d.fd >= 0 && !failed && written < limit_bytes) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    ::alarm(idle_limit_s);
    const std::size_t take =
        static_cast<std::size_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(n), limit_bytes - written));
    if (!write_sparse(d.fd, buf, take)) {
      failed = true;
      note(error_text("write " + (d.part.empty() ? std::string("the core") : d.part)));
    }
    written += take;
  }
  ::alarm(0);
  // The file's length, where its last block was a hole that write_sparse skipped.
  if (d.fd >= 0 && !failed && ::ftruncate(d.fd, static_cast<off_t>(written)) != 0) failed = true;
  if (d.fd >= 0 && ::close(d.fd) != 0) failed = true;
  if (d.dir_fd >= 0) {
    // A run's core appears whole or not at all: the harness never reads half of one.
    if (failed || written == 0) {
      ::unlinkat(d.dir_fd, d.part.c_str(), 0);
    } else if (::renameat2(d.dir_fd, d.part.c_str(), d.dir_fd, d.name.c_str(), RENAME_NOREPLACE) != 0 &&
               (errno != EINVAL || ::renameat(d.dir_fd, d.part.c_str(), d.dir_fd, d.name.c_str()) != 0)) {
      note(error_text("rename " + d.part + " to " + d.name));
      ::unlinkat(d.dir_fd, d.part.c_str(), 0);
    }
    ::close(d.dir_fd);
  }
  return 0;
}
