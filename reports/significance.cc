#include "reports/significance.h"

#include <algorithm>

namespace faultline::reports {
namespace {

// The tail of the hypergeometric distribution of X, the failures among current's runs given
// the total failures: P(X >= x) (upper) or P(X <= x). The probabilities are computed as weights
// relative to the mode's, walking out from the mode with the ratio of neighbouring terms, so
// that nothing underflows near the mode however large the counts, and the normalising constant
// (a ratio of huge binomial coefficients) is the sum of the weights themselves.
double hypergeometric_tail(proportion baseline, proportion current, bool upper) {
  baseline.failures = std::min(baseline.failures, baseline.runs);
  current.failures = std::min(current.failures, current.runs);
  if (baseline.runs == 0 || current.runs == 0) return 1.0;
  const double N = static_cast<double>(baseline.runs) + static_cast<double>(current.runs);
  const double K = static_cast<double>(baseline.failures) + static_cast<double>(current.failures);
  const double n = static_cast<double>(current.runs);
  const double x = static_cast<double>(current.failures);
  // X ranges over [lo, hi].
  const double lo = std::max(0.0, n - (N - K));
  const double hi = std::min(K, n);
  if (upper ? x <= lo : x >= hi) return 1.0;

  double mode = static_cast<double>(static_cast<std::uint64_t>((n + 1) * (K + 1) / (N + 2)));
  mode = std::clamp(mode, lo, hi);
  auto in_tail = [&](double k) { return upper ? k >= x : k <= x; };
  // Terms this small next to the mode's 1 cannot move the sum, and they only shrink further out.
  constexpr double negligible = 1e-300;

  double total = 1.0;
  double tail = in_tail(mode) ? 1.0 : 0.0;
  double w = 1.0;
  for (double k = mode; k < hi; ++k) {  // w(k) -> w(k + 1)
    w *= (K - k) * (n - k) / ((k + 1) * (N - K - n + k + 1));
    total += w;
    if (in_tail(k + 1)) tail += w;
    if (w < negligible) break;
  }
  w = 1.0;
  for (double k = mode; k > lo; --k) {  // w(k) -> w(k - 1)
    w *= k * (N - K - n + k) / ((K - k + 1) * (n - k + 1));
    total += w;
    if (in_tail(k - 1)) tail += w;
    if (w < negligible) break;
  }
  return std::clamp(tail / total, 0.0, 1.0);
}

}  // namespace

double fisher_greater(proportion baseline, proportion current) noexcept {
  return hypergeometric_tail(baseline, current, true);
}

double fisher_less(proportion baseline, proportion current) noexcept {
  return hypergeometric_tail(baseline, current, false);
}

}  // namespace faultline::reports
