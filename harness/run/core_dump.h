// Crash stacks from the kernel's core dump: the faithful way to see a crash (DESIGN.md §8.2).
//
// Any handler for SIGSEGV inside the crashing process changes the race it is meant to report:
// while the kernel sets up the handler's frame, the main thread may finish exit() and the
// process exits 0 instead of dying by the signal (measured: a handler that only re-raises the
// signal halves the crash rate of an exit race). A core dump has no such cost: the kernel stops
// every thread before it writes one. So by default the harness lets fatal signals take their
// default action, lets the kernel write a core where /proc/sys/kernel/core_pattern puts it,
// finds the core of a process of the run after the run, reads every thread's stack from it,
// writes them into the run directory and deletes the core. The reader is the harness's own
// (dwfl_stacks.h: elfutils' libdwfl, linked in statically, symbols from the symbol table), so a
// machine without gdb still gets stacks; gdb, where it is installed, reads a core that libdwfl
// cannot. The core's notes say whose it is (NT_PRPSINFO) and which thread took the signal (the
// first NT_PRSTATUS); the section names that thread, so the crash signature comes from it:
//
//   === process 4242 (core) thread 4243 via libdwfl ===
//   PID 4242 - core
//   TID 4243:
//   #0  0x000055d689cc9150 (anonymous namespace)::touch(int) - /opt/prog
//   ...
//
//   if (auto why = harness::enable_core_capture(); !why.empty()) ... // cores cannot be used
//   harness::capture_core(pids, cwd, run_dir, started, run_dir / "crash-stacks.txt");
//
// Where the cores are: with faultline-core-handler installed (`faultline cores --install`,
// harness/run/core_handler/core_handler.h), core_pattern pipes every core to it and it writes a
// run's core as RUN_DIR/core.PID, whatever the program's directory holds and however many runs
// crash at once. Otherwise core_pattern names a file; where that is one name per directory
// ("core"), keep_cores_apart() holds each new core open so that a later crash cannot take it
// (core_keeper.h). A relative pattern puts a core where the crashing process stands: the runner
// tells the agent where it reads the run's cores (core_home()), and a process of the run that
// stands anywhere else — a shell's `cd`, a bisect worktree — records where (cwd.PID, protocol.h),
// which the keeper follows (follow_cores()) and the capture reads; no handler is installed, so
// nothing changes at the crash. Every core of a run's processes (its pids, its process group) is taken
// away once the run has ended, read or not (claim_cores()): a passing run's child that crashed on
// purpose leaves no core behind. Limits: a core_pattern that pipes cores to another program
// (systemd-coredump, apport) leaves the harness nothing to read; so does RLIMIT_CORE's hard limit
// of 0, a program without the agent (--no-preload) that stands elsewhere, and a directory that
// holds a core/ folder, where the kernel cannot write "core" at all (the harness's own directory:
// capture falls back to none and says so). A pattern without
// the pid ("core") names one file per directory: a core replaced before the keeper opened it
// (microseconds) is lost; the pid inside the core is checked, so a run never takes another run's
// core.
//
// Thread safety: capture_core may run for several runs at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace faultline::harness {

/// Said where cores get lost for want of faultline-core-handler.
inline constexpr const char* core_handler_hint = "`faultline cores --install` keeps every crash's core (root)";

/// Makes the harness's children dump core (raises RLIMIT_CORE's soft limit of this process, which
/// every run inherits, to its hard limit, at most 4 GiB). Returns "" when cores can be used
/// (core_pattern names a file, or pipes cores to faultline-core-handler), or why not ("core_pattern
/// pipes cores to |/usr/share/apport/apport ...", "RLIMIT_CORE's hard limit is 0", ...); no
/// debugger is needed. Idempotent: the answer of the first call is kept.
std::string enable_core_capture();

/// Why a process with working directory `cwd` could not have its core written where core_pattern
/// says ("" when it can, as far as can be told ahead, and always with faultline-core-handler): the
/// pattern's directory is missing or not writable, or its fixed file name is a directory there
/// ("./core" in a tree with a core/ folder); each message ends with core_handler_hint.
std::string core_destination_problem(const std::filesystem::path& cwd);

/// Where core_pattern is a plain name relative to the crashing process's working directory
/// ("core", "core.%p"): `cwd` made canonical, the directory the runner gives the agent as the
/// run's core home (FAULTLINE_AGENT_CORE_HOME, protocol.h): a process of the run that stands
/// anywhere else records where (cwd.PID), and its core is looked for there. nullopt when cores do
/// not follow the working directory (a pipe, a socket, an absolute pattern or one with a directory
/// part).
std::optional<std::filesystem::path> core_home(const std::filesystem::path& cwd);

/// Where core_pattern gives every core of a directory one name: has the core keeper follow the
/// records the agent leaves in `run_dir` (cwd.PID), so that each directory a process of the run
/// moves to is watched as keep_cores_apart() watches the run's own (core_keeper::follow; call
/// core_keeper::unfollow once the run has ended). Errors: not_found when cores have names of their
/// own (nothing to follow); io_error when the directory cannot be watched.
core::status follow_cores(const std::filesystem::path& run_dir);

/// The directories the run's processes recorded in `run_dir` (cwd.PID, protocol.h), each once.
std::vector<std::filesystem::path> recorded_directories(const std::filesystem::path& run_dir);

/// A run's cores, as claim_cores() looks for them once the run has ended.
struct run_cores {
  std::vector<pid_t> pids;  ///< the run's processes known by pid (its tree, the agent's phase table)
  pid_t group = 0;          ///< the run's process group (its leader's pid; 0: none): a core of any process in it is the run's
  bool read = true;         ///< read the first core of a process in `pids` into `out`; false: only remove them
  /// More of the run's pids, asked at most once and only when a core's owner is not known
  /// otherwise (so that a run without a core pays nothing for them).
  std::function<std::vector<pid_t>()> more_pids;
};

/// Every core the run's processes left (whose notes name a pid of `run.pids` or the process group
/// `run.group`), wherever capture_core looks and in every directory the run's processes recorded
/// (recorded_directories()): with `run.read`, the first core of a process in `run.pids` is read
/// into `out` as capture_core does; read or not, each is removed (and let go by the keeper), so
/// that no core of a run stays in the user's directory or held open. Cores of other processes
/// are left alone. Errors (with `run.read` only): as capture_core.
core::status claim_cores(const run_cores& run, const std::filesystem::path& cwd, const std::filesystem::path& run_dir,
                         std::chrono::system_clock::time_point since, const std::filesystem::path& out);

/// Where core_pattern gives every core of a process in `cwd` one file name ("core"), watches that
/// directory so that each core written there is held open the moment it appears (core_keeper.h):
/// capture_core then finds a run's core even after a later crash replaced the name. A no-op when
/// cores have names of their own. Call it before the runs start. Errors: io_error when the
/// directory cannot be watched (cores there are then found by name only, as before).
core::status keep_cores_apart(const std::filesystem::path& cwd);

/// Whether core_pattern (with core_uses_pid) gives each process's core its own name (%p, %P, %t...,
/// or faultline-core-handler's core.PID).
bool core_names_are_unique();

/// The glob of the files a core written by a process with working directory `cwd` may have, from
/// `pattern` (core_pattern's text) and `uses_pid` (core_uses_pid): "%p" and every other
/// specifier become '*', "%%" a '%'; a relative pattern is taken against `cwd`. For a
/// faultline-core-handler pattern, that of its previous pattern (where the cores of processes
/// outside a run go).
std::string core_glob(const std::string& pattern, bool uses_pid, const std::filesystem::path& cwd);

/// What gdb said about one core (capture_core reads the core's own notes instead; this reads
/// gdb's output, as a user pastes it).
struct core_info {
  pid_t pid = 0;            ///< the process the core is of
  pid_t thread = 0;         ///< the thread that took the fatal signal
  std::string executable;   ///< the program, from "Core was generated by `...'"
};

/// Parses the output of gdb reading a core (info inferiors and the current thread).
core_info parse_core_info(const std::string& gdb_output);

/// Looks for the core of one of `pids` written since `since` — in `run_dir` (core.PID) when
/// faultline-core-handler is installed, where core_pattern (or the handler's previous pattern)
/// resolved against `cwd` puts it otherwise; the pid is the one in the core's notes — appends
/// every thread's stack to `out` as a "=== process PID (core) thread TID via libdwfl ===" section
/// ("via gdb" when libdwfl found no frame and gdb did), and deletes the core; other runs' cores
/// are left alone. The handler may still be finishing a core when the crashed process has ended:
/// this waits (at most 10 s) while `run_dir` holds a core.PID.part. Errors: not_found when there
/// is no such core; io_error when `out` cannot be written; unavailable when neither libdwfl nor
/// gdb (when installed) could read it.
core::status capture_core(const std::vector<pid_t>& pids, const std::filesystem::path& cwd,
                          const std::filesystem::path& run_dir, std::chrono::system_clock::time_point since,
                          const std::filesystem::path& out);

/// capture_core without a run directory: only where core_pattern (or the handler's previous
/// pattern) puts cores.
core::status capture_core(const std::vector<pid_t>& pids, const std::filesystem::path& cwd,
                          std::chrono::system_clock::time_point since, const std::filesystem::path& out);

}  // namespace faultline::harness
