#include "harness/run/containment.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
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
#include <thread>
#include <unordered_map>

#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/run/detail/clone_on_stack.h"
#include "harness/run/detail/containment.h"
#include "harness/run/keeper.h"

namespace faultline::harness {
namespace {

using namespace std::chrono_literals;
using keeper::keeper_main;
using keeper::msg_exec_failed;
using keeper::msg_exited;
using keeper::msg_started;
using keeper::pooled_keeper_main;
using keeper::probe_main;
using keeper_message = keeper::message;
using keeper_plan = keeper::plan;
// Shared with run_cgroups.cc (detail/containment.h).
using detail::acquire_run_cgroup;
using detail::cgroups;
using detail::cloned;
using detail::close_fd;
using detail::default_signal_dispositions;
using detail::exec_image;
using detail::exec_image_of;
using detail::exec_keeper_program;
using detail::keeper_program;
using detail::keepers_mu;
using detail::kill_and_reap;
using detail::lifeline;
using detail::release_run_cgroup;
using detail::remove_run_cgroup;
using detail::resolve_program;
using detail::run_cgroup;
using detail::signals_blocked;
using detail::spawn_watched;
using detail::watched_runs;
using detail::watchdog_state;
using detail::watchdog_up;

std::unordered_map<pid_t, pid_t> keepers;  // program -> keeper

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

// Whether keeper_cgroup runs are watched (one watchdog, no keeper per run): the keeper program
// is there to be the watchdog, and the kernel can clone into a cgroup from here.
bool watchdog_wanted() { return detail::clone_on_stack_supported && !keeper_program().empty(); }

// What the child of spawn_keeper_program needs; it shares the harness's memory until its exec.
struct keeper_exec {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const int* inherit = nullptr;  // descriptors the keeper gets (close-on-exec cleared)
  std::size_t inherit_count = 0;
  int error = 0;  // the exec's errno, written by the child
};

// The child of spawn_keeper_program, on a stack of its own in the harness's memory while the
// calling thread waits (CLONE_VFORK): as posix_spawn's child, it only makes system calls.
// Not instrumented (a sanitizer build's checks would write shadow memory for a stack that is
// freed once the child has exec'd, and its runtime is not meant to run in such a child).
__attribute__((no_sanitize("address", "undefined"))) int keeper_exec_child(void* arg) {
  auto* k = static_cast<keeper_exec*>(arg);
  default_signal_dispositions();
  for (std::size_t i = 0; i < k->inherit_count; ++i) ::syscall(SYS_fcntl, k->inherit[i], F_SETFD, 0);
  ::syscall(SYS_execve, k->path, k->argv, k->envp);
  k->error = errno;
  for (;;) ::syscall(SYS_exit_group, 127);
}

}  // namespace

// --- shared with run_cgroups.cc (detail/containment.h) -------------------------------------------

namespace detail {

std::mutex keepers_mu;
std::unordered_map<pid_t, std::string> watched_runs;  // program -> its run cgroup (watched)

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

const std::string& keeper_program() {
  static const std::string path = []() -> std::string {
    const char* env = std::getenv(keeper_env);
    if (env != nullptr && *env != '\0') return std::strcmp(env, "clone") == 0 ? std::string() : std::string(env);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    const auto candidate = exe.parent_path() / "faultline-keeper";
    return ::access(candidate.c_str(), X_OK) == 0 ? candidate.string() : std::string();
  }();
  return path;
}

cloned exec_keeper_program(const std::string& path, std::vector<std::string> args, std::vector<int> inherit) {
  cloned out;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* no_environment[] = {nullptr};
  keeper_exec k;
  k.path = path.c_str();
  k.argv = argv.data();
  k.envp = no_environment;
  k.inherit = inherit.data();
  k.inherit_count = inherit.size();
  constexpr std::size_t stack_bytes = 64 * 1024;
  auto stack = std::make_unique<unsigned char[]>(stack_bytes);
  void* top = stack.get() + stack_bytes;
  signals_blocked blocked;
  out.pid = start_owned([&]() -> pid_t {
    const int pid = ::clone(keeper_exec_child, top, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &k, &out.pidfd);
    if (pid < 0) {
      out.error = errno;
      return -1;
    }
    if (k.error != 0) {  // the exec failed: the child has exited
      out.error = k.error;
      int status;
      while (::waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
      }
      close_fd(out.pidfd);
      return -1;
    }
    return pid;
  });
  return out;
}

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

core::result<exec_image> exec_image_of(const spawn_options& o) {
  auto path = resolve_program(o.argv[0]);
  if (!path) return path.error();
  exec_image image;
  image.path = std::move(*path);
  if (!o.cwd.empty() && image.path[0] != '/') {
    std::error_code ec;
    image.path = (std::filesystem::current_path(ec) / image.path).string();  // found from here, not o.cwd
  }
  for (const auto& a : o.argv) image.argv.push_back(const_cast<char*>(a.c_str()));
  image.argv.push_back(nullptr);
  for (const auto& e : o.envp) image.envp.push_back(const_cast<char*>(e.c_str()));
  image.envp.push_back(nullptr);
  return image;
}

}  // namespace detail

namespace {

cloned spawn_keeper_program(const std::string& path, const keeper_plan& plan) {
  // The program's environment, on a descriptor the keeper reads (keeper_arguments says why).
  const std::string env = keeper::environment_block(plan.envp);
  int env_fd = static_cast<int>(::syscall(SYS_memfd_create, "faultline-keeper-env", MFD_CLOEXEC));
  if (env_fd < 0 || !detail::write_all(env_fd, env, "environment") || ::lseek(env_fd, 0, SEEK_SET) != 0) {
    cloned out;
    out.error = errno != 0 ? errno : EIO;
    close_fd(env_fd);
    return out;
  }
  std::vector<int> inherit;
  for (int fd : {plan.socket_fd, plan.lifeline_fd, plan.null_fd, plan.stdout_fd, plan.stderr_fd, plan.cgroup_procs_fd,
                 plan.cgroup_kill_fd})
    if (fd >= 0) inherit.push_back(fd);
  for (std::size_t i = 0; i < plan.keep_count; ++i) inherit.push_back(plan.keep_fds[i]);
  inherit.push_back(env_fd);
  cloned out = exec_keeper_program(path, keeper::keeper_arguments(plan, env_fd), std::move(inherit));
  close_fd(env_fd);
  return out;
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
    case containment_kind::keeper_cgroup: return watchdog_wanted() ? "cgroup+watchdog" : "cgroup+keeper+pdeathsig";
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
  if (containment().kind == containment_kind::keeper_cgroup && watchdog_wanted()) {
    auto& w = watchdog_state();
    std::lock_guard lock(w.mu);
    watchdog_up(w);  // where it cannot start, runs get keepers of their own
    return {};
  }
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

bool keeper_per_run(containment_kind kind) {
  if (kind == containment_kind::none) return false;
  if (kind == containment_kind::keeper_cgroup) return !watchdog_wanted();
  return true;
}

std::string run_cgroup_of(pid_t program) {
  std::lock_guard lock(keepers_mu);
  auto it = watched_runs.find(program);
  return it == watched_runs.end() ? std::string() : it->second;
}

pid_t keeper_of(pid_t program) {
  std::lock_guard lock(keepers_mu);
  auto it = keepers.find(program);
  return it == keepers.end() ? -1 : it->second;
}

namespace {

// Starts the program exactly as without containment — posix_spawn from this thread — only into
// the namespace of the idle keeper `k`, and records `k` as its keeper. On failure `k` goes back.
core::result<child> spawn_in_namespace_of(const pooled_keeper& k, const spawn_options& o) {
  spawn_options plain = o;
  plain.contain = false;
  core::result<child> c = core::status(core::errc::internal, "not started");
  {
    children_in_namespace in(k.ns_fd);
    if (!in.ok()) {
      release_keeper(k, -1);
      return detail::sys_error(in.error(), "setns(CLONE_NEWPID)");
    }
    c = spawn(plain);
  }
  if (!c) {
    release_keeper(k, -1);
    return c.error();
  }
  std::lock_guard lock(keepers_mu);
  keepers[c->pid()] = k.pid;
  return c;
}

// What starting a keeper of its own holds until the keeper reported: the socket it reports on,
// /dev/null for the program, the pipe that holds a user namespace's keeper until its id maps
// are written, the run's cgroup, and the keeper once cloned. abandon() undoes all of it.
struct keeper_start {
  int sock[2] = {-1, -1};
  int null_fd = -1;
  int sync[2] = {-1, -1};
  run_cgroup cg;
  pid_t keeper = -1;
  int keeper_pidfd = -1;

  // The socket, /dev/null and (`user_ns`) the sync pipe; on failure nothing stays open.
  core::status open_channels(bool user_ns) {
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) != 0) return detail::sys_error(errno, "socketpair");
    null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) {
      int e = errno;
      close_fd(sock[0]);
      close_fd(sock[1]);
      return detail::sys_error(e, "open /dev/null");
    }
    if (user_ns && ::pipe2(sync, O_CLOEXEC) != 0) {
      int e = errno;
      close_fd(sock[0]);
      close_fd(sock[1]);
      close_fd(null_fd);
      return detail::sys_error(e, "pipe");
    }
    return {};
  }

  // Once the keeper is cloned (or not): the ends it holds now are the keeper's alone.
  void close_keeper_ends() {
    close_fd(sock[1]);
    close_fd(null_fd);
    close_fd(sync[0]);
  }

  core::status abandon(core::status s) {
    close_fd(sock[0]);
    close_fd(sync[1]);
    if (keeper > 0) kill_and_reap(keeper, keeper_pidfd);
    close_fd(keeper_pidfd);
    if (keeper > 0) release_run_cgroup(std::move(cg));  // the keeper has exited
    else remove_run_cgroup(cg);
    return s;
  }
};

keeper_plan plan_of(const spawn_options& o, const exec_image& image, const keeper_start& st, bool pid_ns) {
  keeper_plan plan;
  plan.pid_namespace = pid_ns;
  plan.socket_fd = st.sock[1];
  plan.lifeline_fd = lifeline().read_fd;
  plan.sync_fd = st.sync[0];
  plan.null_fd = st.null_fd;
  plan.stdout_fd = o.stdout_fd;
  plan.stderr_fd = o.stderr_fd;
  plan.cgroup_procs_fd = st.cg.procs_fd;
  plan.cgroup_kill_fd = st.cg.kill_fd;
  plan.cgroup_dir = st.cg.dir.empty() ? nullptr : st.cg.dir.c_str();
  plan.keep_fds = o.keep_fds.data();
  plan.keep_count = o.keep_fds.size();
  plan.new_process_group = o.new_process_group;
  plan.path = image.path.c_str();
  plan.cwd = o.cwd.empty() ? nullptr : o.cwd.c_str();
  plan.argv = image.argv.data();
  plan.envp = image.envp.data();
  return plan;
}

// The keeper's first report made into the program's child; any other report fails the start.
core::result<child> child_of_first_report(keeper_start& st, const spawn_options& o) {
  // The keeper reports within milliseconds (clone, exec); the limit is for a machine that is
  // swapping, not a tuning knob.
  first_report first = receive_first(st.sock[0], st.keeper_pidfd, std::chrono::seconds(60));
  if (!first.received) return st.abandon(core::status(core::errc::io_error, "keeper of " + o.argv[0] + " did not report"));
  if (first.message.kind == msg_exec_failed) {
    if (first.pidfd >= 0) ::close(first.pidfd);
    return st.abandon(detail::sys_error(first.message.value, "spawn " + o.argv[0]));
  }
  if (first.message.kind != msg_started || first.pidfd < 0 || first.message.pid <= 0) {
    if (first.pidfd >= 0) ::close(first.pidfd);
    return st.abandon(core::status(core::errc::internal, "keeper of " + o.argv[0] + " sent a malformed report"));
  }
  const pid_t program = first.message.pid;
  {
    std::lock_guard lock(keepers_mu);
    keepers[program] = st.keeper;
  }
  auto handle = std::make_unique<detail::keeper_handle>(st.keeper, st.keeper_pidfd, st.sock[0], program, std::move(st.cg));
  return child(program, first.pidfd, std::move(handle));
}

// A keeper of the run's own (in a new pid namespace, or in the run's cgroup), which starts the
// program and relays its exit status.
core::result<child> spawn_behind_keeper(const spawn_options& o, containment_kind kind) {
  // Everything the keeper and the program touch, made before the clone.
  auto image = exec_image_of(o);
  if (!image) return image.error();
  const bool pid_ns = kind == containment_kind::pid_namespace;
  const bool user_ns = pid_ns && pid_namespaces().user_namespace;
  keeper_start st;
  if (auto s = st.open_channels(user_ns); !s) return s;
  if (kind == containment_kind::keeper_cgroup) st.cg = acquire_run_cgroup();
  const keeper_plan plan = plan_of(o, *image, st, pid_ns);

  const std::string& exec_keeper = pid_ns ? std::string() : keeper_program();
  const cloned started =
      !exec_keeper.empty()
          ? spawn_keeper_program(exec_keeper, plan)
          : clone_child((pid_ns ? CLONE_NEWPID : 0) | (user_ns ? CLONE_NEWUSER : 0), [&] { keeper_main(plan); });
  st.keeper = started.pid;
  st.keeper_pidfd = started.pidfd;
  st.close_keeper_ends();
  if (st.keeper < 0)
    return st.abandon(detail::sys_error(started.error, (exec_keeper.empty() ? "clone3 (keeper of " : "start " + exec_keeper + " (keeper of ") + o.argv[0] + ")"));
  if (user_ns) {
    if (auto s = write_id_maps(st.keeper); !s) return st.abandon(s);
    if (auto s = detail::write_all(st.sync[1], "g", "keeper sync"); !s) return st.abandon(s);
    close_fd(st.sync[1]);
  }
  return child_of_first_report(st, o);
}

}  // namespace

core::result<child> spawn_contained(const spawn_options& o, containment_kind kind) {
  if (o.argv.empty() || o.argv[0].empty()) return core::status(core::errc::invalid_argument, "empty command");
  if (kind == containment_kind::none) {
    spawn_options plain = o;
    plain.contain = false;
    return spawn(plain);
  }
  if (auto s = containment_available(kind); !s) return s;
  if (kind == containment_kind::pid_namespace && pid_namespaces().pooled) {
    // Only into the namespace of an idle keeper: no process is created beside the program, so
    // the scheduler places it as it would bare (a keeper that starts the program, or one created
    // for the run, measurably changes how exit races resolve; see the header).
    auto k = acquire_keeper();
    if (!k) return k.error();
    auto c = spawn_in_namespace_of(*k, o);
    if (!c) return c;
    c->keeper_ = std::make_unique<detail::keeper_handle>(k->pid, k->pidfd, k->ns_fd, c->pid(), c->pidfd());
    return c;
  }
  if (kind == containment_kind::keeper_cgroup && watchdog_wanted()) {
    auto watched = spawn_watched(o);
    if (watched || watched.error().code() != core::errc::unavailable) return watched;
  }
  return spawn_behind_keeper(o, kind);
}

namespace detail {

keeper_handle::keeper_handle(run_cgroup cgroup) : keeper_(-1), keeper_pidfd_(-1), program_(-1), cgroup_(std::move(cgroup)) {}

keeper_handle::keeper_handle(pid_t keeper, int keeper_pidfd, int socket, pid_t program, run_cgroup cgroup)
    : keeper_(keeper), keeper_pidfd_(keeper_pidfd), socket_(socket), program_(program), cgroup_(std::move(cgroup)) {}

keeper_handle::keeper_handle(pid_t keeper, int keeper_pidfd, int ns_fd, pid_t program, int program_pidfd)
    : keeper_(keeper), keeper_pidfd_(keeper_pidfd), ns_fd_(ns_fd), program_(program),
      program_pidfd_(::fcntl(program_pidfd, F_DUPFD_CLOEXEC, 0)) {}

keeper_handle::~keeper_handle() {
  {
    std::lock_guard lock(keepers_mu);
    if (auto it = keepers.find(program_); it != keepers.end() && it->second == keeper_) keepers.erase(it);
  }
  if (keeper_ < 0) {  // watched: kills what is left in the cgroup
    {
      std::lock_guard lock(keepers_mu);
      if (auto it = watched_runs.find(program_); it != watched_runs.end() && it->second == cgroup_.dir)
        watched_runs.erase(it);
    }
    release_run_cgroup(std::move(cgroup_));
  }
  else if (relays()) end_relaying_keeper();
  else release_keeper(pooled_keeper{keeper_, keeper_pidfd_, ns_fd_}, program_pidfd_);
  close_fd(program_pidfd_);
}

void keeper_handle::end_relaying_keeper() {
  // Closing the socket tells the keeper the run is over: it ends what is left and exits.
  close_fd(socket_);
  bool gone = wait_pidfd_exit(keeper_pidfd_, 10s);
  if (!gone) {
    pidfd_send_signal(keeper_pidfd_, SIGKILL);
    gone = wait_pidfd_exit(keeper_pidfd_, 5s);
  }
  if (gone) {
    int status;
    while (::waitpid(keeper_, &status, __WALL) < 0 && errno == EINTR) {
    }
  }
  disown(keeper_);  // a keeper stuck in the kernel is left to reap_strays
  close_fd(keeper_pidfd_);
  // A keeper that did not exit may still write the cgroup's cgroup.kill: not lent again.
  if (gone) release_run_cgroup(std::move(cgroup_));
  else remove_run_cgroup(cgroup_);
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
