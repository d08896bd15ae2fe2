// The contract between the faultline runner and the agent inside a run's processes.
//
// The agent (crash handler, exit-phase markers, in-process stack dump) is linked into scenario
// binaries and preloaded (libfaultline_agent.so) into programs run under `faultline exec`. The
// runner gives each run a directory through FAULTLINE_RUN_DIR; every process of the run that
// carries the agent writes its files there, named with its pid. Everything is plain text, one
// record per line, written with write(2) only (safe in signal handlers, survives any crash).
//
// Files in $FAULTLINE_RUN_DIR (PID = the writing process's pid):
//   agent.PID    created when the agent starts in a process: "PID PPID EXE\n". The runner sends
//                the stack-dump signal only to processes that have this file.
//   phase.PID    appended markers, one per line, in order:
//                  "run"            agent started (the work phase)
//                  "work-end"       a scenario finished its work (scenarios mark it themselves)
//                  "main-returned"  main() returned (preload: wrapped __libc_start_main)
//                  "exit"           exit() began (preload: interposed exit())
//                A crash or hang after any of the last three is in phase `exit`.
//   crash.PID    written by the crash handler: line 1 "signal N NAME", line 2 "thread TID",
//                then one frame per line: "#K ADDR MODULE+OFFSET FUNCTION" where FUNCTION is the
//                demangled symbol or "??" (the runner symbolises "??" frames with addr2line).
//   stacks.PID   written on the stack-dump signal: for every thread, "thread TID NAME" followed
//                by frame lines in the crash-file format, then a blank line.
//
// Environment read by the agent:
//   FAULTLINE_RUN_DIR      where to write; without it the agent installs nothing.
//   FAULTLINE_AGENT_QUIET  "1": do not also print crash backtraces to stderr.
#pragma once

#include <csignal>

namespace faultline::agent {

inline constexpr const char* run_dir_env = "FAULTLINE_RUN_DIR";
inline constexpr const char* quiet_env = "FAULTLINE_AGENT_QUIET";

inline constexpr const char* agent_file_prefix = "agent.";
inline constexpr const char* phase_file_prefix = "phase.";
inline constexpr const char* crash_file_prefix = "crash.";
inline constexpr const char* stacks_file_prefix = "stacks.";

inline constexpr const char* marker_run = "run";
inline constexpr const char* marker_work_end = "work-end";
inline constexpr const char* marker_main_returned = "main-returned";
inline constexpr const char* marker_exit = "exit";

/// The signal that asks an agent-carrying process to dump every thread's stack. A real-time
/// signal so that it queues and does not collide with SIGUSR1/2 that programs use.
inline int stack_dump_signal() noexcept { return SIGRTMIN + 7; }

}  // namespace faultline::agent
