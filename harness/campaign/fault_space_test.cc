// Fault spaces (harness/campaign/fault_space.h): what a soak draws its per-run fault specs from. The goal
// is that a draw is an ordinary, valid spec whose every value lies in its declared range, that
// the same seed always gives the same spec, and that a malformed space is refused with the item
// named, before any run. Method: many seeds, each drawn spec parsed back with the fault engine's
// own parser and its numbers checked against the ranges.
#include "harness/campaign/fault_space.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "faults/spec.h"

namespace {

namespace harness = faultline::harness;
namespace faults = faultline::faults;
using std::chrono::nanoseconds;

const std::vector<std::string> space = {"sim/stream/op=1..20%delay(10us..2ms)", "registry/worker/task=1..3*delay(5ms..5ms)",
                                        "alloc/pool/grow=0.5..2.5%fail(ENOMEM)"};

TEST(fault_space, a_draw_is_a_valid_spec_whose_values_lie_in_their_ranges) {
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    auto spec = harness::draw_faults(space, seed);
    ASSERT_TRUE(spec.has_value()) << spec.error().to_string();
    auto parsed = faults::parse(*spec);
    ASSERT_TRUE(parsed.has_value()) << *spec << ": " << parsed.error().to_string();
    ASSERT_FALSE(parsed->items.empty()) << "seed " << seed << " drew nothing";
    for (const auto& item : parsed->items) {
      ASSERT_EQ(item.terms.size(), 1u) << *spec;
      const auto& t = item.terms.front();
      if (item.point == "sim/stream/op") {
        ASSERT_TRUE(t.probability_ppb.has_value());
        EXPECT_GE(*t.probability_ppb, 10'000'000u) << *spec;
        EXPECT_LE(*t.probability_ppb, 200'000'000u) << *spec;
        EXPECT_GE(t.action.duration, nanoseconds(10'000)) << *spec;
        EXPECT_LE(t.action.duration, nanoseconds(2'000'000)) << *spec;
      } else if (item.point == "registry/worker/task") {
        ASSERT_TRUE(t.count.has_value());
        EXPECT_GE(*t.count, 1u);
        EXPECT_LE(*t.count, 3u);
        EXPECT_EQ(t.action.duration, nanoseconds(5'000'000)) << "a one-value range is that value";
      } else {
        EXPECT_EQ(item.point, "alloc/pool/grow");
        ASSERT_TRUE(t.probability_ppb.has_value());
        EXPECT_GE(*t.probability_ppb, 5'000'000u) << *spec;
        EXPECT_LE(*t.probability_ppb, 25'000'000u) << *spec;
        EXPECT_EQ(t.action.kind, faults::action_kind::fail);
        EXPECT_EQ(t.action.code, ENOMEM);
      }
    }
  }
}

TEST(fault_space, the_same_seed_draws_the_same_spec_and_seeds_differ) {
  std::set<std::string> distinct;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    auto a = harness::draw_faults(space, seed);
    auto b = harness::draw_faults(space, seed);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, *b);
    distinct.insert(*a);
  }
  EXPECT_GT(distinct.size(), 150u) << "draws barely vary with the seed";
}

TEST(fault_space, each_item_is_kept_about_half_the_time_and_durations_are_log_uniform) {
  const std::vector<std::string> one_delay = {"sim/stream/op=delay(10us..2ms)", "sim/free=delay(1us..1us)"};
  int kept = 0, below_geometric_mean = 0;
  const int draws = 4000;
  for (int seed = 0; seed < draws; ++seed) {
    auto spec = harness::draw_faults(one_delay, harness::fault_draw_seed(7, static_cast<std::uint64_t>(seed)));
    ASSERT_TRUE(spec.has_value());
    auto parsed = faults::parse(*spec);
    ASSERT_TRUE(parsed.has_value());
    for (const auto& item : parsed->items) {
      if (item.point != "sim/stream/op") continue;
      ++kept;
      // sqrt(10us * 2ms) ~ 141us: a log-uniform draw falls below it half the time.
      if (item.terms.front().action.duration < nanoseconds(141'421)) ++below_geometric_mean;
    }
  }
  // Kept with probability 1/2, plus the draws where neither was kept and this one was picked.
  EXPECT_NEAR(static_cast<double>(kept) / draws, 0.625, 0.04);
  EXPECT_NEAR(static_cast<double>(below_geometric_mean) / kept, 0.5, 0.06);
}

TEST(fault_space, an_empty_space_draws_no_faults) {
  auto spec = harness::draw_faults({}, 1);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(*spec, "");
}

TEST(fault_space, malformed_spaces_are_refused_naming_the_item) {
  struct bad_case {
    std::string item;
    std::string says;
  };
  const std::vector<bad_case> cases = {
      {"bug/alloc/no-drain=print", "bug points are not part of a fault space"},
      {"sim/*=delay(1ms)", "not wildcards"},
      {"sim/free=20..1%delay(1ms)", "descending"},
      {"sim/free=delay(5ms..1ms)", "descending"},
      {"sim/free=delay(1ms..5)", "needs a unit"},
      {"sim/free=delay(1ms..5parsec)", "needs a unit"},
      {"sim/free=delay(1..)", "a number after '..'"},
      {"sim/free=fial", "expected an action"},
      {"sim/free=150..200%fail", "sim/free=150..200%fail"},
  };
  for (const auto& c : cases) {
    auto s = harness::check_fault_space({c.item});
    ASSERT_FALSE(s.is_ok()) << c.item << " was accepted";
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.item << ": " << s.message();
    EXPECT_NE(s.message().find(c.item), std::string::npos) << "the message does not name the item: " << s.message();
    EXPECT_FALSE(harness::draw_faults({c.item}, 1).has_value()) << c.item;
  }
  auto twice = harness::check_fault_space({"sim/free=delay(1ms)", "sim/free=fail"});
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.message().find("twice"), std::string::npos) << twice.message();
}

}  // namespace
