#include "scenarios/accounting/processes.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "faults/engine.h"

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

worker_group::worker_group(context& ctx)
    : ctx_(ctx), launcher_({"/proc/self/exe", "worker"}, faults::current_spec(), ctx.random()) {}

pid_t worker_group::start(std::string_view name, const std::vector<std::string>& args, std::string_view extra_faults,
                          int* go_pipe) {
  auto pid = launcher_.start(name, args, extra_faults, go_pipe);
  if (!pid) {
    kill_all();
    require(ctx_, false, "worker-started", pid.error().to_string());
  }
  const faults::worker_record& w = launcher_.workers().back();
  char seed[32];
  std::snprintf(seed, sizeof seed, "%#llx", static_cast<unsigned long long>(w.seed));
  ctx_.note("worker " + w.name + " pid " + std::to_string(w.pid) + " seed " + seed);
  return *pid;
}

int worker_group::wait_unreaped(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    siginfo_t si{};
    const int rc = ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && si.si_pid == pid) {
      return si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;  // CLD_KILLED, CLD_DUMPED
    }
    if (rc != 0 && errno != EINTR) return -1;  // not our child, or reaped already
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    sleep_ms(1);
  }
}

}  // namespace faultline::scenarios::accounting_support
