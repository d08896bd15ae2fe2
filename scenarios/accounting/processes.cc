#include "scenarios/accounting/processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "faults/engine.h"
#include "faults/spec.h"

extern char** environ;

namespace faultline::scenarios::accounting_support {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

void wait_for_go() {
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) return;
    if (n < 0 && errno != EINTR) return;
  }
}

namespace {

std::mutex live_files_mu;
std::vector<std::string> live_files;  // every live scratch_region's paths

void track(const std::string& path) {
  std::lock_guard lock(live_files_mu);
  live_files.push_back(path);
}

void untrack(const std::string& path) {
  std::lock_guard lock(live_files_mu);
  live_files.erase(std::remove(live_files.begin(), live_files.end(), path), live_files.end());
}

}  // namespace

void require(context& ctx, bool ok, std::string_view invariant, std::string_view detail) {
  if (ok) return;
  {
    std::lock_guard lock(live_files_mu);
    for (const auto& p : live_files) ::unlink(p.c_str());
  }
  ctx.require(false, invariant, detail);
}

scratch_region::scratch_region(context& ctx, std::string_view tag) {
  const char* dir = std::getenv("FAULTLINE_RUN_DIR");
  if (dir != nullptr && *dir != '\0') {
    path_ = std::string(dir) + "/" + std::string(tag) + ".region";
  } else {
    // By hand: a /dev/shm name of this process and seed ("faultline" prefix: the harness's leak
    // check would name it if it were left behind).
    path_ = "/dev/shm/faultline-scenario-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(ctx.seed());
  }
  ::unlink(path_.c_str());
  track(path_);
}

scratch_region::~scratch_region() {
  ::unlink(path_.c_str());
  untrack(path_);
  for (const auto& p : extra_) {
    ::unlink(p.c_str());
    untrack(p);
  }
}

std::string scratch_region::sibling(std::string_view suffix) {
  std::string p = path_ + std::string(suffix);
  ::unlink(p.c_str());
  extra_.push_back(p);
  track(p);
  return p;
}

std::string merge_faults(const std::string& spec, std::string_view extra) {
  auto add = faults::parse(extra);
  auto base = faults::parse(spec);
  if (!add || !base) {
    std::fprintf(stderr, "faultline-scenarios: worker fault spec: %s\n",
                 (!add ? add.error() : base.error()).to_string().c_str());
    std::exit(2);
  }
  faults::spec out;
  for (auto& it : base->items) {
    const bool replaced =
        std::any_of(add->items.begin(), add->items.end(), [&](const faults::item& a) { return a.point == it.point; });
    if (!replaced) out.items.push_back(std::move(it));
  }
  for (auto& it : add->items) out.items.push_back(std::move(it));
  return faults::format(out);
}

pid_t worker_group::start(std::string_view name, const std::vector<std::string>& args, std::string_view extra_faults,
                          int* go_pipe) {
  std::string exe = "/proc/self/exe";
  std::string mode = "worker";
  std::string worker(name);
  std::vector<std::string> arg_storage(args);
  std::vector<char*> argv{exe.data(), mode.data(), worker.data()};
  for (auto& a : arg_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_storage{
      "FAULTLINE_SEED=" + std::to_string(ctx_.random().next()),
      "FAULTLINE_FAULTS=" + merge_faults(faults::current_spec(), extra_faults)};
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "FAULTLINE_SEED=", 15) != 0 && std::strncmp(*e, "FAULTLINE_FAULTS=", 17) != 0) {
      envp.push_back(*e);
    }
  }
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int fds[2] = {-1, -1};
  if (go_pipe != nullptr) {
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      kill_all();
      require(ctx_, false, "worker-started", std::strerror(errno));
    }
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (go_pipe != nullptr) {
    ::close(fds[0]);
    *go_pipe = fds[1];
  }
  if (rc != 0) {
    kill_all();
    require(ctx_, false, "worker-started", worker + ": posix_spawn: " + std::strerror(rc));
  }
  running_.push_back(pid);
  return pid;
}

int worker_group::wait(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int ws = 0;
    const pid_t r = ::waitpid(pid, &ws, WNOHANG);
    if (r == pid) {
      running_.erase(std::remove(running_.begin(), running_.end(), pid), running_.end());
      return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    sleep_ms(1);
  }
}

void worker_group::kill_all() noexcept {
  for (pid_t pid : running_) ::kill(pid, SIGKILL);
  for (pid_t pid : running_) {
    int ws = 0;
    while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
  }
  running_.clear();
}

}  // namespace faultline::scenarios::accounting_support
