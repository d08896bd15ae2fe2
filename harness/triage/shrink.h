// The shrink: a recorded run's fault spec made minimal while its failure still reproduces.
//
// The run is replayed with its seed and spec, `confirm_runs` times from its seed, which measures
// the rate r0 at which the same failure (same outcome, phase and signature) shows. Then candidates
// are tried, greedily, in this order, each accepted as soon as it reproduces and the next pass
// started from it, until a pass accepts none: remove an item; remove a term of an item with
// several; halve a count above 1; halve a probability; halve a delay (down to 1 ms).
//
// The stopping rule, which lets a flaky failure shrink too: with f = gone_fraction, n is the number
// of runs without the failure that bound its rate below f x r0 at 95% one-sided (1 - 0.05^(1/n),
// stats.h): n = runs_to_claim(0, f x r0), 5 for a failure of every run and 19 for one of 30% with
// the default f = 1/2; k = ceil(f x r0 x n), at least 1. A candidate is run with seeds S, S+1, ...
// (S: the run's seed, so a failure the seed decides shows at once) and *reproduces* as soon as k
// of its runs show the same failure (outcome, phase, signature); it is *gone* as soon as the runs
// left of n can no longer bring k. So a candidate that no longer fails at all is called gone with
// at most 5% error after n runs, and one that keeps the rate near r0 is kept, usually in far fewer
// runs; lowering a probability is kept only while the rate stays at about f x r0 or more, so the
// minimal spec does not trade the failure's rate for a smaller number. The minimal spec is then
// run `confirm_runs` times from S again, and its rate given with its Wilson interval.
//
//   harness::shrink_options o;
//   o.base = the run's variant; o.faults = record.faults; o.seed = record.seed;
//   o.target = record;                 // outcome, phase and signature to keep
//   o.work_dir = "OUT/shrink/RUN";     // shrink.json and the runs' scratch folder
//   auto r = harness::run_shrink(o);   // r->minimal, r->rate, r->steps, r->runs_spent
//
// OUT/shrink/RUN/shrink.json is rewritten after every step (so an interrupted shrink leaves its
// best spec), never anything of the campaign the run came from.
//
// Thread safety: run_shrink blocks; one at a time per work_dir.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "harness/campaign/campaign.h"
#include "harness/detail/defaults.h"
#include "harness/results/results.h"
#include "harness/results/stats.h"
#include "harness/results/triage_records.h"

namespace faultline::harness {

/// One candidate tried: its spec, what it changed ("removed item exit/start", "halved the
/// probability of exit/end term 1"), whether it was kept, and its runs and hits.
using shrink_step = shrink_step_record;

/// How to shrink.
struct shrink_options {
  variant base;                     ///< the run's variant; its faults are replaced by each candidate
  std::string faults;               ///< the spec to shrink (the run's)
  std::uint64_t seed = 0;           ///< the run's seed
  run_record target;                ///< the failure to keep: its outcome, phase and signature
  std::filesystem::path work_dir;   ///< shrink.json, and samples/: its runs (a scratch campaign, replaced by each sample)
  campaign_options run_settings;    ///< grace, stacks, crash capture, log limit, env, cancel
  std::uint64_t confirm_runs = default_shrink_confirm_runs;
  double gone_fraction = default_shrink_gone_fraction;
  std::uint64_t max_runs = default_shrink_max_runs;               ///< budget in runs
  std::chrono::milliseconds budget = default_shrink_budget;       ///< budget in time
  std::function<void(const shrink_step&)> on_step;                ///< progress (may be empty)
};

/// What the shrink found.
struct shrink_result {
  std::string original, minimal;
  std::uint64_t original_runs = 0, original_hits = 0;  ///< the replay of the original spec
  std::uint64_t runs_per_candidate = 0;                 ///< n of the stopping rule
  std::uint64_t hits_to_keep = 0;                       ///< k of the stopping rule
  std::vector<shrink_step> steps;
  std::uint64_t confirm_runs = 0, confirm_hits = 0;     ///< the minimal spec's measurement (0 runs: not measured)
  rate_estimate rate;                                   ///< of the minimal spec
  std::uint64_t repro_seed = 0;                         ///< a seed at which the minimal spec reproduced
  std::uint64_t runs_spent = 0;
  std::string stopped = "done";                         ///< done, interrupted, budget
  bool reproduced = true;                               ///< false: the original did not reproduce
};

/// Whether `r` shows the same failure as `target`: outcome, phase and signature equal.
bool same_failure(const run_record& target, const run_record& r);

/// The candidates one pass tries from `s`, in order, with what each changed.
std::vector<std::pair<std::string, std::string>> shrink_candidates(const std::string& spec);

/// Shrinks. Errors: invalid_argument for a spec that does not parse or a target that did not
/// fail; run_campaign's errors; io_error when shrink.json cannot be written. A failure that does
/// not reproduce is no error: reproduced is false and nothing was shrunk.
core::result<shrink_result> run_shrink(const shrink_options& o);

/// shrink.json (reports/ reads it back: triage_records.h).
shrink_record to_record(const shrink_result& r, const run_record& target);

}  // namespace faultline::harness
