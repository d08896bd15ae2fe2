// The harness's defaults, each defined once: the option structs of every floor (run_request,
// variant, campaign_options, soak_options, scenario_info) start from these, and the command's
// --help prints them from here. Header-only and on the bottom floor (detail/, which every floor
// of the harness may include), so that no floor has to reach up for a default.
//
// A scenario's own timeout is not here: scenarios/ may not include the harness, so it is
// scenarios/scenario.h's default_scenario_timeout_ms, declared to the harness through the
// catalog (`list --json`).
#pragma once

#include <chrono>
#include <cstdint>

namespace faultline::harness {

/// A run's outer timeout when neither --timeout nor a scenario sets one: a user's command (exec,
/// a command soak), and any run_request or variant built without one. Generous on purpose: an
/// unknown program gets room; scenarios declare their own, much shorter, deadline.
inline constexpr std::chrono::milliseconds default_run_timeout = std::chrono::minutes(10);

/// A catalog entry's timeout when the scenario binary's `list --json` declares none (or one that
/// is not positive). It differs from a scenario's own default (20 s, scenarios/scenario.h) on
/// purpose: faultline's scenario binary always declares its scenarios' timeouts, so this applies
/// only to a binary that does not, whose runs are given more room than a deadline tuned for ours.
inline constexpr std::chrono::milliseconds catalog_fallback_timeout = std::chrono::seconds(60);

/// Between SIGTERM and SIGKILL when a run's tree is ended (--grace).
inline constexpr std::chrono::milliseconds default_grace = std::chrono::seconds(1);

/// Each run's log (output_capture.h): past it the log keeps a head and a tail of half each.
inline constexpr std::uint64_t default_log_limit_bytes = std::uint64_t{4} << 20;

/// Runs at once (--jobs), and the most a campaign performs at once (each is a thread and a
/// process tree).
inline constexpr unsigned default_jobs = 1;
inline constexpr unsigned max_jobs = 1024;

/// Runs of each scenario or command (--repeat): run and exec, verify, and with --until-fail.
inline constexpr std::uint64_t default_repeat = 1;
inline constexpr std::uint64_t default_verify_repeat = 50;
inline constexpr std::uint64_t default_until_fail_repeat = 10000;

/// The first passes of each variant whose files keep_policy::failures keeps (--keep).
inline constexpr std::uint64_t default_kept_passes = 3;

/// How often a soak rewrites OUT/soak.json and its reports (--report-every).
inline constexpr std::chrono::milliseconds default_report_every = std::chrono::minutes(5);

/// Where a campaign (run, exec, verify) and a soak write (--out).
inline constexpr const char* default_campaign_out_dir = "faultline-out";
inline constexpr const char* default_soak_out_dir = "faultline-soak";

/// The shrink (harness/triage/shrink.h): runs of the original spec, and of the minimal one, that
/// measure their rates (--confirm); the stopping rule's bound as a fraction of the original rate
/// (a candidate is gone once its runs bound its rate below it at 95%); its budgets (--max-runs,
/// --budget).
inline constexpr std::uint64_t default_shrink_confirm_runs = 20;
inline constexpr double default_shrink_gone_fraction = 0.5;
inline constexpr std::uint64_t default_shrink_max_runs = 1000;
inline constexpr std::chrono::milliseconds default_shrink_budget = std::chrono::minutes(30);

/// The bisect (harness/triage/bisect.h): runs at most per commit (--runs; the endpoints get all
/// of them), runs between two looks at the test (--batch), the error bound of each decision
/// (--alpha, the gate's default), the build command's timeout, and where it writes (--out).
inline constexpr std::uint64_t default_bisect_runs = 60;
inline constexpr std::uint64_t default_bisect_batch = 10;
inline constexpr double default_bisect_alpha = 0.01;
inline constexpr std::chrono::milliseconds default_bisect_build_timeout = std::chrono::minutes(30);
inline constexpr const char* default_bisect_out_dir = "faultline-bisect";

}  // namespace faultline::harness
