#include "harness/triage/sampler.h"

#include <utility>

namespace faultline::harness {

sampler::sampler(campaign_options base, std::filesystem::path scratch)
    : base_(std::move(base)), scratch_(std::move(scratch)) {}

// One campaign per stretch of seeds: with enough_hits the campaign stops at any failure
// (until_fail), and the next stretch starts after it while the sample is still undecided.
core::result<sample_result> sampler::sample(const variant& v, std::uint64_t first_seed, std::uint64_t runs,
                                            const std::function<bool(const run_record&)>& hit, std::uint64_t enough_hits) {
  sample_result got;
  const bool stop_at_hit = enough_hits > 0;
  auto decided = [&] { return stop_at_hit && (got.hits >= enough_hits || got.hits + (runs - got.runs) < enough_hits); };
  while (got.runs < runs && !decided()) {
    campaign_options o = base_;
    o.variants = {v};
    // A stretch ends at its first failure (until_fail) or, with none, once the runs left could no
    // longer bring enough hits.
    o.repeat = stop_at_hit ? (runs - got.runs) - (enough_hits - got.hits) + 1 : runs - got.runs;
    o.seed = first_seed + got.runs;
    o.until_fail = stop_at_hit;
    o.jobs = 1;
    o.part = shard{};
    o.out_dir = scratch_;
    // The scratch folder holds the last sample only: cleared here, not replaced with a warning.
    if (auto cleared = clear_recorded_campaign(scratch_); !cleared) return cleared;
    o.resume = false;
    o.replace = false;
    o.progress = nullptr;
    o.out_lock = nullptr;
    auto r = run_campaign(o);
    if (!r) return r.error();
    auto recorded = read_results(scratch_ / "results.jsonl");
    if (!recorded) return recorded.error();
    for (const auto& rec : recorded->records) {
      ++got.runs;
      if (!hit(rec)) continue;
      if (!got.hits++) got.first_hit = rec;
    }
    spent_ += recorded->records.size();
    if (r->interrupted || (base_.cancel && base_.cancel->load())) {
      got.interrupted = true;
      return got;
    }
    if (recorded->records.empty()) break;  // nothing ran: never loop on it
  }
  return got;
}

}  // namespace faultline::harness
