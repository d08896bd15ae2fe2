#include "harness/results/stats.h"

#include <algorithm>
#include <cmath>

namespace faultline::harness {

rate_estimate failure_rate(std::uint64_t failures, std::uint64_t runs) noexcept {
  if (runs == 0) return {};
  failures = std::min(failures, runs);
  const double n = static_cast<double>(runs);
  const double p = static_cast<double>(failures) / n;
  if (failures == 0) return {0.0, 0.0, 1.0 - std::pow(0.05, 1.0 / n)};
  const double z2 = z95 * z95;
  const double denom = 1.0 + z2 / n;
  const double center = (p + z2 / (2.0 * n)) / denom;
  const double half = z95 * std::sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom;
  return {p, std::max(0.0, center - half), std::min(1.0, center + half)};
}

std::optional<std::uint64_t> runs_to_claim(std::uint64_t failures, double target_rate) noexcept {
  if (!(target_rate > 0.0 && target_rate < 1.0)) return std::nullopt;
  constexpr std::uint64_t limit = 1'000'000'000'000ULL;
  auto claims = [&](std::uint64_t n) { return failure_rate(failures, n).upper95 <= target_rate; };
  // The upper bound falls as runs grow with the failures fixed, so search for the first n that
  // claims the target: double to bracket it, then bisect.
  std::uint64_t lo = std::max<std::uint64_t>(failures, 1), hi = lo;
  while (!claims(hi)) {
    lo = hi + 1;
    if (hi >= limit) return std::nullopt;
    hi = std::min(limit, hi * 2);
  }
  while (lo < hi) {
    std::uint64_t mid = lo + (hi - lo) / 2;
    if (claims(mid)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

}  // namespace faultline::harness
