// The contract between the faultline runner and the agent inside a run's processes.
//
// The agent (crash handler, exit-phase markers, in-process stack dump) is linked into scenario
// binaries and preloaded (libfaultline_agent.so) into programs run under `faultline exec`. The
// runner gives each run a directory through FAULTLINE_RUN_DIR; every process of the run that
// carries the agent writes its files there, named with its pid. Everything is plain text, one
// record per line, written with write(2) only (safe in signal handlers, survives any crash).
//
// Files in $FAULTLINE_RUN_DIR (PID = the writing process's pid):
//   phases       the phase table, made by the runner (phase_table.h): when it is there, every
//                agent-carrying process keeps its markers (below) in a slot of it instead of in
//                phase.PID, and having a slot means what having phase.PID means. A process that
//                finds the table full, or a directory without one, uses phase.PID.
//   phase.PID    created when the agent starts in a process (also by a child that fork()s from an
//                agent-carrying process: it inherits the handlers), then appended markers, one
//                per line, in order. The runner sends the stack-dump signal only to processes
//                that have this file, and also checks that the signal is caught (its bit in
//                SigCgt of /proc/PID/status): a forked child that exec'd a program without the
//                agent has the file but not the handler, and the signal's default action would
//                kill it. (An agent.PID file, "PID PPID EXE", was written beside it until it was
//                found to cost a file created and removed per process of every run; no reader
//                needed more than this file's existence.) The markers:
//                  "run"            agent started (the work phase); again after fork() in the child
//                  "work-end"       a scenario finished its work (scenarios mark it themselves)
//                  "main-returned"  main() returned (preload: wrapped __libc_start_main)
//                  "exit"           exit() began (preload: interposed exit(); exit() called
//                                   inside libc itself, e.g. by error(), is not seen)
//                A crash or hang after any of the last three is in phase `exit`.
//                The agent sizes the file to phase_file_bytes and maps it shared, so that a
//                mark is a store to memory, not a system call (marks at main's return and in
//                exit() would otherwise slow down the very moment exit races happen at). The
//                unused tail is NUL bytes: readers stop at the first NUL. Markers past the
//                end of the file are dropped. Written with write(2) where the mapping fails.
//   crash.PID    written by the crash handler: line 1 "signal N NAME", line 2 "thread TID NAME"
//                (NAME: the thread's name, may be empty), then one frame per line:
//                "#K ADDR MODULE+OFFSET FUNCTION".
//   stacks.PID   written on the stack-dump signal: for every thread, "thread TID NAME" followed
//                by frame lines in the crash-file format, then a blank line; after the last
//                thread, a line "end". A thread that did not answer in time (signal blocked,
//                thread stuck) has its header line and no frames. Every dump is appended, so a
//                second signal adds a second set of blocks and a second "end".
//   points.PID   fault points reached: one line per enabled item of FAULTLINE_FAULTS, its point
//                pattern exactly as the spec names it ("sim/*", "exit/end"), appended the first
//                time a point matching that item is reached in the process (whether or not its
//                term then fires). Written by the fault engine (faultline::faults) and by the
//                preloaded agent for its own points (exit/start, exit/end, cuda/<API>). A spec item that no
//                process of any run reached names a point that does not exist or is never hit.
//                A lock/ item whose @function filter matched something not named exactly so (a
//                clone, a tail-caller, an inlined copy) adds, the first time, "PATTERN in WHAT"
//                ("lock/sem/release@give_slot in give_slot.isra.0, a tail call").
//   late-cuda.PID  written by the preloaded agent when it is also the process's CUDA injection
//                library (CUDA_INJECTION64_PATH, set by `faultline exec`): once main has returned
//                or exit() has begun, every CUDA runtime call answered cudaErrorCudartUnloading
//                and every driver call answered CUDA_ERROR_DEINITIALIZED is a late call. Each
//                appends a block: "call API RESULT" (API: the function's name, RESULT: the number
//                it returned), then the calling thread's frames in the crash-file format, then a
//                blank line. Past late_cuda_framed_calls blocks, further calls append the "call"
//                line alone.
//   nccl.PID     a rank's NCCL calls (nccl_state.h): made by the preloaded agent at the first
//                NCCL call of a process, mapped shared, a fixed binary layout updated by stores;
//                the runner reads it to name the ranks that were in a collective and those that
//                were not.
//   cwd.PID      the directory this process stands in, when that is not FAULTLINE_AGENT_CORE_HOME
//                (one absolute path, no newline): written at start and after each chdir()/fchdir()
//                that leaves the home (at most 64 times a process), to cwd.PID.part and renamed to
//                cwd.PID, so that a reader never sees half of it. The core keeper watches the run directory for the rename
//                and then the named directory for the process's core; after the run the runner
//                looks for the run's cores there too.
//   crash-stacks.txt  written by the runner, not the agent: every thread of the crashed
//                process, read by gdb from its core dump (mode off), or every thread of every
//                process of the run, captured out of process while a crashing process was
//                stopped in the agent's handler (mode stop); stacks.txt format. A section from a
//                core reads "=== process PID (core) thread TID via gdb ===", TID being the
//                thread that took the fatal signal.
//
// Crash capture (FAULTLINE_AGENT_CRASH):
//   off      no crash handler at all: a fatal signal takes its default action, as without the
//            agent. The only faithful mode for exit races: measured on a 2-core x86-64 machine,
//            a SIGSEGV handler that does nothing but re-raise the signal halves the crash rate
//            of fl_race_static_dtor (32/60 -> 16/60), because setting up the handler's signal
//            frame gives the main thread time to finish exit() and the process then exits 0.
//            The runner takes crash stacks from the kernel's core dump instead (the kernel
//            stops every thread before it writes one). The runner's default.
//   report   (default when unset) the crashing thread unwinds itself in the handler, symbolises
//            and writes crash.PID with all its frames. Thorough, but it keeps the process alive
//            for a while after the fault: at exit, another thread may finish exit() meanwhile
//            and the process then exits 0 instead of dying by the signal (a perturbation).
//   minimal  crash.PID gets its header and frame #0 (the interrupted pc, from the signal
//            context) and the signal is passed on at once.
//   stop     the handler writes one line "crash PID TID SIG\n" to the file descriptor named by
//            FAULTLINE_AGENT_CRASH_FD (a pipe to the runner; PID and TID as the kernel of the
//            runner numbers them), then stops the whole process with SIGSTOP. The runner
//            captures every thread out of process and sends SIGCONT; the handler then writes
//            crash.PID as in `minimal` and passes the signal on. When the descriptor cannot be
//            written it behaves as `minimal`. Freezing within microseconds of the fault keeps
//            the race between the crash and the rest of the process as it is without faultline.
//
// Frame lines:
//   K         0 is the innermost frame: the exact instruction where the thread was interrupted
//             (the faulting instruction for a crash). Frames K >= 1 are return addresses: to
//             name the call site, symbolise OFFSET-1.
//   ADDR      the absolute address, "0x" lowercase hex.
//   MODULE    the absolute path of the ELF file holding ADDR (the main program's path comes from
//             /proc/self/exe), or "??" when ADDR lies in no loaded module (then OFFSET = ADDR).
//   OFFSET    ADDR minus the module's load bias, "0x" hex: the address `addr2line -e MODULE`
//             takes (for a PIE or a shared library, the offset from its load base; for a non-PIE
//             executable, ADDR itself).
//   FUNCTION  the rest of the line: the demangled symbol from the dynamic symbol table (programs
//             built with -rdynamic export theirs); the raw mangled name ("_Z...") where the agent
//             could not demangle safely (a thread running its handler without the agent's
//             alternate signal stack, or an over-long name) — the runner demangles it; or "??"
//             when the address has no exported symbol (the runner symbolises it with addr2line).
//
// Environment read by the agent:
//   FAULTLINE_RUN_DIR      where to write; without it the agent installs nothing. A relative
//                          path is taken against the working directory at install time.
//   FAULTLINE_AGENT_QUIET  "1": do not also print crash backtraces to stderr.
//   FAULTLINE_AGENT_CRASH  "off", "report" (default), "minimal" or "stop": see "Crash capture".
//   FAULTLINE_AGENT_CRASH_FD  the runner's crash pipe, for "stop".
//   FAULTLINE_AGENT_CORE_HOME  mode off only, set by the runner where core_pattern names a file
//                          relative to the crashing process's working directory ("core"): the
//                          directory (absolute, canonical) where the runner reads this run's cores.
//                          A process that stands anywhere else (started elsewhere, or moved by
//                          chdir()/fchdir(), which the preloaded agent interposes) writes cwd.PID
//                          (below) so that its core is found where it falls. No handler is
//                          installed for it: any crash handler changes exit races (DESIGN.md §8.2).
//   FAULTLINE_FAULTS, FAULTLINE_SEED  the preloaded agent's own fault points exit/start,
//                          exit/end (preload.cc) and cuda/<API> (cuda_points.h); other items are
//                          left to the fault engine.
#pragma once

#include <csignal>

namespace faultline::agent {

inline constexpr const char* run_dir_env = "FAULTLINE_RUN_DIR";
inline constexpr const char* quiet_env = "FAULTLINE_AGENT_QUIET";

inline constexpr const char* phase_file_prefix = "phase.";
inline constexpr const char* crash_file_prefix = "crash.";
inline constexpr const char* stacks_file_prefix = "stacks.";
inline constexpr const char* points_file_prefix = "points.";
inline constexpr const char* late_cuda_file_prefix = "late-cuda.";
inline constexpr const char* cwd_file_prefix = "cwd.";
inline constexpr unsigned phase_file_bytes = 4096;
inline constexpr unsigned late_cuda_framed_calls = 64;
inline constexpr const char* crash_stacks_file = "crash-stacks.txt";

inline constexpr const char* crash_mode_env = "FAULTLINE_AGENT_CRASH";
inline constexpr const char* crash_fd_env = "FAULTLINE_AGENT_CRASH_FD";
inline constexpr const char* core_home_env = "FAULTLINE_AGENT_CORE_HOME";

inline constexpr const char* marker_run = "run";
inline constexpr const char* marker_work_end = "work-end";
inline constexpr const char* marker_main_returned = "main-returned";
inline constexpr const char* marker_exit = "exit";

/// The line that closes one complete stack dump in stacks.PID.
inline constexpr const char* stacks_end_line = "end";

/// The signal that asks an agent-carrying process to dump every thread's stack. A real-time
/// signal so that it queues and does not collide with SIGUSR1/2 that programs use. Send it with
/// kill(2) (or tgkill/sigqueue from another process); the agent tells the runner's request apart
/// from its own per-thread requests by the sender.
inline int stack_dump_signal() noexcept { return SIGRTMIN + 7; }

}  // namespace faultline::agent
