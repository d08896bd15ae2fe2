// Statistics: the Wilson interval, the exact zero-failure bound and the runs needed to claim a
// target rate, against values computed independently (Python, double precision).
#include "harness/results/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace faultline::harness {
namespace {

TEST(failure_rate, wilson_interval_for_three_in_fifty) {
  auto r = failure_rate(3, 50);
  EXPECT_DOUBLE_EQ(r.rate, 0.06);
  EXPECT_NEAR(r.lower95, 0.02061497034897397, 1e-12);
  EXPECT_NEAR(r.upper95, 0.16217091688838173, 1e-12);
}

TEST(failure_rate, wilson_interval_is_symmetric_around_one_half) {
  auto r = failure_rate(5, 10);
  EXPECT_DOUBLE_EQ(r.rate, 0.5);
  EXPECT_NEAR(r.lower95, 0.236593090512564, 1e-12);
  EXPECT_NEAR(r.upper95, 0.7634069094874361, 1e-12);
  EXPECT_NEAR(r.lower95 + r.upper95, 1.0, 1e-12);
}

TEST(failure_rate, zero_failures_use_the_exact_one_sided_bound) {
  auto r = failure_rate(0, 299);
  EXPECT_EQ(r.rate, 0.0);
  EXPECT_EQ(r.lower95, 0.0);
  EXPECT_NEAR(r.upper95, 1.0 - std::pow(0.05, 1.0 / 299), 1e-15);
  EXPECT_NEAR(r.upper95, 0.009969146792899286, 1e-15);
  EXPECT_LT(r.upper95, 0.01);  // 0 of 299 claims "at most 1%"
  EXPECT_GT(failure_rate(0, 298).upper95, 0.01);
}

TEST(failure_rate, all_failing_runs_reach_an_upper_bound_of_one) {
  auto r = failure_rate(50, 50);
  EXPECT_DOUBLE_EQ(r.rate, 1.0);
  EXPECT_NEAR(r.lower95, 0.9286524008666414, 1e-12);
  EXPECT_DOUBLE_EQ(r.upper95, 1.0);
}

TEST(failure_rate, no_runs_say_nothing) {
  auto r = failure_rate(0, 0);
  EXPECT_EQ(r.rate, 0.0);
  EXPECT_EQ(r.lower95, 0.0);
  EXPECT_EQ(r.upper95, 1.0);
}

TEST(failure_rate, more_failures_than_runs_are_clamped) {
  auto r = failure_rate(7, 5);
  EXPECT_DOUBLE_EQ(r.rate, 1.0);
}

TEST(runs_to_claim, zero_failures_match_the_closed_form) {
  // n >= ln 0.05 / ln(1 - p): 298.07 -> 299 for 1%.
  EXPECT_EQ(runs_to_claim(0, 0.01), 299u);
  EXPECT_EQ(runs_to_claim(0, 0.05), 59u);
  EXPECT_EQ(runs_to_claim(0, 0.001), 2995u);
}

TEST(runs_to_claim, failures_raise_the_runs_needed) {
  EXPECT_EQ(runs_to_claim(1, 0.01), 563u);
  EXPECT_EQ(runs_to_claim(3, 0.05), 173u);
  // The answer is the first n that claims the target: n - 1 does not.
  EXPECT_LE(failure_rate(1, 563).upper95, 0.01);
  EXPECT_GT(failure_rate(1, 562).upper95, 0.01);
}

TEST(runs_to_claim, rejects_targets_outside_the_open_unit_interval) {
  EXPECT_FALSE(runs_to_claim(0, 0.0).has_value());
  EXPECT_FALSE(runs_to_claim(0, 1.0).has_value());
  EXPECT_FALSE(runs_to_claim(0, -0.5).has_value());
  EXPECT_FALSE(runs_to_claim(0, std::nan("")).has_value());
}

}  // namespace
}  // namespace faultline::harness
