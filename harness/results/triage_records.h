// What `faultline shrink` and `faultline bisect` leave behind (harness/triage/), as files the
// reports read back: OUT/shrink/RUN/shrink.json (a shrink's steps) and OUT/bisect.json (a
// bisect's table). The triage room writes them through to_json, reports/ reads them through
// find_triage_records, so the format is defined once, here.
//
//   auto found = harness::find_triage_records("faultline-out");   // its shrinks, its bisect
//   for (const auto& s : found->shrinks) std::cout << s.run_id << ": " << s.minimal << "\n";
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace faultline::harness {

/// One candidate spec a shrink tried.
struct shrink_step_record {
  std::string spec, change;
  bool reproduced = false;  ///< kept
  std::uint64_t runs = 0, hits = 0, first_seed = 0;
};

/// shrink.json.
struct shrink_record {
  std::string run_id, name, outcome, phase, signature;  ///< the run shrunk and its failure
  std::uint64_t seed = 0;
  std::string original, minimal;
  bool reproduced = true;                                 ///< the original failure reproduced
  std::uint64_t original_runs = 0, original_hits = 0;
  std::uint64_t runs_per_candidate = 0, hits_to_keep = 0; ///< n and k of the stopping rule
  std::vector<shrink_step_record> steps;
  std::uint64_t confirm_runs = 0, confirm_hits = 0;       ///< the minimal spec's measurement
  double rate = 0, rate_lower95 = 0, rate_upper95 = 1;
  std::uint64_t repro_seed = 0, runs_spent = 0;
  std::string stopped = "done";                           ///< done, interrupted, budget
};

/// One commit a bisect measured.
struct bisect_step_record {
  std::string commit, subject, role, verdict, why;  ///< role: good, bad, step; verdict: good, bad, skip, undecided
  std::uint64_t runs = 0, failures = 0;
  double p_like_bad = 1, p_like_good = 1;
};

/// bisect.json.
struct bisect_record {
  std::string good, bad;
  double alpha = 0;
  std::uint64_t runs = 0, batch = 0, seed = 0, commits = 0;
  std::optional<std::string> signature;
  std::vector<bisect_step_record> steps;
  std::optional<std::string> first_bad;
  std::vector<std::string> undecided_range;
  std::string problem;
  bool interrupted = false;
};

void to_json(nlohmann::json& j, const shrink_record& r);
void from_json(const nlohmann::json& j, shrink_record& r);
void to_json(nlohmann::json& j, const bisect_record& r);
void from_json(const nlohmann::json& j, bisect_record& r);

/// What a folder holds of shrinks and bisects.
struct triage_records {
  std::vector<shrink_record> shrinks;  ///< DIR/shrink/*/shrink.json, by run id
  std::optional<bisect_record> bisect; ///< DIR/bisect.json
};

/// The shrinks and the bisect recorded in `dir` (none: empty). Errors: corrupt naming a file
/// that is not one of them.
core::result<triage_records> find_triage_records(const std::filesystem::path& dir);

}  // namespace faultline::harness
