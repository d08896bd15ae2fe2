// Capturing the stacks of a hung run's processes before they are killed.
//
// Three ways, best first: gdb in batch mode (`thread apply all bt` on every process, when gdb is
// on PATH and can attach); the in-process agent (the stack-dump signal, answered with
// stacks.PID in the run directory — for processes that carry the agent); /proc (each thread's
// name, state, wait channel and kernel stack). In automatic mode each process gets the best
// way that works for it. Everything goes into one text file, one section per process:
//
//   === process 4242 (fl_testdata_han) ppid 4200 pgrp 4242 state S via gdb ===
//   Thread 1 (Thread 0x7f.. (LWP 4242) "fl_testdata_han"):
//   #0  0x00007f.. in __GI___clock_nanosleep (...) at ...
//   ...
//
//   harness::capture_stacks(tree.alive(), run_dir, run_dir / "stacks.txt", {});
//
// Thread safety: capture_stacks may run for several runs at once.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "harness/detail/proc.h"

namespace faultline::harness {

/// How to capture stacks.
enum class stack_method { automatic, gdb, agent, proc, none };

/// "auto", "gdb", "agent", "proc", "none" and back.
std::string_view to_string(stack_method m) noexcept;
std::optional<stack_method> stack_method_from_string(std::string_view s) noexcept;

/// Limits for one capture.
struct stack_options {
  stack_method method = stack_method::automatic;
  std::chrono::milliseconds gdb_timeout{30'000};  ///< per process
  std::chrono::milliseconds agent_wait{3'000};    ///< for every agent to answer
};

/// True when a `gdb` executable is on PATH (looked up once).
bool gdb_available();

/// Writes the stacks of `procs` (live processes of one run) to `out`. `run_dir` is where the
/// agents write stacks.PID. Errors: io_error when `out` cannot be written; a process whose stack
/// cannot be taken gets a section that says why.
core::status capture_stacks(const std::vector<detail::proc_stat>& procs, const std::filesystem::path& run_dir,
                            const std::filesystem::path& out, const stack_options& options);

}  // namespace faultline::harness
