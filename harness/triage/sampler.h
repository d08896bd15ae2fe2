// Runs one variant a number of times and counts the runs that show a failure of interest: what
// the shrink and the bisect measure a rate with. Every run is a campaign's (campaign.h), so each
// is run_once's, classified and signed as `run` and `exec` classify and sign theirs; the campaign
// writes into a scratch folder of the caller's (replaced on every call), never into a campaign of
// the user's.
//
//   harness::sampler s(base, "OUT/shrink/RUN/runs");   // base: grace, crash capture, env, cancel
//   auto got = s.sample(v, 42, 20, is_same_failure, /*enough_hits=*/3);
//   // got->runs: runs performed (seeds 42, 43, ...), got->hits: those is_same_failure took;
//   // it stopped at the 3rd hit, or once the runs left could no longer bring 3
//
// Thread safety: one sample at a time per sampler.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>

#include "core/status.h"
#include "harness/campaign/campaign.h"
#include "harness/results/results.h"

namespace faultline::harness {

/// What a sample of runs showed.
struct sample_result {
  std::uint64_t runs = 0;               ///< runs performed
  std::uint64_t hits = 0;               ///< runs the predicate took
  std::optional<run_record> first_hit;  ///< the first of them (lowest seed)
  bool interrupted = false;             ///< cancelled before the runs were done
};

/// Runs variants into one scratch folder with the settings of a campaign.
class sampler {
 public:
  /// `base`: the options every sample's campaign starts from (grace, stacks, crash capture, log
  /// limit, env, cancel); its variants, repeat, seed, out_dir and until_fail are the sampler's.
  sampler(campaign_options base, std::filesystem::path scratch);

  /// Runs `v` up to `runs` times with seeds first_seed, first_seed + 1, ...; with `enough_hits`
  /// > 0, stops as soon as `hit` has taken that many runs, or as soon as the runs left could no
  /// longer bring it there (a failure `hit` does not take stops nothing).
  /// Errors: run_campaign's (the scratch folder cannot be written, ...).
  core::result<sample_result> sample(const variant& v, std::uint64_t first_seed, std::uint64_t runs,
                                     const std::function<bool(const run_record&)>& hit, std::uint64_t enough_hits = 0);

  /// Runs performed by this sampler so far.
  std::uint64_t runs_spent() const { return spent_; }

 private:
  campaign_options base_;
  std::filesystem::path scratch_;
  std::uint64_t spent_ = 0;
};

}  // namespace faultline::harness
