// Per-variant summaries of a campaign's records: outcome counts, failure rate and interval,
// failure signatures grouped with their first occurrence.
//
//   auto sums = harness::summarise(result.records, {"exit/static-pool"});
//   nlohmann::json j = harness::to_json(sums[0]);   // the --json summary's common fields
//
// A failure is any run whose outcome is not pass.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/results.h"
#include "harness/stats.h"

namespace faultline::harness {

/// The runs that share one failure signature.
struct signature_group {
  std::string signature;
  outcome result = outcome::fail;
  phase when = phase::none;
  std::uint64_t count = 0;
  std::string first_run;           ///< run_id of the earliest (lowest run number) occurrence
  std::string first_log;           ///< its log, relative to the output directory
};

/// One variant's runs, summarised.
struct variant_summary {
  std::string name;
  std::uint64_t runs = 0;
  std::uint64_t failures = 0;
  std::map<outcome, std::uint64_t> outcomes;  ///< every outcome present, zero counts included
  rate_estimate rate;
  std::vector<signature_group> signatures;    ///< most frequent first
  std::optional<run_record> first_failure;    ///< lowest run number among failures
};

/// Summaries of `names` (in that order; a name without records gets an empty summary).
std::vector<variant_summary> summarise(const std::vector<run_record>& records, const std::vector<std::string>& names);

/// {"name","runs","outcomes":{...},"failures","failure_rate","failure_rate_lower95",
///  "failure_rate_upper95","signatures":[{"signature","count","phase","outcome","first_run","log"}]}
nlohmann::json to_json(const variant_summary& s);

}  // namespace faultline::harness
