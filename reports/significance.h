// Did a failure rate change, beyond what chance explains? Fisher's exact test on the 2x2 table
// (failures, other runs) x (baseline, current), one-sided, as the regression gate asks it.
//
// Fisher's test conditions on the total number of failures; under "the rate did not change" the
// current campaign's share of them is hypergeometric, and the p-value is the probability of a
// share at least as lopsided as the one observed. It is exact at every sample size (no normal
// approximation to fall back from at small counts), and costs at most min(failures, runs) terms.
//
//   auto p = reports::fisher_greater({1, 100}, {12, 100});   // ~0.0012: 12/100 is worse than 1/100
//   auto q = reports::fisher_less({10, 100}, {0, 100});      // ~0.00072: better
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace faultline::reports {

/// Failures out of runs (failures <= runs; larger counts are clamped to runs).
struct proportion {
  std::uint64_t failures = 0;
  std::uint64_t runs = 0;
};

/// One-sided p-value that `current`'s failure rate is greater than `baseline`'s: the
/// probability, with the rates equal and the table's margins fixed, of at least current.failures
/// failures among current's runs. 1 when either side has no runs.
double fisher_greater(proportion baseline, proportion current) noexcept;

/// One-sided p-value that `current`'s failure rate is less than `baseline`'s (at most
/// current.failures failures among current's runs). 1 when either side has no runs.
double fisher_less(proportion baseline, proportion current) noexcept;

}  // namespace faultline::reports
