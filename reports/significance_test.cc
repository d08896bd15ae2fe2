// Fisher's exact test, one-sided, against p-values known exactly: the lady tasting tea (Fisher
// 1935: 17/70), and tables whose tails were summed exactly in rational arithmetic (Python's
// math.comb and fractions) when this test was written. Large counts must neither underflow nor
// lose the tail.
#include "reports/significance.h"

#include <gtest/gtest.h>

#include <cmath>

namespace faultline::reports {
namespace {

void expect_close(double got, double want) {
  EXPECT_NEAR(got, want, want * 1e-9 + 1e-15) << "got " << got << ", want " << want;
}

TEST(fisher, lady_tasting_tea) {
  // 3 of 4 cups right against 1 of 4 by chance: P = 17/70.
  expect_close(fisher_greater({1, 4}, {3, 4}), 17.0 / 70.0);
  expect_close(fisher_less({1, 4}, {3, 4}), 69.0 / 70.0);
}

TEST(fisher, exact_tails_of_small_tables) {
  expect_close(fisher_greater({0, 10}, {5, 10}), 252.0 / 15504.0);
  expect_close(fisher_greater({0, 5}, {2, 2}), 1.0 / 21.0);
  expect_close(fisher_greater({0, 1000}, {1, 1000}), 0.5);
  expect_close(fisher_greater({0, 100}, {3, 100}), 0.123115577889);
  expect_close(fisher_less({3, 300}, {0, 20}), 0.823457000059);
}

TEST(fisher, exact_tails_of_regressions_and_improvements) {
  expect_close(fisher_greater({1, 100}, {12, 100}), 0.00126974872793);
  expect_close(fisher_greater({1, 100}, {10, 100}), 0.00482905797176);
  expect_close(fisher_less({1, 100}, {12, 100}), 0.999919497199);
  expect_close(fisher_less({10, 100}, {0, 100}), 0.000771026062718);
  expect_close(fisher_greater({50, 10000}, {80, 10000}), 0.00522114876884);
  expect_close(fisher_less({50, 10000}, {80, 10000}), 0.996919631473);
  expect_close(fisher_greater({20, 20000}, {45, 20000}), 0.00130284317945);
}

TEST(fisher, no_evidence_gives_one) {
  EXPECT_EQ(fisher_greater({0, 0}, {5, 10}), 1.0);
  EXPECT_EQ(fisher_greater({5, 10}, {0, 0}), 1.0);
  EXPECT_EQ(fisher_greater({0, 100}, {0, 100}), 1.0);
  EXPECT_EQ(fisher_less({0, 100}, {0, 100}), 1.0);
  EXPECT_EQ(fisher_greater({10, 100}, {0, 100}), 1.0);  // fewer failures cannot be "greater"
  EXPECT_EQ(fisher_less({2, 2}, {2, 2}), 1.0);
}

TEST(fisher, clamps_failures_to_runs) {
  expect_close(fisher_greater({7, 4}, {3, 4}), fisher_greater({4, 4}, {3, 4}));
}

TEST(fisher, large_counts_stay_finite_and_ordered) {
  // A million runs a side: the terms near the observed value underflow any direct evaluation.
  const double same = fisher_greater({1000, 1'000'000}, {1000, 1'000'000});
  const double worse = fisher_greater({1000, 1'000'000}, {1200, 1'000'000});
  const double far = fisher_greater({1000, 1'000'000}, {5000, 1'000'000});
  EXPECT_TRUE(std::isfinite(same) && std::isfinite(worse) && std::isfinite(far));
  EXPECT_GT(same, 0.4);
  EXPECT_LT(same, 0.6);
  EXPECT_LT(worse, 1e-4);
  EXPECT_GT(worse, 0.0);
  EXPECT_LT(far, 1e-100);
  // P(X >= 1000) + P(X <= 999) = 1 on the same margins (2000 failures in all).
  EXPECT_NEAR(same + fisher_less({1001, 1'000'000}, {999, 1'000'000}), 1.0, 1e-9);
}

}  // namespace
}  // namespace faultline::reports
