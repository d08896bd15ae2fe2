// Starting and reaping the harness's own children.
//
// The harness is a child subreaper (PR_SET_CHILD_SUBREAPER): anything a run double-forks or
// setsid()s away is reparented to it instead of to init, so it can be found and killed. That
// makes the harness the parent of processes it never started, so reaping follows one rule: a
// child the harness spawned itself is *owned* and only its owner waits for it (by pid, never
// waitpid(-1), which would steal another run's exit status); every other zombie child is a
// stray that `reap_strays` collects. Children are started with posix_spawn (the harness has
// threads, so no code runs between fork and exec), in their own process group, with default
// signal dispositions and an empty signal mask, and with a pidfd so that waiting and signalling
// never hit a reused pid. A run's program is started *contained* (spawn_options::contain,
// containment.h): behind a keeper process that ends the run's tree when the harness dies.
//
//   harness::spawn_options o;
//   o.argv = {"/bin/true"};
//   o.envp = harness::current_environment();
//   auto c = harness::spawn(o);
//   if (!c) return c.error();
//   c->wait_exit_for(std::chrono::seconds(10));   // true once it exited
//   int status = c->reap();                        // waitpid status
//
// Thread safety: spawn, reap_strays and kill_strays may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace faultline::harness {

/// Makes the calling process a child subreaper and restores SIGCHLD's default disposition
/// (an ignored SIGCHLD would auto-reap and lose exit statuses). Idempotent; process-wide.
core::status become_subreaper();

/// What to start and how.
struct spawn_options {
  std::vector<std::string> argv;  ///< argv[0] is searched in PATH when it has no '/'
  std::vector<std::string> envp;  ///< the complete environment, "K=V" each
  int stdout_fd = -1;             ///< stdout goes here (-1: /dev/null)
  int stderr_fd = -1;             ///< stderr goes here (-1: wherever stdout goes)
  bool new_process_group = true;  ///< the child leads a new process group (pgid = its pid)
  std::vector<int> keep_fds;      ///< descriptors the child inherits at the same number (the
                                  ///< harness's own are close-on-exec; these are made inheritable)
  std::string cwd;                ///< its working directory ("": the harness's)
  bool contain = false;           ///< start it under containment() (containment.h): its whole
                                  ///< tree ends when the harness dies, even by SIGKILL
};

namespace detail {
class keeper_handle;
}
enum class containment_kind;

/// An owned child process: its pid and a pidfd. Move-only. Destroying a child that was not
/// reaped leaves the process running and its zombie to reap_strays (never kills it) — except a
/// contained one: destroying it ends its keeper, which ends whatever is left of its tree.
class child {
 public:
  child() noexcept;
  child(pid_t pid, int pidfd) noexcept;
  /// A contained program (containment.h): not the harness's own child; `keeper` is.
  child(pid_t pid, int pidfd, std::unique_ptr<detail::keeper_handle> keeper);
  child(child&& o) noexcept;
  child& operator=(child&& o) noexcept;
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] int pidfd() const noexcept { return pidfd_; }
  /// The keeper between the harness and this process when it is contained, else -1.
  [[nodiscard]] pid_t keeper() const noexcept;
  /// Waits up to `d` for the process to exit (it stays a zombie until reap()). True once exited.
  bool wait_exit_for(std::chrono::milliseconds d) const;
  /// Sends `sig` through the pidfd (never to a reused pid). False when the process is gone.
  bool signal(int sig) const;
  /// Blocks until the process exits and collects it; returns the waitpid status (for a
  /// contained process, the one its keeper collected). Call once.
  int reap();

 private:
  void release() noexcept;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool reaped_ = false;
  std::unique_ptr<detail::keeper_handle> keeper_;
  // Lends a pooled keeper to a child it started itself (containment.h).
  friend core::result<child> spawn_contained(const spawn_options& o, containment_kind kind);
};

/// Waits up to `d` for the process behind `pidfd` to exit (poll for POLLIN, retried on EINTR
/// with what is left of `d`). True once it exited, or when the pidfd cannot be polled (taken as
/// gone); false when `d` passed first. The process stays a zombie until someone waits for it.
bool wait_pidfd_exit(int pidfd, std::chrono::milliseconds d);

/// Starts a process. Errors: the posix_spawn error (ENOENT for a missing program, EACCES, ...)
/// as errc::not_found / io_error naming the program.
core::result<child> spawn(const spawn_options& o);

/// The file a run of `name` would execute, found as execvp finds it: `name` itself when it holds
/// a '/', else the first regular, executable file of that name in the harness's PATH (unset:
/// /bin:/usr/bin; an empty entry is the working directory). Errors, naming `name`: not_found when
/// there is no such file (or no such file in PATH, whose directories the message lists);
/// refused when it is there but is a directory or not executable by the harness.
core::result<std::string> find_program(const std::string& name);

/// The harness's own environment as "K=V" strings.
std::vector<std::string> current_environment();

/// Sets (replacing) or, with value nullopt, removes K in an environment vector.
void set_env(std::vector<std::string>& env, const std::string& key, const std::optional<std::string>& value);
/// The value of K in an environment vector.
std::optional<std::string> get_env(const std::vector<std::string>& env, const std::string& key);

/// The result of a short-lived helper (gdb, addr2line, the scenario binary's `list`).
struct tool_output {
  int status = 0;        ///< waitpid status
  bool timed_out = false;
  std::string output;    ///< stdout (and stderr, unless separated)
  std::string errors;    ///< stderr when separated
};

/// Runs a helper to completion with its output captured, killing its process group when it
/// runs past `timeout`. With `separate_stderr`, stderr is captured apart in `errors`.
/// Errors: spawn failures.
core::result<tool_output> run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                   const std::vector<std::string>& envp = current_environment(),
                                   bool separate_stderr = false);

/// Reaps every zombie child of the harness that no one owns (orphans reparented to it).
void reap_strays();

/// reap_strays, unless some thread did within `period`: what the end of each run calls. A stray
/// is a zombie, which holds only its pid; listing the harness's children and reading each one's
/// stat at the end of every run cost 333 us a run at --jobs 16 on an H200 (10 us at --jobs 1:
/// records/overhead/README.md), as every run in flight lists every other's leader.
void reap_strays_at_most_every(std::chrono::milliseconds period);

/// Live children of the harness that no one owns (orphans no run has claimed).
std::vector<pid_t> stray_children();

/// True when `pid` is a child the harness spawned and has not reaped yet.
bool is_owned(pid_t pid);

/// For children started by other means than spawn() (containment.cc's clone3): runs `start`,
/// which creates a child and returns its pid (or -1), under the lock that stray reaping takes,
/// and registers the pid as owned — so a child that exits at once is never reaped as a stray.
pid_t start_owned(const std::function<pid_t()>& start);
/// Forgets an owned child that its owner reaped by other means than child::reap().
void disown(pid_t pid);

}  // namespace faultline::harness
