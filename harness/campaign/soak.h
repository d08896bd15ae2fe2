// A soak: the scenarios run round-robin for a time budget, every run with its own seed and a
// fault spec drawn from its scenario's fault space, with leak checks between runs, a state that
// survives the harness being killed, and a report kept up to date while it runs. A soak of a
// user's command (`faultline soak -- CMD`) is the same with one variant, the command as `exec`
// runs it: every run gets its own seed (FAULTLINE_SEED: the agent's probabilities draw anew) and
// the command's own spec (FAULTLINE_FAULTS, the same on every run); its failures replay with
// `faultline exec --seed X ... -- CMD`.
//
// It is a campaign (campaign.h) with an unbounded number of runs, so it keeps everything a
// campaign does: the same runner and containment, the same results file, output pruning (a
// million passing runs keep a line each and no files), sharding (run k belongs to shard
// k mod n) and resume. Run k is scenario (k / n) mod S, so that every shard rotates through
// every scenario, with seed `seed + k` and the fault spec draw_faults(space,
// fault_draw_seed(seed, k)): everything about a run follows from the soak's seed and the run's
// number, so a failure replays with `faultline run NAME --seed X --faults Y`.
//
// Between runs (every few runs, with no run in flight) the soak checks the harness itself:
// processes no run could claim, /dev/shm/faultline* entries nobody holds, descriptors the harness
// had not open at the start (anything left is named, removed or killed, and counted as a harness
// leak). Every `report_every` it rewrites OUT/soak.json and OUT/report.{html,md} (the latter
// through `write_report`, which the command gives: the report writers are reports/, a floor this
// one does not call).
//
//   harness::soak_options o;
//   o.scenarios = *select(*catalog, {"exit/*"});
//   o.scenario_binary = scenario_binary();
//   o.budget = std::chrono::hours(8);
//   o.out_dir = "soak-out";
//   auto r = harness::run_soak(o);
//
// Output directory: what a campaign writes (results.jsonl, campaign.json, logs/, runs/) and
//   OUT/soak.json     seed, budget, time spent so far, scenarios and their fault spaces (or the
//                     command and its spec), runs and failures recorded so far (a resume's
//                     included; current at every state write) and harness leaks; rewritten
//                     atomically (what --resume reads)
//   OUT/report.html, OUT/report.md   the report of every run so far
// OUT/.faultline.lock (out_lock.h) is held from the start to the last report written: a second
// soak or campaign in OUT meanwhile is refused, naming this one's pid.
//
// A soak or campaign already in OUT is never replaced unasked: without `resume` or `replace`
// run_soak refuses it, naming it (check_out_dir_choice, campaign.h).
//
// Resuming (`resume`): after the harness was killed, the soak continues with the seed, scenarios
// and fault spaces (or command and spec) of OUT/soak.json (other ones are refused), spends what is left of the budget
// (time already spent counts, up to the last state write), performs first the runs that were in
// flight, and never records a run twice.
//
// Thread safety: run_soak blocks; one at a time per process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/status.h"
#include "harness/campaign/campaign.h"
#include "harness/campaign/scenario_catalog.h"

namespace faultline::harness {

/// One rewrite of a soak's report: every run recorded so far in `out_dir`, written to `html` and
/// `markdown`.
struct soak_report_request {
  std::filesystem::path out_dir;
  std::filesystem::path html, markdown;
  std::string title;      ///< "faultline soak, seed S", with " (running)" until the last one
  std::string plotly_js;  ///< soak_options::plotly_js
};

/// Writes a soak's report; returns 0 when every file was written, else non-zero with the reason
/// in `err`. Called from the soak's reporter thread, one call at a time.
using soak_report_writer =
    std::function<int(const soak_report_request& request, std::ostream& out, std::ostream& err)>;

/// How to soak.
struct soak_options {
  std::vector<scenario_info> scenarios;    ///< in rotation order (their clean variants)
  std::filesystem::path scenario_binary;   ///< runs `BIN run NAME`
  /// Instead of scenarios: a user's command, as exec runs it (argv, environment, timeout, slots,
  /// gtest output), its `faults` given to every run. Exactly one of scenarios and command.
  std::optional<variant> command;
  std::chrono::milliseconds budget{0};     ///< total time to spend, across resumes
  std::optional<std::uint64_t> seed;       ///< none: the recorded one (resume) or one from the clock
  unsigned jobs = default_jobs;
  shard part;
  std::filesystem::path out_dir = default_soak_out_dir;
  bool resume = false;                     ///< continue the soak in out_dir (it must hold one)
  bool replace = false;                    ///< clear the soak or campaign in out_dir first (without it
                                           ///< or `resume`, one there is an error)
  std::chrono::milliseconds report_every{default_report_every};
  /// A scenario's timeout is its catalog timeout times this (a slower machine, a sanitizer).
  double timeout_scale = 1.0;
  std::chrono::milliseconds grace{default_grace};
  std::uint64_t log_limit_bytes = default_log_limit_bytes;  ///< each run's log (output_capture.h)
  stack_options stacks;
  crash_capture crash = crash_capture::automatic;
  keep_policy keep = keep_policy::failures;
  std::vector<std::string> env;            ///< base environment of every run
  /// Options a scenario's replay line gives again (--env, --crash-capture: the command fills them
  /// in); a scaled timeout is added per scenario. A command's are its variant's own `replay`.
  std::vector<std::string> replay;
  std::ostream* progress = nullptr;
  bool progress_tty = false;
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string&)> warn;
  std::string plotly_js;                   ///< for the HTML report ("" = the configured one)
  /// Writes OUT/report.{html,md} (the command passes reports::report_command's); none: no report.
  soak_report_writer write_report;
};

/// What a soak did.
struct soak_result {
  campaign_result campaign;                ///< this invocation's campaign (summaries: every run)
  std::uint64_t seed = 0;
  std::chrono::milliseconds spent{0};      ///< of the budget, across resumes
  bool budget_spent = false;               ///< it ended because the budget ran out
  std::vector<std::string> harness_leaks;  ///< what the checks between runs found, one line each
  /// "scenario: point (in none of its N runs)" for each point of a fault space no run reached.
  std::vector<std::string> points_never_reached;
  std::filesystem::path report_html, report_markdown;  ///< empty when one could not be written
};

/// The name of the soak's state file in its output directory.
inline constexpr const char* soak_state_file = "soak.json";

/// Runs the soak. Errors: invalid_argument for neither scenarios nor a command, or both, a zero
/// budget or a malformed fault space, before OUT is touched; busy when another campaign holds OUT
/// (the message names its pid), before anything in OUT is read or written; check_out_dir_choice's
/// errors (a soak or campaign in OUT and neither `resume` nor `replace`; `resume` with nothing
/// there), before anything in OUT is written; invalid_argument for a resume whose seed,
/// scenarios, spaces, command or spec differ from OUT/soak.json (the message says which); corrupt for an unreadable soak.json; io_error when
/// the output cannot be written (a full disk: the runs recorded so far are intact, and the
/// message says so).
core::result<soak_result> run_soak(const soak_options& o);

}  // namespace faultline::harness
