// What containment.cc and run_cgroups.cc share, private to harness/run: the harness's lifeline
// and keeper program, how both start a child of their own (every signal blocked; a vfork-like
// child that only makes system calls), the table of watched runs, and the run cgroups (where
// cgroup v2 is, the pool of run cgroups, the watchdog told of each, cgroup+watchdog starts) that
// containment.cc lends to keepers. The design is containment.h's.
//
// Thread safety: as containment.h; the tables are guarded by keepers_mu, the pool and the
// watchdog by their own mutexes.
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "harness/run/containment.h"
#include "harness/run/process.h"

namespace faultline::harness::detail {

// --- containment.cc -------------------------------------------------------------------------------

/// The lifeline: the harness holds the write end for its whole life and never writes; every
/// keeper holds a read end. Both ends close-on-exec. Made once, never closed.
struct lifeline_pipe {
  int read_fd = -1;
  int write_fd = -1;
  core::status error;
};

/// The lifeline, made on the first call.
const lifeline_pipe& lifeline();

/// The keeper program to exec: FAULTLINE_KEEPER's path, else faultline-keeper beside the running
/// executable; empty where keepers are cloned instead (FAULTLINE_KEEPER=clone, or no such program).
const std::string& keeper_program();

/// A child started by clone_child or exec_keeper_program: its pid (-1 when it could not be
/// started, with the errno in `error`) and its pidfd.
struct cloned {
  pid_t pid = -1;
  int pidfd = -1;
  int error = 0;
};

/// Starts the keeper program the way posix_spawn starts a program (CLONE_VM | CLONE_VFORK: no
/// copy of the harness's page tables, which a fork-like clone of this multi-threaded process
/// costs, with its mmap lock held against every other thread), every signal blocked across it and
/// the child recorded as the harness's own. Execs `path` with `args` (argv[0] = path), an empty
/// environment and the descriptors `inherit`.
cloned exec_keeper_program(const std::string& path, std::vector<std::string> args, std::vector<int> inherit);

/// Kills (when still running) and reaps a child started with start_owned, and forgets it.
void kill_and_reap(pid_t pid, int pidfd);

/// argv[0] as posix_spawnp finds it: through the harness's PATH when it has no '/'.
core::result<std::string> resolve_program(const std::string& name);

/// What a contained start executes, made before the clone (its child may not allocate): the file
/// (resolve_program; made absolute from the harness's directory when the program starts in
/// another, spawn_options::cwd) and argv, envp as null-terminated arrays pointing into the
/// spawn_options, which must outlive it.
struct exec_image {
  std::string path;
  std::vector<char*> argv;
  std::vector<char*> envp;
};
/// Errors: resolve_program's.
core::result<exec_image> exec_image_of(const spawn_options& o);

/// Guards watched_runs (and containment.cc's table of keepers).
extern std::mutex keepers_mu;
/// program -> its run cgroup, for runs started by spawn_watched (run_cgroup_of).
extern std::unordered_map<pid_t, std::string> watched_runs;

inline void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

/// Every signal blocked in the calling thread while alive, so that a clone starts with all
/// blocked and no handler of the harness runs in it.
class signals_blocked {
 public:
  signals_blocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~signals_blocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  signals_blocked(const signals_blocked&) = delete;
  signals_blocked& operator=(const signals_blocked&) = delete;

 private:
  sigset_t old_;
};

/// Every signal back to its default action, by system calls only: for a child that shares the
/// harness's memory on a stack of its own until it execs (CLONE_VFORK). Not instrumented (a
/// sanitizer build's checks would write shadow memory for a stack that is freed once the child
/// has exec'd, and its runtime is not meant to run in such a child).
__attribute__((no_sanitize("address", "undefined"))) inline void default_signal_dispositions() {
  struct kernel_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    std::uint64_t mask;
  } dfl{};
  // Handlers reset at exec anyway; an ignored signal would stay ignored.
  for (int sig = 1; sig < 65; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, 8);
}

// --- run_cgroups.cc -------------------------------------------------------------------------------

/// Where this process's cgroup v2 is mounted ("" and why not when there is none we can use).
struct cgroup_home {
  std::string dir;
  std::string why;
};

/// Found on the first call, which also removes the empty cgroups that harnesses killed before
/// their exit left behind.
const cgroup_home& cgroups();

/// The watchdog: one faultline-keeper --watch per harness process (keeper.h), started on first
/// need, told of every run cgroup made and removed. If it cannot run, runs get keepers of their own.
struct watchdog_link {
  std::mutex mu;
  bool tried = false;
  pid_t pid = -1;
  int pidfd = -1;
  int socket = -1;
  std::uint32_t next_id = 0;
};

watchdog_link& watchdog_state();

/// Whether the watchdog runs, starting it on the first call. Under w.mu.
bool watchdog_up(watchdog_link& w);

/// A cgroup for a keeper_cgroup run, or none (dir empty): the run still has its keeper.
run_cgroup acquire_run_cgroup();

/// Once the run's keeper has exited: an empty cgroup goes back to the pool; one that still holds
/// a process is killed (cgroup.kill: nothing it forks meanwhile escapes) and removed once empty,
/// never lent again (keeper.cc's end_tree says why). One that does not empty (a process stuck in
/// the kernel) is tried again at exit, and by the next harness.
void release_run_cgroup(run_cgroup c);

/// Closes `c`, removes its directory (when empty) and has the watchdog forget it: never lent again.
void remove_run_cgroup(run_cgroup& c);

/// cgroup+watchdog: the program is the harness's own child, started the way posix_spawn starts
/// one but straight into a run cgroup that the watchdog kills if the harness dies — no process
/// beside it, as bare. unavailable when this cannot be done here (then the run gets a keeper).
core::result<child> spawn_watched(const spawn_options& o);

}  // namespace faultline::harness::detail
