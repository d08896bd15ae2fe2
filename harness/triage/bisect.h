// The bisect: which commit between a good and a bad revision made a failure rate go up.
//
// In a git checkout, each commit tested gets a worktree of its own (`git worktree add --detach`
// into a temporary folder outside the checkout, removed after), is built there with the build
// command (a build that fails skips the commit), its program is checked as `faultline exec` checks
// one (an endpoint where it cannot be started is an error naming the revision; a commit between
// them is skipped), and the command is run there as `faultline exec`
// runs it (the caller builds the variant: sampler.h, so run_once), with seeds S, S+1, ... at
// every commit. A run counts when it fails (or, with a signature, when its signature holds it).
//
// The endpoints are run `runs` times each and must differ: the bad one's rate greater than the
// good one's by the gate's one-sided Fisher exact test at alpha (reports/significance.h). A
// commit between them is run in batches of `batch`, up to `runs`, with a look after each batch:
//   like bad:  fisher_greater(good, commit) < alpha / looks
//   like good: fisher_greater(commit, bad)  < alpha / looks
// (looks = ceil(runs / batch); the Bonferroni split over the looks bounds each decision's error
// by alpha). A commit still neither after `runs` runs is undecided, and the search treats it as it
// treats a skipped one: the first bad commit is then only known to be one of a range, which the
// result names.
//
// The user's working tree is never touched: only `git worktree add/remove/prune` and read-only
// git commands run in the checkout.
//
// Thread safety: run_bisect blocks.
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
#include "harness/results/triage_records.h"

namespace faultline::harness {

/// One commit tested: its hash and subject, its role (good, bad: the endpoints; step), its
/// verdict (good, bad, skip: did not build, undecided), runs and failures, the two one-sided
/// p-values at the last look, and why it was skipped or left undecided.
using bisect_step = bisect_step_record;

/// How to bisect.
struct bisect_options {
  std::filesystem::path repo = ".";  ///< the git checkout
  std::string good, bad;             ///< revisions
  std::string build;                 ///< shell command run in each worktree ("" none)
  /// The command's program (its argv[0]), checked at each commit once built: a name with a '/'
  /// that is relative is looked up in the worktree, a bare name in PATH ("" no check).
  std::string program;
  /// The variant that runs the command in a worktree (the command's floor builds it as exec does).
  std::function<variant(const std::filesystem::path& worktree)> make_variant;
  campaign_options run_settings;     ///< grace, stacks, crash capture, log limit, env, cancel
  std::filesystem::path out_dir = default_bisect_out_dir;  ///< bisect.json, and samples/: its runs (a scratch campaign)
  std::optional<std::string> signature;  ///< count only failures whose signature contains it
  std::uint64_t seed = 0;
  std::uint64_t runs = default_bisect_runs;
  std::uint64_t batch = default_bisect_batch;
  double alpha = default_bisect_alpha;
  std::chrono::milliseconds build_timeout = default_bisect_build_timeout;
  std::function<void(const bisect_step&)> on_step;  ///< progress (may be empty)
};

/// What the bisect found.
struct bisect_result {
  std::vector<bisect_step> steps;       ///< the endpoints first, then each commit in the order tested
  std::optional<std::string> first_bad; ///< the first bad commit, when it is decided
  std::vector<std::string> undecided_range;  ///< else: the commits it is one of (oldest first)
  std::string problem;                  ///< why it could not start (the endpoints do not differ, ...)
  bool interrupted = false;
  std::uint64_t commits = 0;            ///< commits between good (excluded) and bad (included)
};

/// Checks the revisions before anything runs: both name commits of `repo`, good an ancestor of
/// bad. Returns the full hashes. Errors: invalid_argument naming what is wrong.
core::result<std::pair<std::string, std::string>> resolve_revisions(const std::filesystem::path& repo, const std::string& good,
                                                                   const std::string& bad);

/// Bisects. The output folder is held (out_lock.h) while it runs, as a campaign holds its own, and
/// must be a folder of its own: one holding a campaign, a soak or an earlier bisect is refused.
/// Errors: invalid_argument as resolve_revisions, and when `program` cannot be started at the good
/// or the bad revision (naming the revision and why; before any run); already_exists for such a
/// folder ("OUT holds a bisect (OUT/bisect.json)"); busy when another campaign or bisect holds it;
/// io_error when a worktree cannot be made; run_campaign's errors. Endpoints that do not differ are
/// no error: `problem` says so.
core::result<bisect_result> run_bisect(const bisect_options& o);

/// bisect.json (reports/ reads it back: triage_records.h).
bisect_record to_record(const bisect_result& r, const bisect_options& o);

}  // namespace faultline::harness
