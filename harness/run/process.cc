#include "harness/run/process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <set>

#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/run/containment.h"

extern char** environ;

namespace faultline::harness {
namespace {

// Owned children. A spawn holds spawn_gate shared from before its child exists until the child is
// registered; stray reaping and every ownership question hold it exclusively, so a child that
// exits before its owner registered it cannot be taken for a stray. Shared, because a spawn holds
// it until its child's exec is done (CLONE_VFORK, posix_spawn): exclusive, it serialised every
// run's start across a campaign's threads (at --jobs 16 it was held nearly all the time).
std::shared_mutex spawn_gate;
std::mutex owned_mu;  // the set itself
std::set<pid_t> owned;

}  // namespace

core::status become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) return detail::sys_error(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGCHLD, &sa, nullptr) != 0) return detail::sys_error(errno, "sigaction(SIGCHLD)");
  return {};
}

child::child() noexcept = default;

child::child(pid_t pid, int pidfd) noexcept : pid_(pid), pidfd_(pidfd) {}

child::child(pid_t pid, int pidfd, std::unique_ptr<detail::keeper_handle> keeper)
    : pid_(pid), pidfd_(pidfd), keeper_(std::move(keeper)) {}

child::child(child&& o) noexcept
    : pid_(o.pid_), pidfd_(o.pidfd_), reaped_(o.reaped_), keeper_(std::move(o.keeper_)) {
  o.pid_ = -1;
  o.pidfd_ = -1;
}

child& child::operator=(child&& o) noexcept {
  if (this != &o) {
    release();
    pid_ = o.pid_;
    pidfd_ = o.pidfd_;
    reaped_ = o.reaped_;
    keeper_ = std::move(o.keeper_);
    o.pid_ = -1;
    o.pidfd_ = -1;
  }
  return *this;
}

child::~child() { release(); }

pid_t child::keeper() const noexcept { return keeper_ ? keeper_->pid() : -1; }

void child::release() noexcept {
  const bool own_child = !keeper_ || !keeper_->relays();  // a relaying keeper is the parent
  if (own_child && pid_ > 0 && !reaped_) {
    std::lock_guard lock(owned_mu);
    owned.erase(pid_);  // hand its zombie to reap_strays
  }
  keeper_.reset();  // a keeper ends what is left of the tree (or goes back to its pool)
  if (pidfd_ >= 0) ::close(pidfd_);
  pid_ = -1;
  pidfd_ = -1;
}

bool wait_pidfd_exit(int pidfd, std::chrono::milliseconds d) {
  pollfd p{pidfd, POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + d;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // a pidfd that cannot be polled: treat as gone
  }
}

bool child::wait_exit_for(std::chrono::milliseconds d) const {
  if (reaped_) return true;
  return wait_pidfd_exit(pidfd_, d);
}

bool child::signal(int sig) const {
  if (reaped_ || pidfd_ < 0) return false;
  return detail::pidfd_send_signal(pidfd_, sig) == 0;
}

int child::reap() {
  if (keeper_ && keeper_->relays()) {
    reaped_ = true;
    return keeper_->wait_status();
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  std::lock_guard lock(owned_mu);
  owned.erase(pid_);
  return status;
}

core::result<child> spawn(const spawn_options& o) {
  if (o.argv.empty() || o.argv[0].empty()) return core::status(core::errc::invalid_argument, "empty command");
  if (o.contain && containment().kind != containment_kind::none) return spawn_contained(o, containment().kind);
  // A relative program path names a file from the harness's directory, not from o.cwd.
  std::string program = o.argv[0];
  if (!o.cwd.empty() && program.find('/') != std::string::npos && program[0] != '/') {
    std::error_code ec;
    program = (std::filesystem::current_path(ec) / program).string();
  }
  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : o.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, o.cwd.c_str());
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (o.stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.stdout_fd, 1);
  else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (o.stderr_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.stderr_fd, 2);
  else posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // dup2 onto itself clears close-on-exec in the child only (glibc >= 2.29).
  for (int fd : o.keep_fds) posix_spawn_file_actions_adddup2(&fa, fd, fd);
  // Every signal back to its default, glibc's internal SIGCANCEL and SIGSETXID included:
  // sigfillset leaves those out, and glibc's spawn child then passes them on *ignored*, which a
  // program started from a shell never sees.
  sigset_t all, none;
  std::memset(&all, 0xff, sizeof all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  if (o.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);

  pid_t pid = -1;
  int err = 0, pidfd = -1;
  {
    std::shared_lock gate(spawn_gate);
    err = o.argv[0].find('/') == std::string::npos
              ? ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data())
              : ::posix_spawn(&pid, program.c_str(), &fa, &attr, argv.data(), envp.data());
    if (err == 0) {
      {
        std::lock_guard lock(owned_mu);
        owned.insert(pid);
      }
      // The child cannot have been reaped yet (we own it), so its pid is still its own.
      pidfd = detail::pidfd_open(pid);
    }
  }
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return detail::sys_error(err, "spawn " + o.argv[0]);
  if (pidfd < 0) {
    int e = errno;
    ::kill(pid, SIGKILL);
    child c(pid, -1);
    c.reap();
    return detail::sys_error(e, "pidfd_open");
  }
  return child(pid, pidfd);
}

core::result<std::string> find_program(const std::string& name) {
  if (name.empty()) return core::status(core::errc::not_found, "no program named: the command is empty");
  auto check = [](const std::string& path) -> core::status {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return core::status(core::errc::not_found, path + ": no such file");
    if (!S_ISREG(st.st_mode)) return core::status(core::errc::refused, path + ": not a program (" +
                                                                  (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") + ")");
    if (::access(path.c_str(), X_OK) != 0) return core::status(core::errc::refused, path + ": not executable");
    return {};
  };
  if (name.find('/') != std::string::npos) {
    if (auto s = check(name); !s) return s;
    return name;
  }
  const char* env_path = std::getenv("PATH");
  const std::string search = env_path != nullptr ? env_path : "/bin:/usr/bin";
  std::optional<core::status> refused;  // execvp's EACCES: a match that cannot run, when none can
  for (std::size_t start = 0;;) {
    const auto colon = search.find(':', start);
    const std::string dir = search.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    auto s = check(candidate);
    if (s) return candidate;
    if (s.code() == core::errc::refused && !refused) refused = s;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (refused) return core::status(core::errc::refused, name + ": found in PATH but cannot be run: " + refused->message());
  return core::status(core::errc::not_found, name + ": not found in PATH (" + search + ")");
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

void set_env(std::vector<std::string>& env, const std::string& key, const std::optional<std::string>& value) {
  const std::string prefix = key + "=";
  std::erase_if(env, [&](const std::string& e) { return e.compare(0, prefix.size(), prefix) == 0; });
  if (value) env.push_back(prefix + *value);
}

std::optional<std::string> get_env(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return e.substr(prefix.size());
  return std::nullopt;
}

core::result<tool_output> run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                   const std::vector<std::string>& envp, bool separate_stderr) {
  int out_pipe[2], err_pipe[2] = {-1, -1};
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return detail::sys_error(errno, "pipe");
  if (separate_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return detail::sys_error(e, "pipe");
  }
  spawn_options o;
  o.argv = argv;
  o.envp = envp;
  o.stdout_fd = out_pipe[1];
  o.stderr_fd = err_pipe[1];
  auto c = spawn(o);
  ::close(out_pipe[1]);
  if (err_pipe[1] >= 0) ::close(err_pipe[1]);
  if (!c) {
    ::close(out_pipe[0]);
    if (err_pipe[0] >= 0) ::close(err_pipe[0]);
    return c.error();
  }
  tool_output out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&out.output, &out.errors};
  int open_fds = separate_stderr ? 2 : 1;
  char buf[8192];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      out.timed_out = true;
      break;
    }
    int r = ::poll(fds, 2, static_cast<int>(left.count()));  // fd -1 is ignored by poll
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
        continue;
      }
      ::close(fds[i].fd);  // EOF: every writer closed its end
      fds[i].fd = -1;
      --open_fds;
    }
  }
  for (auto& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  if (out.timed_out) {
    ::kill(-c->pid(), SIGKILL);  // the tool leads its own group; take its helpers too
    c->signal(SIGKILL);
  }
  out.status = c->reap();
  return out;
}

namespace {

std::vector<detail::proc_stat> direct_children() {
  const pid_t self = ::getpid();
  std::vector<detail::proc_stat> out;
  if (auto kids = detail::children_of(self)) {
    for (pid_t k : *kids)
      if (auto s = detail::read_stat(k)) out.push_back(std::move(*s));
    return out;
  }
  for (auto& p : detail::snapshot())
    if (p.ppid == self) out.push_back(std::move(p));
  return out;
}

}  // namespace

void reap_strays() {
  for (const auto& p : direct_children()) {
    if (p.state != 'Z') continue;
    std::unique_lock gate(spawn_gate);
    std::lock_guard lock(owned_mu);
    if (owned.count(p.pid)) continue;
    int status;
    ::waitpid(p.pid, &status, WNOHANG);
  }
}

void reap_strays_at_most_every(std::chrono::milliseconds period) {
  static std::atomic<std::int64_t> last{std::numeric_limits<std::int64_t>::min() / 2};
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch()).count();
  std::int64_t before = last.load(std::memory_order_relaxed);
  if (now - before < std::chrono::duration_cast<std::chrono::nanoseconds>(period).count()) return;
  if (!last.compare_exchange_strong(before, now, std::memory_order_relaxed)) return;  // another thread is at it
  reap_strays();
}

std::vector<pid_t> stray_children() {
  std::vector<pid_t> out;
  for (const auto& p : direct_children()) {
    if (p.state == 'Z' || p.state == 'X') continue;
    if (!is_owned(p.pid)) out.push_back(p.pid);
  }
  return out;
}

bool is_owned(pid_t pid) {
  std::unique_lock gate(spawn_gate);
  std::lock_guard lock(owned_mu);
  return owned.count(pid) != 0;
}

pid_t start_owned(const std::function<pid_t()>& start) {
  std::shared_lock gate(spawn_gate);
  pid_t pid = start();
  if (pid > 0) {
    std::lock_guard lock(owned_mu);
    owned.insert(pid);
  }
  return pid;
}

void disown(pid_t pid) {
  std::lock_guard lock(owned_mu);
  owned.erase(pid);
}

}  // namespace faultline::harness
