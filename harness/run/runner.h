// Running one process under the harness: isolated, bounded, observed, and cleaned up.
//
// `run_once` starts the command in its own process group (the harness being a subreaper),
// with its stdout and stderr in one pipe drained into the run's log file (output_capture.h:
// as CI runners read a program's output; a file in the pipe's place changes exit races) and a
// fresh run directory announced through FAULTLINE_RUN_DIR, waits for it under an outer timeout,
// and leaves nothing behind:
//   - on timeout it captures the stacks of every process of the run's tree (gdb, else eu-stack,
//     else the harness's libdwfl reader, else the agent, else /proc), then sends SIGTERM, waits
//     the grace period, SIGKILLs what is left and reaps everything;
//   - after a normal exit, any process of the tree still alive (after a short settle time) is a
//     leak: recorded, then killed the same way; so are new /dev/shm/faultline* entries;
//   - a crash is frozen where it happened: in `outside` capture mode the agent stops the
//     crashing process in its handler and reports it through a pipe; the runner then captures
//     every thread of the run's tree out of process (RUNDIR/crash-stacks.txt) and lets the
//     process die by its signal. Other runs go on meanwhile; this run's timeout is extended
//     by the capture time (the program was not running);
//   - gtest's protocol is spoken: TEST_PREMATURE_EXIT_FILE is created in the run directory
//     and, when asked, GTEST_OUTPUT points at RUNDIR/gtest.xml.
// It returns the classified run (see classify.h).
//
//   harness::run_request rq;
//   rq.argv = {"./my_test"};
//   rq.env = harness::current_environment();
//   rq.run_dir = "out/runs/my_test.s1";
//   rq.log_path = "out/logs/my_test.s1.log";
//   rq.timeout = std::chrono::seconds(30);
//   harness::run_report r = harness::run_once(rq);
//   if (r.verdict.result == harness::outcome::hang) ...
//
// Thread safety: run_once may be called from several threads at once (one run each).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <string>
#include <vector>

#include "harness/detail/defaults.h"
#include "harness/run/classify.h"
#include "harness/run/cpu_use.h"
#include "harness/run/output_capture.h"
#include "harness/run/stacks.h"

namespace faultline::harness {

/// How a crash inside the run is captured (the agent's FAULTLINE_AGENT_CRASH, protocol.h).
/// Only `core` and `none` leave the program's timing alone: the others run a signal handler
/// in the crashing process, which changes how exit races end (see core_dump.h).
enum class crash_capture {
  automatic,  ///< core where the kernel writes cores the harness can read, else none
  core,       ///< no handler; every thread's stack read from the kernel's core dump (libdwfl, else gdb)
  outside,    ///< the crashing process stops in its handler; the run's tree is captured live
  minimal,    ///< a handler writes the faulting frame only, then the signal goes on
  inside,     ///< the crashing thread unwinds itself in its handler
  none,       ///< no handler, no core: the signal and the phase only
};

/// "auto", "core", "outside", "minimal", "inside", "none" and back.
std::string_view to_string(crash_capture c) noexcept;
std::optional<crash_capture> crash_capture_from_string(std::string_view s) noexcept;

/// What a request becomes on this machine: automatic and core become core where cores can be
/// read (enable_core_capture()), else none; outside becomes minimal where no process can be read
/// from outside. `why`, when given, receives the reason for a downgrade ("" when there was none).
/// `cwd`: where the runs will be (core files land there); empty: the harness's directory.
crash_capture resolve_crash_capture(crash_capture requested, std::string* why = nullptr,
                                    const std::filesystem::path& cwd = {});

struct run_report;

/// One run to perform.
struct run_request {
  std::vector<std::string> argv;          ///< the command; argv[0] searched in PATH without '/'
  std::vector<std::string> env;           ///< its environment (the runner adds its own variables)
  std::filesystem::path run_dir;          ///< created empty (an existing one is cleared)
  std::filesystem::path log_path;         ///< stdout+stderr, truncated (through a pipe: output_capture.h)
  std::uint64_t log_limit_bytes = default_log_limit_bytes;  ///< head and tail kept past it (0: no limit)
  std::chrono::milliseconds output_grace{100};  ///< after the tree is gone, for the pipe to close
  std::chrono::milliseconds timeout{default_run_timeout};
  std::chrono::milliseconds grace{default_grace};  ///< between SIGTERM and SIGKILL
  std::chrono::milliseconds leak_settle{200};   ///< survivors get this long to exit on their own
  stack_options stacks;                   ///< how to capture a hang's stacks (method none: skip)
  bool gtest_output = false;              ///< set GTEST_OUTPUT=xml:RUNDIR/gtest.xml unless env has one
  bool in_run_dir = false;                ///< run in run_dir (else in the harness's directory)
  bool check_shm = true;                  ///< attribute new /dev/shm/faultline* entries to this run
  const std::atomic<bool>* cancel = nullptr;  ///< when it becomes true: kill the run, no stacks
  crash_capture crash = crash_capture::automatic;  ///< unless env sets FAULTLINE_AGENT_CRASH
  /// Once the run is classified: whether its log file is written (unset: always). A campaign
  /// keeps few passing runs' logs, and a file written and removed again costs more than a short
  /// run. The log of a run that did not exit 0 is written before it is classified anyway (the
  /// classifier reads a failure's invariant from it) and removed again when this says no.
  std::function<bool(const run_report&)> keep_log;
  /// Attached to the run's cgroup while its program runs (cpu_use.h), for a campaign that admits
  /// runs by what they use; null: not measured. Outlives the call.
  run_cpu_use* cpu = nullptr;
};

/// Where a run's time went, step by step, on the harness's clock (steady_clock): what the
/// overhead breakdown reads (runner_bench.cc, ci/overhead.py). The steps follow one another, so
/// their sum is run_once's time but for what destructors spend after the verdict.
struct run_steps {
  std::chrono::microseconds prepare{0};  ///< run directory emptied, phase table reset, output pipe and its thread
  std::chrono::microseconds arm{0};      ///< environment, crash capture (core keeper), /dev/shm snapshot
  std::chrono::microseconds spawn{0};    ///< cgroup from the pool, clone3 into it, until the program's exec
  std::chrono::microseconds program{0};  ///< exec to the leader's exit seen (the program, its loader and agent)
  std::chrono::microseconds end{0};      ///< leader reaped, tree looked at (leaks), or a hang's stacks and kill
  std::chrono::microseconds cores{0};    ///< the run's cores claimed, read, removed
  std::chrono::microseconds reap{0};     ///< the tree and strays reaped
  std::chrono::microseconds output{0};   ///< the pipe drained to its end, the drain thread joined
  std::chrono::microseconds judge{0};    ///< /dev/shm leaks, classification, the log kept or dropped
};

/// A performed run.
struct run_report {
  classification verdict;
  run_evidence evidence;
  std::chrono::system_clock::time_point started;
  std::chrono::milliseconds duration{0};  ///< spawn to exit (to the deadline for a hang)
  std::chrono::microseconds teardown{0};  ///< deadline (or exit) to every process reaped
  std::vector<int> stuck_pids;            ///< processes that survived SIGKILL (uninterruptible)
  bool interrupted = false;               ///< cancelled: the verdict is meaningless
  output_stats output;                    ///< what the run wrote to stdout and stderr
  run_steps steps;                        ///< where its time went
};

/// Performs one run (see the file comment). Never throws; a run that cannot be started is
/// outcome::error with the reason in the signature.
run_report run_once(const run_request& rq);

/// Names of /dev/shm entries beginning with "faultline".
std::vector<std::string> faultline_shm_entries();

/// Of /dev/shm entries `names`, those that a live process other than this one holds open or
/// mapped: another campaign's or test's objects, neither a run's leak nor this harness's to remove.
std::set<std::string> shm_held_by_others(const std::vector<std::string>& names);

/// Of /dev/shm entries `fresh` that appeared while runs ran (which have all ended), those left by
/// the runs: unheld by any other live process, and still there and unheld 100 ms later (an entry
/// of someone else on the machine, a test or campaign beside this one, can be caught between its
/// holder's end and its removal). Removes them. In the order of `fresh`.
std::vector<std::string> remove_shm_left_by_runs(const std::vector<std::string>& fresh);

}  // namespace faultline::harness
