#include "harness/run/process_tree.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <csignal>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/run/containment.h"
#include "harness/run/process.h"

namespace faultline::harness {
namespace {

// Run directories of the runs in flight: an orphan whose environment names none of them (it
// cleared its environment) can only be attributed when a single run is in flight.
std::mutex active_mu;
std::multiset<std::string> active_runs;

std::size_t active_run_count() {
  std::lock_guard lock(active_mu);
  return active_runs.size();
}

// The innermost pid of NSpid in /proc/PID/status when the process is in a nested PID namespace.
pid_t innermost_pid(pid_t pid) {
  auto text = detail::read_file("/proc/" + std::to_string(pid) + "/status", 8192);
  if (!text) return 0;
  auto at = text->find("\nNSpid:");
  if (at == std::string::npos) return 0;
  auto end = text->find('\n', at + 1);
  std::string line = text->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  std::vector<long> ids;
  for (const char* p = line.c_str(); *p;) {
    char* next = nullptr;
    long v = std::strtol(p, &next, 10);
    if (next == p) break;
    ids.push_back(v);
    p = next;
  }
  return ids.size() >= 2 ? static_cast<pid_t>(ids.back()) : 0;
}

}  // namespace

process_tree::process_tree(pid_t leader, std::string run_dir)
    : leader_(leader), keeper_(keeper_of(leader)), cgroup_(run_cgroup_of(leader)), run_dir_(std::move(run_dir)) {
  {
    std::lock_guard lock(active_mu);
    active_runs.insert(run_dir_);
  }
  if (auto s = detail::read_stat(leader_)) add(*s);
}

process_tree::~process_tree() {
  for (auto& [pid, m] : members_)
    if (m.pidfd >= 0) ::close(m.pidfd);
  std::lock_guard lock(active_mu);
  if (auto it = active_runs.find(run_dir_); it != active_runs.end()) active_runs.erase(it);
}

bool process_tree::add(const detail::proc_stat& p) {
  int fd = detail::pidfd_open(p.pid);
  if (fd < 0) return false;  // already reaped
  // Between the scan and pidfd_open the pid could have been reused: confirm it is the same
  // process (same start time) before trusting the pidfd.
  auto again = detail::read_stat(p.pid);
  if (!again || again->start_time != p.start_time) {
    ::close(fd);
    return false;
  }
  members_[p.pid] = member{p.start_time, fd, p.comm, false, keeper_ > 0 ? innermost_pid(p.pid) : 0};
  return true;
}

bool process_tree::exited(member& m) {
  if (!m.exited && m.pidfd >= 0) {
    pollfd p{m.pidfd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) m.exited = true;
  }
  return m.exited || m.pidfd < 0;
}

void process_tree::refresh() {
  // With the harness a subreaper, every process of the run is one of its descendants; a watched
  // run's processes are also in its cgroup, wherever they were reparented.
  auto procs = detail::descendants(::getpid());
  for (pid_t pid : cgroup_members()) {
    if (std::none_of(procs.begin(), procs.end(), [&](const detail::proc_stat& p) { return p.pid == pid; }))
      if (auto st = detail::read_stat(pid)) procs.push_back(*st);
  }
  refresh(procs);
}

std::unordered_set<pid_t> process_tree::cgroup_members() const {
  std::unordered_set<pid_t> out;
  if (cgroup_.empty()) return out;
  if (auto text = detail::read_file(cgroup_ + "/cgroup.procs", 1 << 20)) {
    std::istringstream in(*text);
    for (pid_t pid; in >> pid;) out.insert(pid);
  }
  return out;
}

void process_tree::refresh(const std::vector<detail::proc_stat>& procs) {
  const pid_t self = ::getpid();
  std::unordered_map<pid_t, std::uint64_t> live;  // members still running, for parent links
  if (keeper_ > 0) live[keeper_] = 0;              // the keeper adopts the run's orphans
  for (const auto& p : procs) {
    auto it = members_.find(p.pid);
    if (it == members_.end()) continue;
    if (it->second.start_time == p.start_time) {
      if (p.state != 'Z') live[p.pid] = p.start_time;
    } else if (exited(it->second)) {
      ::close(it->second.pidfd);  // the member is gone and its pid reused: forget it
      members_.erase(it);
    }
  }
  const std::unordered_set<pid_t> in_cgroup = cgroup_members();
  std::unordered_map<pid_t, std::string> env_dir;  // orphans' FAULTLINE_RUN_DIR, read once
  std::unordered_set<pid_t> gone;                   // vanished since the scan: not retried
  bool grew = true;
  while (grew) {
    grew = false;
    for (const auto& p : procs) {
      if (p.pid == self || p.pid == keeper_ || members_.count(p.pid) || gone.count(p.pid)) continue;
      bool mine = live.count(p.ppid) || p.pgrp == leader_ || in_cgroup.count(p.pid);
      if (!mine && p.ppid == self && !is_owned(p.pid)) {
        auto it = env_dir.find(p.pid);
        if (it == env_dir.end())
          it = env_dir.emplace(p.pid, detail::read_environ_var(p.pid, agent::run_dir_env).value_or("")).first;
        // An orphan that names this run is ours; one that cleared its environment can only be
        // ours when no other run is in flight (else it is left to the campaign's final sweep).
        const std::string& dir = it->second;
        mine = dir == run_dir_ || (dir.empty() && p.state != 'Z' && active_run_count() == 1);
      }
      if (!mine) continue;
      if (!add(p)) {
        gone.insert(p.pid);
        continue;
      }
      if (p.state != 'Z') live[p.pid] = p.start_time;
      grew = true;
    }
  }
}

std::vector<detail::proc_stat> process_tree::alive() {
  std::vector<detail::proc_stat> out;
  for (auto& [pid, m] : members_) {
    if (exited(m)) continue;
    auto s = detail::read_stat(pid);
    if (!s || s->start_time != m.start_time || s->state == 'Z' || s->state == 'X') continue;
    out.push_back(*s);
  }
  return out;
}

std::vector<pid_t> process_tree::pids() const {
  // The leader even when it was never seen: a program that crashes at once may be gone (reaped by
  // its keeper) before the tree first reads /proc, and its core must still be found by its pid.
  std::vector<pid_t> out;
  if (!members_.count(leader_)) out.push_back(leader_);
  for (const auto& [pid, m] : members_) out.push_back(pid);
  return out;
}

std::map<pid_t, pid_t> process_tree::namespace_pids() const {
  std::map<pid_t, pid_t> out;
  for (const auto& [pid, m] : members_)
    if (m.namespace_pid > 0) out[pid] = m.namespace_pid;
  return out;
}

void process_tree::signal_all(int sig) {
  for (auto& [pid, m] : members_)
    if (!exited(m)) detail::pidfd_send_signal(m.pidfd, sig);
}

bool process_tree::wait_all_exited(std::chrono::milliseconds d) {
  auto deadline = std::chrono::steady_clock::now() + d;
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& [pid, m] : members_)
      if (!exited(m)) fds.push_back({m.pidfd, POLLIN, 0});
    if (fds.empty()) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
  }
}

std::vector<pid_t> process_tree::terminate(std::chrono::milliseconds grace, std::chrono::milliseconds kill_budget) {
  using clock = std::chrono::steady_clock;
  refresh();
  signal_all(SIGTERM);
  signal_all(SIGCONT);
  // During the grace period, rescan now and then: a member may fork while it shuts down.
  auto grace_end = clock::now() + grace;
  while (clock::now() < grace_end) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(grace_end - clock::now());
    if (wait_all_exited(std::min(left, std::chrono::milliseconds(50)))) {
      std::size_t before = members_.size();
      refresh();
      if (members_.size() == before) break;
    } else {
      std::size_t before = members_.size();
      refresh();
      if (members_.size() != before) {
        signal_all(SIGTERM);
        signal_all(SIGCONT);
      }
    }
  }
  // SIGKILL until a fresh scan finds nobody: a killed process cannot fork again, so this ends.
  auto kill_end = clock::now() + kill_budget;
  for (;;) {
    refresh();
    if (alive().empty()) return {};
    signal_all(SIGKILL);
    wait_all_exited(std::chrono::milliseconds(200));
    if (clock::now() >= kill_end) break;
  }
  std::vector<pid_t> stuck;
  for (const auto& p : alive()) stuck.push_back(p.pid);
  return stuck;
}

void process_tree::reap() {
  const pid_t self = ::getpid();
  for (auto& [pid, m] : members_) {
    if (pid == leader_ || !exited(m)) continue;
    auto s = detail::read_stat(pid);
    if (!s || s->start_time != m.start_time || s->ppid != self) continue;
    int status;
    ::waitpid(pid, &status, WNOHANG);
  }
}

}  // namespace faultline::harness
