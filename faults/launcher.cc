#include "faults/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "faults/spec.h"

extern char** environ;

namespace faultline::faults {

using core::errc;
using core::status;

core::result<std::string> merge_specs(std::string_view base, std::string_view extra) {
  auto add = parse(extra);
  if (!add) return status(errc::invalid_argument, "worker fault spec '" + std::string(extra) + "': " + add.error().message());
  auto from = parse(base);
  if (!from) return status(errc::invalid_argument, "base fault spec '" + std::string(base) + "': " + from.error().message());
  spec out;
  for (auto& it : from->items) {
    const bool replaced =
        std::any_of(add->items.begin(), add->items.end(), [&](const item& a) { return a.point == it.point; });
    if (!replaced) out.items.push_back(std::move(it));
  }
  for (auto& it : add->items) out.items.push_back(std::move(it));
  return format(out);
}

std::string describe(const worker_record& w) {
  char seed[32];
  std::snprintf(seed, sizeof seed, "%#llx", static_cast<unsigned long long>(w.seed));
  std::string out = w.name + " pid " + std::to_string(w.pid) + " seed " + seed;
  if (!w.faults.empty()) out += " faults '" + w.faults + "'";
  if (w.killed) return out + ": still running at the deadline (killed)";
  if (w.signal != 0) {
    const char* abbrev = sigabbrev_np(w.signal);
    return out + ": killed by " + (abbrev != nullptr ? "SIG" + std::string(abbrev) : "signal " + std::to_string(w.signal));
  }
  return out + ": exited " + std::to_string(w.exit_code);
}

launcher::launcher(std::vector<std::string> command, std::string base_faults, generator& seeds)
    : command_(std::move(command)), base_faults_(std::move(base_faults)), seeds_(seeds) {}

core::result<pid_t> launcher::start(std::string_view name, const std::vector<std::string>& args,
                                    std::string_view extra_faults, int* go_pipe) {
  if (command_.empty()) return status(errc::invalid_argument, "launcher: no command to start workers with");
  auto faults = merge_specs(base_faults_, extra_faults);
  if (!faults) return faults.error();
  worker_record rec;
  rec.name = std::string(name);
  rec.seed = seeds_.next();
  rec.faults = *faults;

  std::vector<std::string> argv_storage(command_);
  argv_storage.push_back(rec.name);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_storage{"FAULTLINE_SEED=" + std::to_string(rec.seed), "FAULTLINE_FAULTS=" + rec.faults};
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "FAULTLINE_SEED=", 15) != 0 && std::strncmp(*e, "FAULTLINE_FAULTS=", 17) != 0) {
      envp.push_back(*e);
    }
  }
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  int fds[2] = {-1, -1};
  if (go_pipe != nullptr && ::pipe2(fds, O_CLOEXEC) != 0) {
    return status::from_errno(errno, "launcher: " + rec.name + ": pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (go_pipe != nullptr) posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv_storage[0].c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (go_pipe != nullptr) {
    ::close(fds[0]);
    if (rc == 0) {
      *go_pipe = fds[1];
    } else {
      ::close(fds[1]);
    }
  }
  if (rc != 0) return status::from_errno(rc, "launcher: " + rec.name + ": posix_spawn " + argv_storage[0]);
  rec.pid = pid;
  workers_.push_back(std::move(rec));
  return pid;
}

// The newest worker with `pid`: a pid can come back (pid reuse is what accounting/pid-reuse forces),
// and an older worker with it has ended.
worker_record* launcher::find(pid_t pid) noexcept {
  for (auto it = workers_.rbegin(); it != workers_.rend(); ++it) {
    if (it->pid == pid) return &*it;
  }
  return nullptr;
}

bool launcher::reap(worker_record& w, bool block) noexcept {
  if (w.finished || w.killed) return true;
  int ws = 0;
  pid_t r;
  do {
    r = ::waitpid(w.pid, &ws, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != w.pid) return false;
  w.finished = true;
  if (WIFSIGNALED(ws)) {
    w.signal = WTERMSIG(ws);
  } else {
    w.exit_code = WEXITSTATUS(ws);
  }
  return true;
}

int launcher::wait(pid_t pid, std::chrono::milliseconds timeout) {
  worker_record* w = find(pid);
  if (w == nullptr) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reap(*w, /*block=*/false)) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return w->status();
}

std::vector<worker_record> launcher::collect(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (auto& w : workers_) all = reap(w, /*block=*/false) && all;
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill_all();
  return workers_;
}

void launcher::kill_all() noexcept {
  for (auto& w : workers_) {
    if (!w.finished && !w.killed) ::kill(w.pid, SIGKILL);
  }
  for (auto& w : workers_) {
    if (w.finished || w.killed) continue;
    // One that ended on its own just before the kill keeps its own status.
    (void)reap(w, /*block=*/true);
    if (w.finished && w.signal == SIGKILL) w.killed = true;
  }
}

}  // namespace faultline::faults
