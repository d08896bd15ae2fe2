// The `faultline` command: list, run, exec, verify, region, and report and gate (reports/commands.h)
// (DESIGN.md §8, §12). The usage text printed by `faultline --help` and `faultline SUBCOMMAND --help`
// is the documentation.
//
// `run_cli` is the whole program minus process setup (signal handling, the terminal checks),
// so that tests can drive it in-process:
//
//   std::ostringstream out, err;
//   harness::cli_context ctx{out, err};
//   int status = harness::run_cli({"faultline", "run", "--repeat", "0"}, ctx);  // 2, usage error
//
// Exit status: 0 when every run met its expectation (run/exec: all passed; verify: every check
// held), 1 when one did not, 2 for a usage or configuration error, 130 when interrupted.
//
// Thread safety: one call at a time per process (the harness is process-wide: subreaper).
#pragma once

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

namespace faultline::harness {

/// Exit statuses of the command.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;
inline constexpr int exit_usage = 2;
inline constexpr int exit_interrupted = 130;

/// Where the command writes and what it knows about its terminal.
struct cli_context {
  std::ostream& out;                          ///< summaries (stdout)
  std::ostream& err;                          ///< progress, warnings, errors (stderr)
  bool out_tty = false;                       ///< colour the summary (unless NO_COLOR is set)
  bool err_tty = false;                       ///< progress line rewritten in place
  const std::atomic<bool>* cancel = nullptr;  ///< set by the signal handler (SIGINT/TERM/HUP)
};

/// Runs the command line `args` (args[0] is the program name). Returns the exit status.
int run_cli(const std::vector<std::string>& args, cli_context& ctx);

}  // namespace faultline::harness
