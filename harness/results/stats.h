// Failure-rate statistics for a set of runs: the estimate, its 95% interval, and how many more
// runs it takes to claim a target rate.
//
// The interval is Wilson's score interval (good coverage at the small counts and rates a flaky
// crash produces). With zero failures the upper bound is the exact one-sided bound 1 - 0.05^(1/n)
// (the "rule of three" made exact): 0 failures in 300 runs bounds the rate at 0.99%.
//
//   auto r = harness::failure_rate(3, 50);            // rate 0.06, lower95 ~0.021, upper95 ~0.162
//   auto n = harness::runs_to_claim(0, 0.01);         // 299: 0 failures in 299 runs => rate <= 1%
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

namespace faultline::harness {

/// The two-sided 95% normal quantile used by the Wilson interval.
inline constexpr double z95 = 1.959963984540054;

/// A failure rate and its 95% interval, each in [0, 1].
struct rate_estimate {
  double rate = 0;     ///< failures / runs (0 when there were no runs)
  double lower95 = 0;  ///< Wilson lower bound; 0 with zero failures
  double upper95 = 1;  ///< Wilson upper bound; 1 - 0.05^(1/runs) with zero failures; 1 with no runs
};

/// Estimates the failure rate of `failures` out of `runs` (failures <= runs; a larger count is
/// clamped to runs).
rate_estimate failure_rate(std::uint64_t failures, std::uint64_t runs) noexcept;

/// The smallest total number of runs n such that, if the failures stay at `failures`, the 95%
/// upper bound is at most `target_rate`. Returns nullopt when target_rate is not in (0, 1) or n
/// would exceed 10^12. Runs still needed = max(0, result - runs so far).
std::optional<std::uint64_t> runs_to_claim(std::uint64_t failures, double target_rate) noexcept;

}  // namespace faultline::harness
