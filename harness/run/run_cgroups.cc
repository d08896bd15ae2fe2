#include "harness/run/detail/containment.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "harness/detail/sys.h"
#include "harness/run/detail/clone_on_stack.h"
#include "harness/run/keeper.h"

namespace faultline::harness::detail {
namespace {

using namespace std::chrono_literals;

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

// Removes the empty cgroups that harnesses killed before their exit left (faultline.PID.N of a
// PID that no longer runs). A cgroup that still holds a process is not removed by rmdir.
void sweep_stale_cgroups(const std::string& home) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(home, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("faultline.", 0) != 0) continue;
    const auto dot = name.find('.', 10);
    if (dot == std::string::npos) continue;
    const std::string pid_text = name.substr(10, dot - 10);
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::rmdir(e.path().c_str());
  }
}

std::atomic<std::uint64_t> cgroup_sequence{0};

// Opens the cgroup.procs and cgroup.kill of `dir` into `c` (c.dir stays empty when it cannot).
run_cgroup open_run_cgroup(std::string dir) {
  run_cgroup c;
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

bool send_watch(watchdog_link& w, const keeper::watch_message& m, int pass_fd) {
  return keeper::send_record(w.socket, &m, sizeof m, pass_fd);
}

// Tells the watchdog of a new run cgroup; its number, or 0 when it is not watched.
std::uint32_t watch_cgroup(const std::string& dir, int kill_fd) {
  auto& w = watchdog_state();
  std::lock_guard lock(w.mu);
  keeper::watch_message m{};
  if (!watchdog_up(w) || dir.size() >= sizeof m.dir) return 0;
  m.kind = keeper::watch_add;
  m.id = ++w.next_id;
  std::memcpy(m.dir, dir.c_str(), dir.size() + 1);
  return send_watch(w, m, kill_fd) ? m.id : 0;
}

void forget_cgroup(std::uint32_t id) {
  if (id == 0) return;
  auto& w = watchdog_state();
  std::lock_guard lock(w.mu);
  if (w.socket < 0) return;
  keeper::watch_message m{};
  m.kind = keeper::watch_forget;
  m.id = id;
  send_watch(w, m, -1);
}

struct idle_cgroup {
  std::string dir;
  std::uint32_t watch_id = 0;
};

// Empty cgroups of finished runs (their directories), lent to the next runs: creating and
// removing a cgroup for every run serialises on the kernel's cgroup_mutex and costs each run an
// RCU grace period or two. Removed at exit; a harness killed before leaves them, empty, for the
// next harness to remove (sweep_stale_cgroups).
std::mutex cgroup_pool_mu;
std::vector<idle_cgroup> idle_cgroups;
std::vector<std::string> doomed_cgroups;  // killed, not yet empty when their run ended

void remove_idle_cgroups() {
  std::unique_lock lock(cgroup_pool_mu, std::try_to_lock);  // at exit another thread may hold it
  if (!lock.owns_lock()) return;
  for (const auto& c : idle_cgroups) ::rmdir(c.dir.c_str());  // the watchdog forgets them as it ends
  for (const auto& dir : doomed_cgroups) ::rmdir(dir.c_str());
  idle_cgroups.clear();
  doomed_cgroups.clear();
}

// Whether no process is left in the cgroup (its cgroup.events says "populated 0").
bool cgroup_unpopulated(const std::string& dir) {
  auto events = detail::read_file(dir + "/cgroup.events", 4096);
  return events && events->find("populated 0") != std::string::npos;
}

// What the child of spawn_watched needs; it shares the harness's memory until its exec.
struct watched_start {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
  int null_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  const int* keep_fds = nullptr;
  std::size_t keep_count = 0;
  bool new_process_group = true;
  int error = 0;  // the child's errno when it could not exec
};

__attribute__((no_sanitize("address", "undefined"))) void place_descriptor(int from, int to) {
  if (from == to) ::syscall(SYS_fcntl, to, F_SETFD, 0);
  else ::syscall(SYS_dup3, from, to, 0);
}

// The program's first steps, in the harness's memory on a stack of its own while the calling
// thread waits (CLONE_VFORK): system calls only, as posix_spawn's child.
__attribute__((no_sanitize("address", "undefined"))) void watched_child(void* arg) {
  auto* w = static_cast<watched_start*>(arg);
  if (w->new_process_group) ::syscall(SYS_setpgid, 0, 0);
  place_descriptor(w->null_fd, 0);
  place_descriptor(w->stdout_fd >= 0 ? w->stdout_fd : w->null_fd, 1);
  place_descriptor(w->stderr_fd >= 0 ? w->stderr_fd : 1, 2);
  for (std::size_t i = 0; i < w->keep_count; ++i) ::syscall(SYS_fcntl, w->keep_fds[i], F_SETFD, 0);
  default_signal_dispositions();
  std::uint64_t none = 0;
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, 8);
  if (w->cwd == nullptr || ::syscall(SYS_chdir, w->cwd) == 0) ::syscall(SYS_execve, w->path, w->argv, w->envp);
  w->error = errno;
  for (;;) ::syscall(SYS_exit_group, 127);
}

}  // namespace

const cgroup_home& cgroups() {
  static const cgroup_home home = [] {
    cgroup_home h = find_cgroup_home();
    if (!h.dir.empty()) sweep_stale_cgroups(h.dir);
    return h;
  }();
  return home;
}

watchdog_link& watchdog_state() {
  static watchdog_link w;
  return w;
}

bool watchdog_up(watchdog_link& w) {
  if (!w.tried) {
    w.tried = true;
    const std::string& program = keeper_program();
    int sv[2];
    if (program.empty() || !lifeline().error.is_ok() ||
        ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      return false;
    const cloned c = exec_keeper_program(program, {"--watch", std::to_string(sv[1]), std::to_string(lifeline().read_fd)},
                                         {sv[1], lifeline().read_fd});
    ::close(sv[1]);
    if (c.pid < 0) {
      ::close(sv[0]);
      return false;
    }
    w.pid = c.pid;
    w.pidfd = c.pidfd;
    w.socket = sv[0];
  }
  if (w.socket < 0) return false;
  pollfd gone{w.pidfd, POLLIN, 0};
  if (::poll(&gone, 1, 0) != 0) {  // it died: no watched run from now on
    close_fd(w.socket);
    kill_and_reap(w.pid, w.pidfd);
    close_fd(w.pidfd);
    return false;
  }
  return true;
}

void remove_run_cgroup(run_cgroup& c) {
  close_fd(c.procs_fd);
  close_fd(c.kill_fd);
  if (!c.dir.empty()) ::rmdir(c.dir.c_str());
  forget_cgroup(c.watch_id);
  c.watch_id = 0;
  c.dir.clear();
}

run_cgroup acquire_run_cgroup() {
  if (cgroups().dir.empty()) return {};
  for (;;) {
    idle_cgroup idle;
    {
      std::lock_guard lock(cgroup_pool_mu);
      if (idle_cgroups.empty()) break;
      idle = std::move(idle_cgroups.back());
      idle_cgroups.pop_back();
    }
    auto c = open_run_cgroup(std::move(idle.dir));
    if (!c.dir.empty()) {
      c.watch_id = idle.watch_id;
      return c;
    }
    forget_cgroup(idle.watch_id);
  }
  static const bool cleanup_registered = std::atexit(remove_idle_cgroups) == 0;
  (void)cleanup_registered;
  std::string dir = cgroups().dir + "/faultline." + std::to_string(::getpid()) + "." + std::to_string(++cgroup_sequence);
  if (::mkdir(dir.c_str(), 0755) != 0) return {};
  auto c = open_run_cgroup(std::move(dir));
  if (!c.dir.empty()) c.watch_id = watch_cgroup(c.dir, c.kill_fd);
  return c;
}

void release_run_cgroup(run_cgroup c) {
  if (c.dir.empty()) return;
  if (!cgroup_unpopulated(c.dir)) {
    detail::write_all(c.kill_fd, "1", "cgroup.kill");
    for (int i = 0; i < 1000 && !cgroup_unpopulated(c.dir); ++i) std::this_thread::sleep_for(1ms);
    const std::string dir = c.dir;
    remove_run_cgroup(c);
    if (::access(dir.c_str(), F_OK) == 0) {
      std::lock_guard lock(cgroup_pool_mu);
      doomed_cgroups.push_back(dir);
    }
    return;
  }
  close_fd(c.procs_fd);
  close_fd(c.kill_fd);
  std::lock_guard lock(cgroup_pool_mu);
  idle_cgroups.push_back({std::move(c.dir), c.watch_id});
}

namespace {

watched_start watched_start_of(const spawn_options& o, const exec_image& image) {
  watched_start w;
  w.path = image.path.c_str();
  w.argv = image.argv.data();
  w.envp = image.envp.data();
  w.cwd = o.cwd.empty() ? nullptr : o.cwd.c_str();
  w.stdout_fd = o.stdout_fd;
  w.stderr_fd = o.stderr_fd;
  w.keep_fds = o.keep_fds.data();
  w.keep_count = o.keep_fds.size();
  w.new_process_group = o.new_process_group;
  return w;
}

// Starts `w`'s program straight into the cgroup `dir` (CLONE_INTO_CGROUP, CLONE_VFORK on a stack
// of its own, as posix_spawn would) as an owned child. pid -1 when it did not start: `error` is
// the clone's errno, or w.error the program's when it could not exec.
cloned clone_into_cgroup(const std::string& dir, watched_start& w) {
  cloned out;
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  w.null_fd = null_fd;
  constexpr std::size_t stack_bytes = 64 * 1024;
  auto stack = std::make_unique<unsigned char[]>(stack_bytes);
  if (dir_fd >= 0 && null_fd >= 0) {
    signals_blocked blocked;
    out.pid = start_owned([&]() -> pid_t {
      clone_args ca{};
      ca.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP | CLONE_PIDFD;
      ca.pidfd = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&out.pidfd));
      ca.exit_signal = SIGCHLD;
      ca.stack = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(stack.get()));
      ca.stack_size = stack_bytes;
      ca.cgroup = static_cast<std::uint64_t>(dir_fd);
      const long r = detail::clone_on_stack(&ca, watched_child, &w);
      if (r < 0) {
        out.error = errno;
        return -1;
      }
      if (w.error != 0) {  // it could not exec, and has exited
        int status;
        while (::waitpid(static_cast<pid_t>(r), &status, __WALL) < 0 && errno == EINTR) {
        }
        close_fd(out.pidfd);
        return -1;
      }
      return static_cast<pid_t>(r);
    });
  } else {
    out.error = errno;
  }
  if (dir_fd >= 0) ::close(dir_fd);
  if (null_fd >= 0) ::close(null_fd);
  return out;
}

}  // namespace

core::result<child> spawn_watched(const spawn_options& o) {
  static std::atomic<bool> unsupported{!detail::clone_on_stack_supported};
  if (unsupported.load()) return core::status(core::errc::unavailable, "no CLONE_INTO_CGROUP");
  auto image = exec_image_of(o);
  if (!image) return image.error();
  run_cgroup cg = acquire_run_cgroup();
  if (cg.dir.empty() || cg.watch_id == 0) {
    release_run_cgroup(std::move(cg));
    return core::status(core::errc::unavailable, "no watched cgroup");
  }
  watched_start w = watched_start_of(o, *image);
  const cloned started = clone_into_cgroup(cg.dir, w);
  if (started.pid < 0) {
    release_run_cgroup(std::move(cg));
    if (w.error != 0) return detail::sys_error(w.error, "spawn " + o.argv[0]);
    const int e = started.error;
    if (e == ENOSYS || e == E2BIG || e == EINVAL || e == EOPNOTSUPP) unsupported = true;
    return core::status(core::errc::unavailable, std::string("clone3 into a cgroup: ") + std::strerror(e));
  }
  {
    std::lock_guard lock(keepers_mu);
    watched_runs[started.pid] = cg.dir;
  }
  auto handle = std::make_unique<detail::keeper_handle>(std::move(cg));
  handle->set_program(started.pid);
  return child(started.pid, started.pidfd, std::move(handle));
}

}  // namespace faultline::harness::detail
