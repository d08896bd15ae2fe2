// Per-variant summaries of a campaign's runs: outcome counts, failure rate and interval,
// failure signatures grouped with their first occurrence, and the fault-spec points no run
// reached.
//
// The summary is accumulated one record at a time, in any order (runs finish out of order
// under --jobs), in memory that does not grow with the number of runs: a soak of a million
// runs keeps its counters, one entry per distinct signature and a few records, never the runs.
//
//   harness::summary_builder b({{"exit/static-pool", ""}});
//   b.add(record);                                      // for every run, any order
//   auto sums = b.summaries();
//   nlohmann::json j = harness::to_json(sums[0]);      // the --json summary's common fields
//
// A failure is any run whose outcome is not pass. "First" always means the lowest run number,
// whatever order the records came in, so a summary does not depend on scheduling.
//
// Thread safety: summary_builder is not synchronised (the campaign adds under its lock);
// the free functions are pure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/results/results.h"
#include "harness/results/stats.h"

namespace faultline::harness {

/// The runs that share one failure signature.
struct signature_group {
  std::string signature;
  outcome result = outcome::fail;  ///< of the first occurrence
  phase when = phase::none;        ///< of the first occurrence
  std::uint64_t count = 0;
  std::string first_run;           ///< run_id of the earliest (lowest run number) occurrence
  std::string first_log;           ///< its log, relative to the output directory
  std::uint64_t first_run_number = 0;  ///< its run number
  std::string first_stacks;        ///< its stack dump, relative to the output directory ("" when none)
  std::vector<std::string> first_frames;  ///< its top frames (run_record::frames)
  std::vector<nccl_rank_record> first_ranks;  ///< its ranks, for a distributed run (run_record::ranks)
};

/// One CUDA API called after the runtime's teardown, over a variant's runs.
struct late_cuda_total {
  std::string api;
  std::uint64_t runs = 0;   ///< runs whose processes called it late
  std::uint64_t calls = 0;  ///< calls in all of them
  std::string signature;    ///< of the earliest such run (lowest run number)
  std::uint64_t first_run_number = 0;
};

/// One variant's runs, summarised.
struct variant_summary {
  std::string name;
  std::uint64_t runs = 0;
  std::uint64_t failures = 0;
  std::map<outcome, std::uint64_t> outcomes;  ///< every outcome present, zero counts included
  rate_estimate rate;
  /// Most frequent first; equal counts in the order they first happened.
  std::vector<signature_group> signatures;
  std::optional<run_record> first_failure;    ///< lowest run number among failures
  std::optional<run_record> first_pass;       ///< lowest run number among passes
  std::optional<run_record> first_record;     ///< lowest run number of all
  /// For a variant with a fault spec: the spec's point patterns (item.point, in spec order)
  /// that no run reached. nullopt for a variant without faults.
  std::optional<std::vector<std::string>> points_never_reached;
  /// Each API its runs called after the CUDA runtime's teardown (--late-cuda), by API name.
  std::vector<late_cuda_total> late_cuda;
};

/// What identifies a variant in its records.
struct summary_key {
  std::string name;
  std::string faults;  ///< its fault spec ("" = none): whose points must be reached
};

/// Accumulates variant summaries record by record.
class summary_builder {
 public:
  /// Summaries of `keys`, in that order (a variant without records gets an empty summary).
  explicit summary_builder(std::vector<summary_key> keys);

  /// Counts `r` in the summary of its variant (by name); records of other names are ignored.
  /// Returns false for such a record.
  bool add(const run_record& r);

  /// The summaries so far, in the order of the keys.
  [[nodiscard]] std::vector<variant_summary> summaries() const;

 private:
  struct state {
    summary_key key;
    variant_summary sum;
    std::map<std::string, std::size_t> group_of;  // signature -> index in sum.signatures
    std::map<std::string, std::size_t> late_of;   // late CUDA API -> index in sum.late_cuda
    std::set<std::string> reached;
  };
  std::vector<state> states_;
  std::map<std::string, std::size_t> index_;  // name -> index in states_
};

/// Summaries of `names` over `records` (convenience over summary_builder; the fault spec of a
/// variant is taken from its records).
std::vector<variant_summary> summarise(const std::vector<run_record>& records, const std::vector<std::string>& names);

/// {"name","runs","outcomes":{...},"failures","failure_rate","failure_rate_lower95",
///  "failure_rate_upper95","signatures":[{"signature","count","phase","outcome","first_run","log",
///  "stacks","frames"}]} ("stacks" null and "frames" [] when the first run has none; a hang's
///  signature also has "hint" when its frames are a Python interpreter's own: stack_hints.h)
/// plus "points_never_reached":[...] for a variant with a fault spec ([] when every point of it
/// was reached).
nlohmann::json to_json(const variant_summary& s);

/// The point patterns of `faults` (a fault spec) that are not in `reached`, in spec order.
/// A spec that does not parse has no points.
std::vector<std::string> points_not_reached(const std::string& faults, const std::set<std::string>& reached);

}  // namespace faultline::harness
