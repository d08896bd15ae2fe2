// The scenario catalog as the harness reads it (harness/campaign/scenario_catalog.h): the `list --json`
// contract parsed, bad catalogs refused with the scenario named, and how command-line patterns
// select scenarios. Method: catalogs written inline, selections checked by name and order.
#include "harness/campaign/scenario_catalog.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace harness = faultline::harness;

const char* const catalog_json = R"json([
  {"name": "exit/static-pool", "timeout_ms": 20000,
   "bug_points": [{"point": "bug/alloc/no-exit-guard", "faults": "bug/alloc/no-exit-guard=print", "detect_rate": 0.95}],
   "fault_space": ["sim/allocate=1..30%delay(1us..2ms)"]},
  {"name": "exit/early-reset", "timeout_ms": 20000, "slots": 3, "bug_points": []},
  {"name": "registry/concurrent-unregister", "timeout_ms": 20000, "bug_points": []}
])json";

std::vector<std::string> names(const std::vector<harness::scenario_info>& v) {
  std::vector<std::string> out;
  for (const auto& s : v) out.push_back(s.name);
  return out;
}

TEST(scenario_catalog, parses_bug_points_and_fault_spaces) {
  auto c = harness::parse_catalog(catalog_json);
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0].bug_points.at(0).detect_rate, 0.95);
  EXPECT_EQ((*c)[0].fault_space, std::vector<std::string>{"sim/allocate=1..30%delay(1us..2ms)"});
  EXPECT_TRUE((*c)[1].fault_space.empty()) << "a catalog without fault spaces (an older binary) still reads";
}

TEST(scenario_catalog, slots_default_to_one_and_a_bad_count_is_refused) {
  auto c = harness::parse_catalog(catalog_json);
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ((*c)[0].slots, 1u);
  EXPECT_EQ((*c)[1].slots, 3u);
  EXPECT_EQ(harness::to_json(*c)[1]["slots"], 3);
  for (const char* bad : {R"([{"name": "ipc/x", "slots": 0}])", R"([{"name": "ipc/x", "slots": -2}])",
                          R"([{"name": "ipc/x", "slots": 5000}])", R"([{"name": "ipc/x", "slots": "3"}])"}) {
    auto r = harness::parse_catalog(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), faultline::core::errc::corrupt) << bad;
  }
}

TEST(scenario_catalog, cpu_and_device_are_read_and_a_bad_cpu_is_refused) {
  auto c = harness::parse_catalog(R"([{"name": "a/x", "cpu_percent": 25, "device": "sim"}, {"name": "a/y"}])");
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ((*c)[0].cpu_percent, 25u);
  EXPECT_FALSE((*c)[0].slots_are_devices);
  EXPECT_EQ((*c)[1].cpu_percent, 0u);  // undeclared: the scheduler takes its slots
  EXPECT_TRUE((*c)[1].slots_are_devices);  // no device named: treated as a real one
  EXPECT_EQ(harness::to_json(*c)[0]["cpu_percent"], 25);
  EXPECT_EQ(harness::to_json(*c)[0]["device"], "sim");
  for (const char* bad : {R"([{"name": "a/x", "cpu_percent": -1}])", R"([{"name": "a/x", "cpu_percent": 999999}])",
                          R"([{"name": "a/x", "cpu_percent": "25"}])"}) {
    auto r = harness::parse_catalog(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), faultline::core::errc::corrupt) << bad;
  }
}

TEST(scenario_catalog, a_malformed_fault_space_is_refused_naming_the_scenario) {
  auto c = harness::parse_catalog(R"([{"name": "exit/x", "fault_space": ["bug/alloc/no-drain=print"]}])");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code(), faultline::core::errc::corrupt);
  EXPECT_NE(c.error().message().find("exit/x"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("bug points"), std::string::npos) << c.error().message();
}

TEST(scenario_catalog, selects_names_wildcards_and_whole_families_in_catalog_order_once) {
  auto c = harness::parse_catalog(catalog_json);
  ASSERT_TRUE(c.has_value());
  auto by_wildcard = harness::select(*c, {"exit/*"});
  ASSERT_TRUE(by_wildcard.has_value());
  EXPECT_EQ(names(*by_wildcard), (std::vector<std::string>{"exit/static-pool", "exit/early-reset"}));
  for (const char* family : {"exit", "exit/"}) {
    auto f = harness::select(*c, {family});
    ASSERT_TRUE(f.has_value()) << family << ": " << f.error().to_string();
    EXPECT_EQ(names(*f), names(*by_wildcard)) << family;
  }
  auto mixed = harness::select(*c, {"registry/concurrent-unregister", "exit/early-reset", "exit/*"});
  ASSERT_TRUE(mixed.has_value());
  EXPECT_EQ(names(*mixed), (std::vector<std::string>{"exit/static-pool", "exit/early-reset", "registry/concurrent-unregister"}));
  auto fam = harness::select(*c, {"registry/"});
  ASSERT_TRUE(fam.has_value());
  EXPECT_EQ(names(*fam), std::vector<std::string>{"registry/concurrent-unregister"});
}

TEST(scenario_catalog, a_pattern_that_matches_nothing_is_named_in_the_error) {
  auto c = harness::parse_catalog(catalog_json);
  ASSERT_TRUE(c.has_value());
  for (const char* p : {"ipc", "exit/nope", "ex*/zzz"}) {
    auto s = harness::select(*c, {"exit/*", p});
    ASSERT_FALSE(s.has_value()) << p;
    EXPECT_EQ(s.error().code(), faultline::core::errc::not_found);
    EXPECT_NE(s.error().message().find(std::string("'") + p + "'"), std::string::npos) << s.error().message();
  }
}

}  // namespace
