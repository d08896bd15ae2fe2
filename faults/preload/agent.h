// The in-process agent: a crash handler, exit-phase markers and an in-process stack dump that
// report to the faultline runner through files in $FAULTLINE_RUN_DIR (see protocol.h).
//
// Scenario binaries link it (faultline::agent) and call install() first thing in main; programs
// run under `faultline exec` get it through LD_PRELOAD of libfaultline_agent.so, whose
// constructor calls install() and which marks "main-returned" and "exit" by itself.
//
//   int main() {
//     faultline::agent::install();                   // no-op outside a faultline run
//     run_the_work();
//     faultline::agent::mark(faultline::agent::marker_work_end);
//     return 0;                                      // a crash from here on is an exit crash
//   }
//
// After install(), a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP) writes
// crash.PID with the crashing thread's backtrace, echoes it to stderr, and then lets the signal
// take its course: the handler that was installed before the agent runs next, or the default
// action kills the process by the same signal. The stack-dump signal (stack_dump_signal()) makes
// every thread append its stack to stacks.PID; the process then keeps running.
//
// The agent depends on nothing else in faultline. Its handlers use only async-signal-safe calls,
// with two accepted exceptions: glibc's backtrace() (warmed up by install(), so it does not load
// libgcc_s or allocate in the handler) and dladdr1() (takes the loader's recursive lock; no
// allocation). Names come from the dynamic symbol table (link with -rdynamic / ENABLE_EXPORTS to
// have a program's own functions named; otherwise the runner symbolises MODULE+OFFSET with
// addr2line) and are demangled with libsupc++'s allocation-free callback demangler, only on the
// agent's alternate signal stack, since it needs stack space in proportion to the name.
//
// Things to know:
//  - A stack dump interrupts every thread once. Its handler is SA_RESTART, but calls that the
//    kernel never restarts (pause, nanosleep, poll, epoll_wait, ...) return EINTR as for any
//    signal; programs that treat that as an error may notice.
//  - A thread that blocks the dump signal, or cannot take it (stuck in the kernel, or in a
//    vfork wait), is listed without frames after a bounded wait; the dump always ends.
//  - Under ThreadSanitizer, signals are deferred to the thread's next intercepted call: a thread
//    parked in a raw read() never answers. Under ASan/TSan the sanitizer's own deadly-signal
//    handler, installed before main, is the "previous handler" the agent hands crashes to
//    (it exits 1 / 66 instead of dying by the signal) unless handle_segv=0 etc. are set.
//  - A program that installs crash handlers after install() replaces the agent's; one that
//    chains to the previous handler keeps it. The preloaded agent and a statically linked one
//    in the same process are two independent agents (harmless: markers are written twice).
#pragma once

#include "faults/preload/protocol.h"

namespace faultline::agent {

/// What install() did.
enum class install_status {
  installed,  ///< the handlers are active and the "run" marker was written
  disabled,   ///< FAULTLINE_RUN_DIR is unset or empty: nothing was installed
  failed,     ///< FAULTLINE_RUN_DIR is set but unusable (see install_result::error)
};

/// The outcome of install(): a status and, for `failed`, the errno value that explains it
/// (ENOENT / ENOTDIR: the directory is missing; ENAMETOOLONG: the path is too long; otherwise the
/// error of the system call that failed).
struct install_result {
  install_status status = install_status::disabled;
  int error = 0;
};

/// Installs the agent in this process when FAULTLINE_RUN_DIR names a directory: the crash and
/// stack-dump handlers, an alternate signal stack for the calling thread, a fork handler that
/// registers forked children and the "run" marker (in the run's phase table, else phase.PID). Idempotent: later calls (from any
/// thread) return the first call's result and do nothing. Without FAULTLINE_RUN_DIR it installs
/// nothing. A signal handler installed before the agent for a crash signal is kept and runs after
/// the agent's report. Thread safety: may be called concurrently; call it before the program
/// installs crash handlers of its own (those would replace the agent's). Never allocates after it
/// returns; the alternate stack it maps lives for the whole process.
install_result install() noexcept;

/// True once install() has returned `installed` in this process (or in the process it forked
/// from). Async-signal-safe.
[[nodiscard]] bool installed() noexcept;

/// This process's place among the run's processes: the index of its slot in the run's phase
/// table, handed out in the order the processes started (0: the run's first process; an exec
/// keeps it, a forked child gets its own); -1 without a table or when the agent is not installed.
/// Async-signal-safe.
[[nodiscard]] long process_index() noexcept;

/// The absolute run directory the agent writes to, or nullptr when it is not installed. The
/// string lives for the whole process. Async-signal-safe.
[[nodiscard]] const char* run_dir() noexcept;

/// Appends `marker` and a newline to the calling process's markers: its slot of the run's phase
/// table, else phase.PID (a forked child has a slot or file of its own). Returns false without writing when the agent is not installed, when
/// `marker` is null, empty, longer than 200 characters or contains a newline, or when the write
/// fails. Async-signal-safe; concurrent marks from several threads each land as whole lines.
bool mark(const char* marker) noexcept;

/// Appends a late CUDA call to late-cuda.PID (protocol.h): "call API RESULT", the calling
/// thread's frames (the first late_cuda_framed_calls calls of the process), a blank line. Returns
/// false when the agent is not installed or the file cannot be written. Called from CUPTI's
/// callbacks, on the thread that made the call.
bool record_late_cuda(const char* api, int result) noexcept;

/// Gives the calling thread the agent's alternate signal stack (256 KiB, mapped with a guard
/// page), so that a stack overflow on this thread is still reported and names are demangled in
/// its reports. install() does this for the thread that calls it; other threads may call it
/// themselves. Keeps an alternate stack the thread already has when it is at least as large.
/// Returns false when the mapping or sigaltstack() fails. Call release_thread() before a thread
/// that called this exits, or the mapping leaks. Not async-signal-safe.
bool prepare_thread() noexcept;

/// Removes the alternate stack prepare_thread() gave the calling thread and unmaps it; does
/// nothing when the thread has none from the agent or is running on it. (Under ASan, which
/// unmaps whatever alternate stack a thread has when it exits, a thread that skips this loses
/// nothing.) Not async-signal-safe.
void release_thread() noexcept;

/// Called after the process's working directory changed (the preloaded agent's chdir and fchdir):
/// with FAULTLINE_AGENT_CORE_HOME set (protocol.h), a process that now stands outside that home
/// writes cwd.PID, so that the runner finds its core where the kernel puts it. Does nothing when
/// the agent is not installed. Thread safety: any thread; not async-signal-safe.
void working_directory_changed() noexcept;

}  // namespace faultline::agent
