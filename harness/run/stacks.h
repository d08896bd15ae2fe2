// Capturing the stacks of a run's processes: of a hung run before it is killed, and of a run
// whose crashing process is stopped in the agent's handler (protocol.h, "Crash capture").
//
// Five ways, best first: gdb in batch mode (`thread apply all bt`, then `info proc mappings`,
// on every process, when gdb is on PATH and can attach); eu-stack from elfutils (`eu-stack -m -i -p PID`: the same frames,
// faster to attach — 0.04 s against gdb's 0.25 s for a small program here; on PATH or named by
// $FAULTLINE_EU_STACK); libdwfl, elfutils' library linked into the harness (dwfl_stacks.h: what
// eu-stack prints, read from a thread of the harness, so always there — the way on machines
// without gdb or eu-stack); the in-process agent (the stack-dump signal, answered with
// stacks.PID in the run directory — for processes that carry the agent); /proc (each thread's
// name, state, wait channel and kernel stack). In automatic mode each process gets the best way
// that works for it. The first three are out of process: they attach with ptrace, so they also
// see threads that never ran the agent, and a process in group-stop (SIGSTOP) stays stopped
// after they detach (checked with gdb 13.1 and eu-stack/libdwfl 0.188: the kernel leaves a
// SIGSTOP pending, which the caller's SIGCONT discards). Everything goes into one text file, one
// section per process (classify.h's parse_stacks reads it back):
//
//   === process 4242 (fl_testdata_han) ppid 4200 pgrp 4242 state S via gdb ===
//   Thread 1 (Thread 0x7f.. (LWP 4242) "fl_testdata_han"):
//   #0  0x00007f.. in __GI___clock_nanosleep (...) at ...
//   ...
//
// A section may name the thread that took a fatal signal: "... state T thread 4243 via gdb ===".
//
//   harness::capture_stacks(tree.alive(), run_dir, run_dir / "stacks.txt", {});
//   harness::capture_stacks_outside(tree.alive(), run_dir / "crash-stacks.txt", {},
//                                   harness::faulted_thread{pid, tid});
//
// Thread safety: capture_stacks and capture_stacks_outside may run for several runs at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "harness/detail/proc.h"

namespace faultline::harness {

/// How to capture stacks.
enum class stack_method { automatic, gdb, eu_stack, libdwfl, agent, proc, none };

/// "auto", "gdb", "eu-stack", "libdwfl", "agent", "proc", "none" and back.
std::string_view to_string(stack_method m) noexcept;
std::optional<stack_method> stack_method_from_string(std::string_view s) noexcept;

/// Limits for one capture.
struct stack_options {
  stack_method method = stack_method::automatic;
  std::chrono::milliseconds gdb_timeout{30'000};       ///< per process
  std::chrono::milliseconds eu_stack_timeout{10'000};  ///< per process
  std::chrono::milliseconds libdwfl_timeout{10'000};   ///< per process
  std::chrono::milliseconds agent_wait{3'000};         ///< for every agent to answer
};

/// Names the thread that took a fatal signal (pid and tid as the caller's kernel numbers them):
/// its process's section says "thread TID".
struct faulted_thread {
  pid_t pid = 0;
  pid_t tid = 0;
};

/// Environment variable that hides gdb from the harness when it is "none": runs then take the
/// way a machine without gdb takes (libdwfl for cores, eu-stack or libdwfl outside).
inline constexpr const char* gdb_env = "FAULTLINE_GDB";

/// True when a `gdb` executable is on PATH and $FAULTLINE_GDB is not "none" (looked up once).
bool gdb_available();

/// Environment variable naming the eu-stack executable to use instead of PATH's.
inline constexpr const char* eu_stack_env = "FAULTLINE_EU_STACK";

/// The eu-stack to run: $FAULTLINE_EU_STACK when it names an executable file, else `eu-stack`
/// on PATH; nullopt when there is none (looked up on every call: cheap, and the environment
/// may change).
std::optional<std::filesystem::path> eu_stack_program();

/// Environment variable naming the py-spy executable to use instead of PATH's.
inline constexpr const char* py_spy_env = "FAULTLINE_PY_SPY";

/// The py-spy to run for Python processes: $FAULTLINE_PY_SPY when it names an executable file,
/// else `py-spy` on PATH; nullopt when there is none (`pip install py-spy` brings it).
std::optional<std::filesystem::path> py_spy_program();

/// True when stacks can be captured out of process: always, since libdwfl is linked in (gdb or
/// eu-stack are preferred where installed).
bool outside_capture_available();

/// Writes the stacks of `procs` (live processes of one run) to `out`. `run_dir` is where the
/// agents write stacks.PID. A Python interpreter's process (its executable named python*, or
/// libpython mapped) also gets its Python frames, read by py-spy where py_spy_program() finds it,
/// in a section of its own after its machine frames ("via py-spy": thread by thread, each
/// function with its source file and line); a hang's signature then names the Python functions. Errors: io_error when `out` cannot be written; a process whose stack
/// cannot be taken gets a section that says why.
core::status capture_stacks(const std::vector<detail::proc_stat>& procs, const std::filesystem::path& run_dir,
                            const std::filesystem::path& out, const stack_options& options);

/// Writes the stacks of `procs` to `out` out of process only — gdb, eu-stack or libdwfl, never
/// the agent's signal: for a run whose crashing process is stopped in its handler (a signal would
/// stay pending, and the agent's answer never come). options.method picks the tool: automatic
/// (gdb, else eu-stack, else libdwfl, per process), gdb, eu_stack or libdwfl; options.agent_wait
/// is not used. A process no tool can attach to gets a /proc section (reading /proc does not
/// resume it). The processes are left as they were: stopped ones stay stopped. `faulted`, when
/// given, is marked in its process's section header. Errors: invalid_argument for another
/// method; unavailable when the requested tool (gdb, eu_stack) is not installed; io_error when
/// `out` cannot be written.
core::status capture_stacks_outside(const std::vector<detail::proc_stat>& procs, const std::filesystem::path& out,
                                    const stack_options& options,
                                    std::optional<faulted_thread> faulted = std::nullopt);

}  // namespace faultline::harness
