// A scenario of the scenario binary (scenario_catalog.h) as a campaign's variant (campaign.h):
// `BIN run SCENARIO`, run in its run directory (its core lands there, one per run, never shared),
// taking the scenario's slots of --jobs. What `run` and `verify` (harness/cli.cc) and a soak
// (soak.cc) run.
//
//   auto v = harness::scenario_variant(sc, sc.name, "", sc.timeout);
//   auto planted = harness::scenario_variant(sc, sc.name + "@" + b.point, b.faults, sc.timeout);
//
// Thread safety: a pure function but for scenario_binary(), the default `bin`, which reads the
// environment.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/campaign/campaign.h"
#include "harness/campaign/scenario_catalog.h"

namespace faultline::harness {

/// The variant `name` of scenario `sc`: `bin run SC` with FAULTLINE_FAULTS `faults` ("" = none),
/// `timeout`, and `env` ("K=V") added to its runs' environment.
variant scenario_variant(const scenario_info& sc, std::string name, std::string faults, std::chrono::milliseconds timeout,
                         std::vector<std::string> env = {}, const std::filesystem::path& bin = scenario_binary());

}  // namespace faultline::harness
