// scenario_variant: a scenario as the variant `run`, `verify` and a soak all run. The goal: the
// scenario binary's `run NAME` in the run directory, with the scenario's slots and what the
// caller gives (name, faults, timeout, environment).
#include "harness/campaign/scenario_variant.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace faultline::harness {
namespace {

TEST(scenario_variant, runs_the_scenario_in_its_run_directory_with_its_slots) {
  scenario_info sc;
  sc.name = "exit/static-pool";
  sc.slots = 3;
  const variant v = scenario_variant(sc, "exit/static-pool@bug/x", "bug/x=1", std::chrono::seconds(7), {"K=V"}, "/bin/scen");
  EXPECT_EQ(v.name, "exit/static-pool@bug/x");
  EXPECT_EQ(v.argv, (std::vector<std::string>{"/bin/scen", "run", "exit/static-pool"}));
  EXPECT_EQ(v.faults, "bug/x=1");
  EXPECT_EQ(v.timeout, std::chrono::seconds(7));
  EXPECT_EQ(v.env, (std::vector<std::string>{"K=V"}));
  EXPECT_TRUE(v.in_run_dir);
  EXPECT_FALSE(v.gtest_output);
  EXPECT_EQ(v.slots, 3u);
}

TEST(scenario_variant, runs_the_scenario_binary_by_default) {
  scenario_info sc;
  sc.name = "exit/static-pool";
  EXPECT_EQ(scenario_variant(sc, sc.name, "", sc.timeout).argv.front(), scenario_binary().string());
}

}  // namespace
}  // namespace faultline::harness
