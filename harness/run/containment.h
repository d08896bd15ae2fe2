// Containment: every process of a run ends when the harness ends, however it ends — SIGKILL of
// the harness included (what a CI job timeout does), when nothing of the harness runs any more.
//
// A *keeper* (keeper.h) is a small process that holds the read end of the harness's *lifeline*,
// a pipe whose write end only the harness holds (close-on-exec, and closed by every keeper at
// start): when the harness dies, by any means, the pipe reports EOF to every keeper at once, and
// each ends what it guards. The harness execs keepers from faultline-keeper beside its own
// binary, the way posix_spawn starts a program (FAULTLINE_KEEPER names another path, or "clone":
// a clone3 copy of the harness that runs only system calls — also the fallback where the program
// is missing, and how pid-namespace keepers start). How a run's tree ends, strongest first:
//
//   pid namespace   a keeper per run is pid 1 of a new PID namespace (CLONE_NEWPID; with
//                   CLONE_NEWUSER and an identity uid/gid map when the harness is not root). When
//                   it exits the kernel kills every process in the namespace; nothing can escape
//                   by setsid(), double fork or a cleared environment. The keeper stays in the
//                   harness's process group, so a kill of that group takes the runs too.
//   cgroup+watchdog   the default where cgroup v2 and clone3(CLONE_INTO_CGROUP) are there (x86-64,
//                   Linux >= 5.7) and faultline-keeper is found. No process stands between the
//                   harness and the program: the harness starts it as posix_spawn would, but
//                   straight into a cgroup v2 of its own, and one keeper for the whole harness —
//                   the *watchdog* — is told of every run cgroup. On EOF the watchdog writes each
//                   one's cgroup.kill (no fork can outrun it) and removes them. The harness is a
//                   subreaper, and the run's cgroup names every process of the run wherever it
//                   was reparented (process_tree reads it). A run that leaves processes behind
//                   has its cgroup killed when its child is destroyed. A run costs what a bare
//                   start costs: a keeper per run is a second process created, exec'd and
//                   scheduled beside every program (measured on a 2-core VM: 3.2-4.1 ms per
//                   no-op run with one, 2.1-2.5 ms without; 2.0-2.1 ms uncontained).
//   cgroup+keeper+pdeathsig   a keeper per run, a child subreaper in its own process group (a kill
//                   of the harness's group leaves it to clean up), so every orphan of the run is
//                   reparented to it; the program is in a cgroup v2 of its own and has
//                   PR_SET_PDEATHSIG(SIGKILL) against the keeper (a single-threaded parent, so the
//                   signal means exactly "the keeper died"). On EOF the keeper writes
//                   cgroup.kill, SIGKILLs its children until none is left, reaps them and removes
//                   the cgroup. Where the watchdog cannot be used.
//   keeper+pdeathsig   the same without a cgroup (none is writable).
//   process group only  no keeper (FAULTLINE_CONTAINMENT=none): the run is a direct child of
//                   the harness in its own process group; it survives a SIGKILL of the harness.
//
// Run cgroups are lent from a pool: a cgroup that a run left empty serves the next run (creating
// one per run serialises runs on the kernel's cgroup lock). A populated one is killed and never
// lent again: on Linux 6.18 a process cloned into a cgroup whose cgroup.kill was ever written is
// killed at birth. The pool is removed at exit, by the watchdog when the harness is killed, and
// by the next harness when neither could.
//
// The program itself runs as it would bare: exec'd from a fresh process with default signal
// dispositions, an empty signal mask, the harness's inheritable descriptors and `keep_fds`, its
// own process group; its parent is the harness (cgroup+watchdog) or its keeper (in a namespace,
// getpid() is 2 and getppid() is 1 — pids inside differ from the harness's view, see below). Its
// exit status reaches the harness exactly: a keeper reaps it and passes the wait status on.
//
// Which one is used is chosen once per process, on first use, as the strongest the kernel
// allows up to a cap, FAULTLINE_CONTAINMENT: "auto" (default: cgroup+watchdog, else
// cgroup+keeper+pdeathsig, else keeper+pdeathsig), "pidns" (opt-in: the program then sees namespace pids, see below),
// "cgroup", "keeper", "none".
//
//   harness::spawn_options o;
//   o.argv = {"./prog"};
//   o.envp = harness::current_environment();
//   o.contain = true;                               // spawn() starts it under containment()
//   auto c = harness::spawn(o);                     // c->pid(): the program, as the harness sees it
//   std::cout << harness::containment_summary();    // "pid namespace"
//
// PIDs in a namespace: the harness, /proc (not remounted) and the process tree use host pids;
// the program's own getpid(), a core file's pid and core_pattern's %p use the namespace's
// (process_tree::namespace_pids maps them). readlink("/proc/self") gives the host pid.
//
// Thread safety: everything here may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "harness/run/process.h"

namespace faultline::harness {

/// How a run's processes are tied to the harness's life (strongest last).
enum class containment_kind {
  none,           ///< own process group under the subreaper; survives a SIGKILL of the harness
  keeper,         ///< keeper (subreaper) + PR_SET_PDEATHSIG on the program
  keeper_cgroup,  ///< a cgroup v2 per run, killed with cgroup.kill by the watchdog (or a keeper per run)
  pid_namespace,  ///< keeper as pid 1 of a PID namespace per run: the kernel kills the rest
};

/// What this process uses.
struct containment_info {
  containment_kind kind = containment_kind::none;
  bool user_namespace = false;  ///< pid_namespace needed CLONE_NEWUSER (the harness is not root)
  std::string summary;          ///< "pid namespace", "cgroup+watchdog", "cgroup+keeper+pdeathsig", ...
  std::string why;              ///< why nothing stronger is used ("" when nothing is stronger)
};

/// The environment variable that caps the containment: auto, pidns, cgroup, keeper, none.
inline constexpr const char* containment_env = "FAULTLINE_CONTAINMENT";

/// The keeper program (keeper.h): its path, or "clone" for keepers cloned from the harness.
/// Default: faultline-keeper beside the running executable, else cloned.
inline constexpr const char* keeper_env = "FAULTLINE_KEEPER";

/// The containment spawn() uses for spawn_options::contain. Chosen on the first call (probing
/// the kernel with a short-lived child), then fixed for the life of the process.
const containment_info& containment();

/// containment().summary, and why nothing stronger is used when that is so:
/// "keeper+pdeathsig (pid namespace: clone3(CLONE_NEWPID): Operation not permitted; cgroup: ...)".
std::string containment_summary();

/// Whether `kind` can be used here: ok, or errc::unavailable saying why not. Probes once per kind.
core::status containment_available(containment_kind kind);

/// Whether runs under `kind` borrow pooled keepers (pid_namespace where the harness may setns:
/// the program is then the harness's own child) rather than one keeper per run that starts it.
bool keepers_pooled(containment_kind kind);

/// Creates idle keepers for `runs_at_once` runs now, so that none is created just before a run
/// (a process created beside a program shifts where the scheduler puts the program's threads),
/// or, for cgroup+watchdog, the watchdog. Call at the start of a campaign. Errors: the first
/// keeper that could not be created.
core::status prepare_containment(unsigned runs_at_once);

/// "none", "keeper", "keeper_cgroup", "pid_namespace".
const char* to_string(containment_kind kind) noexcept;

/// Starts `o` under containment `kind` (spawn() with o.contain uses containment().kind; tests
/// force one). The child's pid and pidfd are the program's; reap() returns the program's exact
/// wait status; destroying the child ends whatever is left of its tree and the keeper. Errors:
/// as spawn() (not_found for a missing program, ...); unavailable when `kind` cannot be used here.
core::result<child> spawn_contained(const spawn_options& o, containment_kind kind);

/// Whether a run of `kind` has a keeper process of its own (cgroup+watchdog runs have none: the
/// program is the harness's own child, in a cgroup the watchdog kills if the harness dies).
bool keeper_per_run(containment_kind kind);

/// The cgroup directory of a watched run (by its program's pid, while the child lives), or "".
/// Every process of the run is in it, wherever it was reparented.
std::string run_cgroup_of(pid_t program);

/// The keeper of a contained child's program (by the program's pid), or -1. A process of the
/// run whose parent died is reparented to the keeper, not to the harness: process_tree follows.
pid_t keeper_of(pid_t program);

namespace detail {

/// A run's cgroup v2 (keeper_cgroup containment): its directory, and its cgroup.procs and
/// cgroup.kill held open. Lent from a pool: a cgroup that a run left empty serves the next run.
struct run_cgroup {
  std::string dir;
  int procs_fd = -1;
  int kill_fd = -1;
  std::uint32_t watch_id = 0;  ///< the watchdog's number for it (0: not watched)
};

/// The harness's end of a keeper, owned by a child. Two kinds:
///  - relaying: the keeper started the program (its parent) and reports its wait status on
///    `socket`; destroying the handle ends the keeper and what is left of the run;
///  - pooled: an idle keeper lent for one run, the program being the harness's own child in the
///    keeper's namespace; destroying the handle returns the keeper to the pool when its
///    namespace is empty, else kills it (and with it everything left in the namespace).
class keeper_handle {
 public:
  /// Relaying.
  keeper_handle(pid_t keeper, int keeper_pidfd, int socket, pid_t program, run_cgroup cgroup);
  /// Watched: no keeper; the program is the harness's own child in `cgroup`, which the watchdog
  /// kills if the harness dies. Destroying the handle kills what is left in the cgroup.
  explicit keeper_handle(run_cgroup cgroup);
  /// Watched: the program's pid, once it is known.
  void set_program(pid_t program) noexcept { program_ = program; }
  /// Pooled (takes the keeper's pidfd and namespace descriptor; duplicates `program_pidfd`).
  keeper_handle(pid_t keeper, int keeper_pidfd, int ns_fd, pid_t program, int program_pidfd);
  ~keeper_handle();
  keeper_handle(const keeper_handle&) = delete;
  keeper_handle& operator=(const keeper_handle&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return keeper_; }
  /// Whether the keeper started the program and relays its status (else the harness reaps it).
  [[nodiscard]] bool relays() const noexcept { return socket_ >= 0; }
  /// Relaying only: blocks until the keeper reports the program's wait status. A keeper that
  /// died first took the program with it: that reads as killed by SIGKILL.
  int wait_status();

 private:
  void end_relaying_keeper();
  pid_t keeper_;
  int keeper_pidfd_;
  int socket_ = -1;
  int ns_fd_ = -1;
  pid_t program_;
  int program_pidfd_ = -1;
  run_cgroup cgroup_;
};

}  // namespace detail
}  // namespace faultline::harness
