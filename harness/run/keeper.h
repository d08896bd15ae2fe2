// The keeper: the one process between the harness and a contained run's program (containment.h
// says what it guarantees). This is the keeper's own side — what runs in it, and the protocol on
// its socket — shared by the two ways a keeper starts:
//
//   exec'd    the harness starts BUILD/bin/faultline-keeper (keeper_exe.cc, a static program)
//             the way posix_spawn starts a program: clone(CLONE_VM|CLONE_VFORK) and execve, with
//             the plan in its arguments (keeper_arguments / parse_keeper_arguments). The harness
//             copies none of its page tables for it. The default.
//   cloned    a clone3 child of the harness that never execs (needed for CLONE_NEWPID keepers,
//             and the fallback where faultline-keeper is missing): another thread of the harness
//             may have held any lock (malloc's, stdio's, a sanitizer's) at the moment of the clone,
//             so from there on only system calls run, through syscall(2) directly, on memory
//             prepared before the clone (the keeper_plan).
//
// Either way keeper_main runs the same code: it starts the program with vfork and execve, reports
// "started" (with the program's pidfd), then sleeps in ppoll until the program exits ("exited",
// with its wait status), the harness closes the socket (the run is over) or the lifeline reports
// EOF (the harness died); then it ends what is left of the run's tree and exits.
//
// May call: the kernel (system calls) only. Called by: containment.cc and keeper_exe.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace faultline::harness::keeper {

/// What a keeper reports on its socket (SOCK_SEQPACKET: one record per message).
struct message {
  std::int32_t kind;
  std::int32_t value;  ///< errno for exec_failed, the wait status for exited
  std::int32_t pid;    ///< the program's pid as the harness sees it (started)
};
inline constexpr std::int32_t msg_started = 1;      ///< the program exec'd; its pidfd rides along
inline constexpr std::int32_t msg_exec_failed = 2;  ///< it could not: errno in value
inline constexpr std::int32_t msg_exited = 3;       ///< the program's wait status in value

/// Everything a keeper and its program need, prepared by the harness before the keeper starts.
struct plan {
  bool pid_namespace = false;
  int socket_fd = -1;        ///< the keeper's end of the report socket
  int lifeline_fd = -1;      ///< read end of the lifeline
  int sync_fd = -1;          ///< user namespace: one byte arrives once the id maps are written
  int null_fd = -1;          ///< /dev/null, read-write
  int stdout_fd = -1;
  int stderr_fd = -1;
  int cgroup_procs_fd = -1;  ///< the run's cgroup.procs (the program writes itself into it)
  int cgroup_kill_fd = -1;   ///< the run's cgroup.kill
  const char* cgroup_dir = nullptr;
  const int* keep_fds = nullptr;
  std::size_t keep_count = 0;
  bool new_process_group = true;
  const char* path = nullptr;
  const char* cwd = nullptr;  ///< chdir here before exec (nullptr: stay)
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

/// Sends one record (SOCK_SEQPACKET) with `pass_fd` riding along (SCM_RIGHTS) when it is not -1.
/// System calls only, so that a keeper may call it anywhere. False when it was not sent whole.
bool send_record(int sock, const void* data, std::size_t size, int pass_fd) noexcept;

/// Runs a keeper for `p` in the calling (single-threaded) process; never returns.
[[noreturn]] void keeper_main(const plan& p);

/// A pooled keeper: pid 1 of its own PID namespace, lent to one run after another; the harness
/// spawns each program into the namespace itself. Never returns.
[[noreturn]] void pooled_keeper_main(const plan& p);

/// A child that only exits, after one byte on sync_fd when there is one (probes what clone3 allows).
[[noreturn]] void probe_main(int sync_fd);

/// The watchdog: one keeper for all the runs of a harness whose programs it does not start
/// (containment.h, "cgroup+watchdog"). The harness tells it of every run cgroup it makes (watch,
/// with the cgroup's cgroup.kill riding along) and of every one it removes (forget). When the
/// lifeline or the socket reports EOF (the harness is gone), it writes cgroup.kill of every
/// cgroup it watches, waits (bounded) for them to empty, removes them and exits.
struct watch_message {
  std::uint32_t kind;  ///< watch_add or watch_forget
  std::uint32_t id;    ///< the harness's number for the cgroup
  char dir[4096];      ///< watch_add: the cgroup's directory, NUL-terminated
};
inline constexpr std::uint32_t watch_add = 1;
inline constexpr std::uint32_t watch_forget = 2;

/// Runs the watchdog on `socket_fd` and `lifeline_fd`; never returns.
[[noreturn]] void watchdog_main(int socket_fd, int lifeline_fd);

/// The arguments of faultline-keeper for `p` (not a pid-namespace plan), argv[0] excluded: the
/// plan's descriptors, flags and paths, then "--" and the program's argv. The program's
/// environment goes separately, on a descriptor (`env_fd`, from environment_block's text; -1 for
/// the keeper's own environment): the keeper's /proc/PID/environ must not make it look like one
/// of the run's processes, and its command line, which anyone may read, must not carry it.
std::vector<std::string> keeper_arguments(const plan& p, int env_fd);

/// The environment `envp` as NUL-terminated "K=V" strings one after another.
std::string environment_block(char* const* envp);

/// What parse_keeper_arguments's plan points into, beside the arguments themselves.
struct parsed_storage {
  std::vector<int> keep_fds;
  std::string env_block;
  std::vector<char*> env;
};

/// The plan that keeper_arguments wrote, read back from faultline-keeper's argv (argv[0]
/// excluded); the environment from --env-fd (read to its end and closed), else `envp`. Pointers
/// point into `args`, `envp` and `storage`. False, with `error` set, on anything malformed.
bool parse_keeper_arguments(int argc, char* const* args, char* const* envp, parsed_storage& storage, plan& out,
                            std::string& error);

}  // namespace faultline::harness::keeper
