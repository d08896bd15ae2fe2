// The scenario registry and the catalog's consistency: names are well formed and unique, every
// bug point a scenario declares exists in the faults catalog, and every variant's fault spec is
// one the engine accepts (a typo there would make `verify` pass a bug variant that never ran).
#include "scenarios/scenario.h"

#include <gtest/gtest.h>

#include <set>

#include "faults/bug_points.h"
#include "faults/spec.h"

namespace faultline::scenarios {
namespace {

scenario named(std::string name) {
  scenario s;
  s.name = std::move(name);
  s.run = [](context&) {};
  return s;
}

TEST(registry, rejects_names_that_are_not_family_slash_name) {
  registry r;
  for (const char* bad : {"", "exit", "/x", "exit/", "Exit/Upper", "exit/has space"}) {
    auto st = r.add(named(bad));
    EXPECT_EQ(st.code(), core::errc::invalid_argument) << bad;
  }
  EXPECT_TRUE(r.all().empty());
}

TEST(registry, rejects_a_duplicate_and_a_missing_body) {
  registry r;
  ASSERT_TRUE(r.add(named("exit/a")));
  EXPECT_EQ(r.add(named("exit/a")).code(), core::errc::already_exists);
  scenario no_body;
  no_body.name = "exit/b";
  EXPECT_EQ(r.add(no_body).code(), core::errc::invalid_argument);
  ASSERT_EQ(r.all().size(), 1u);
  EXPECT_NE(r.find("exit/a"), nullptr);
  EXPECT_EQ(r.find("exit/b"), nullptr);
}

TEST(rng, same_seed_same_sequence_and_between_stays_in_bounds) {
  rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    auto x = a.between(256, 1024);
    EXPECT_EQ(x, b.between(256, 1024));
    EXPECT_GE(x, 256u);
    EXPECT_LE(x, 1024u);
    differs |= x != c.between(256, 1024);
  }
  EXPECT_TRUE(differs);
  rng d(1);
  EXPECT_EQ(d.between(5, 5), 5u);
}

TEST(catalog, every_bug_variant_names_a_known_bug_point_with_a_valid_spec) {
  const auto& all = catalog().all();
  ASSERT_FALSE(all.empty());
  std::set<std::string> names;
  for (const auto& s : all) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_GT(s.timeout_ms, 0) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_FALSE(s.bug_points.empty()) << s.name << " declares no bug point: nothing shows it can fail";
    for (const auto& b : s.bug_points) {
      EXPECT_NE(faults::find_bug_point(b.point), nullptr) << s.name << ": " << b.point;
      auto parsed = faults::parse(b.faults);
      EXPECT_TRUE(parsed.has_value()) << s.name << ": " << parsed.error().to_string();
      EXPECT_NE(b.faults.find(b.point), std::string::npos) << s.name << ": spec does not enable " << b.point;
      EXPECT_GT(b.detect_rate, 0.0);
      EXPECT_LE(b.detect_rate, 1.0);
    }
  }
}

// A soak draws each run's faults from the scenario's space (harness/campaign/fault_space.h, which checks
// the range syntax when it loads the catalog); here: every scenario has one, naming points the
// code has (no bug point, no wildcard), each once.
TEST(catalog, every_scenario_declares_a_fault_space_of_plain_points) {
  for (const auto& s : catalog().all()) {
    EXPECT_FALSE(s.fault_space.empty()) << s.name << " declares no fault space: a soak varies only its seed";
    std::set<std::string> points;
    for (const auto& item : s.fault_space) {
      const std::string point = item.substr(0, item.find('='));
      EXPECT_TRUE(points.insert(point).second) << s.name << " names " << point << " twice";
      EXPECT_NE(point.rfind("bug/", 0), 0u) << s.name << ": " << item;
      EXPECT_EQ(point.find('*'), std::string::npos) << s.name << ": " << item;
      EXPECT_NE(item.find('='), std::string::npos) << s.name << ": " << item;
    }
  }
}

}  // namespace
}  // namespace faultline::scenarios
