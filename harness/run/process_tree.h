// The set of processes that belong to one run, found and ended as a whole.
//
// A run's processes are its leader (the process the harness spawned, leading its own process
// group), every process in that group, every descendant by parent chain, and every orphan that
// was reparented to the harness (a subreaper) and carries the run's FAULTLINE_RUN_DIR in its
// environment — so children that setsid() into another session or double-fork away are still
// found, even after the process between them and the leader has exited. Each member is held
// by a pidfd once seen, so it is waited for and signalled without ever hitting a reused pid.
// A contained leader (containment.h) has a keeper between it and the harness: orphans of the
// run are reparented to the keeper, so its children are members too (the keeper itself is not).
//
//   harness::process_tree tree(leader.pid(), run_dir);
//   tree.refresh();                                   // call now and then while the run lives
//   auto left = tree.terminate(std::chrono::seconds(1));  // TERM, grace, KILL until none left
//   tree.reap();
//
// Thread safety: one tree is used by one thread; trees of concurrent runs are independent.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <unordered_set>
#include <string>
#include <vector>

#include "harness/detail/proc.h"

namespace faultline::harness {

/// One run's process tree.
class process_tree {
 public:
  /// `leader` is the run's process (a child of the harness, leading its own group); `run_dir`
  /// is the FAULTLINE_RUN_DIR its processes inherit. Registers the run as active.
  process_tree(pid_t leader, std::string run_dir);
  ~process_tree();
  process_tree(const process_tree&) = delete;
  process_tree& operator=(const process_tree&) = delete;

  /// Rescans /proc and adds processes that belong to the run.
  void refresh();
  /// Adds the processes of `scan` (descendants of the harness) that belong to the run. A process
  /// that vanished since the scan is skipped. refresh() is this over a fresh scan.
  void refresh(const std::vector<detail::proc_stat>& scan);
  /// Members that have not exited (zombies excluded), leader included, in pid order.
  [[nodiscard]] std::vector<detail::proc_stat> alive();
  /// Every pid ever seen as a member, and the leader's in any case.
  [[nodiscard]] std::vector<pid_t> pids() const;
  /// For a run in its own PID namespace: each member seen so far, by its pid as the harness sees
  /// it, mapped to its pid inside the namespace (what the process's getpid(), a core file and
  /// core_pattern's %p say). Empty for a run without a namespace.
  [[nodiscard]] std::map<pid_t, pid_t> namespace_pids() const;
  /// The leader's keeper (containment.h), or -1 when it has none.
  [[nodiscard]] pid_t keeper() const noexcept { return keeper_; }
  /// Sends `sig` to every live member (through pidfds).
  void signal_all(int sig);
  /// Waits until every member seen so far has exited or `d` passes; true when none is alive.
  bool wait_all_exited(std::chrono::milliseconds d);
  /// Ends the run's processes: SIGTERM (and SIGCONT, for stopped ones), up to `grace` for them
  /// to exit (members forked meanwhile are found and signalled too), then SIGKILL until a scan
  /// finds none alive. Returns the pids still alive after `kill_budget` (stuck in the kernel).
  std::vector<pid_t> terminate(std::chrono::milliseconds grace,
                               std::chrono::milliseconds kill_budget = std::chrono::seconds(10));
  /// Collects every exited member that is a child of the harness, except the leader (whose
  /// status belongs to its owner).
  void reap();

 private:
  struct member {
    std::uint64_t start_time = 0;
    int pidfd = -1;
    std::string comm;
    bool exited = false;
    pid_t namespace_pid = 0;  ///< its pid inside the run's PID namespace (0: none, or not read)
  };
  bool exited(member& m);
  bool add(const detail::proc_stat& p);
  std::unordered_set<pid_t> cgroup_members() const;

  pid_t leader_;
  pid_t keeper_ = -1;
  std::string cgroup_;  // a watched run's cgroup (containment.h: run_cgroup_of), or ""
  std::string run_dir_;
  std::map<pid_t, member> members_;
};

}  // namespace faultline::harness
