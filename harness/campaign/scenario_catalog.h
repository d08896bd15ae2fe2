// The scenario catalog, as the scenario binary describes it.
//
// Scenarios live in a separate binary (BUILD/bin/faultline-scenarios, beside `faultline`; the
// environment variable FAULTLINE_SCENARIOS overrides the path). Its contract:
//   faultline-scenarios list --json   prints a JSON array of
//       {"name": "exit/static-pool", "description": "...", "timeout_ms": 20000, "slots": 1,  (optional, >= 1)
//        "cpu_percent": 10, "device": "sim",                                            (optional)
//        "bug_points": [{"point": "bug/alloc/no-exit-guard", "faults": "<spec>", "detect_rate": 0.95}],
//        "fault_space": ["sim/stream/op=1..20%delay(10us..2ms)", ...]}     (optional)
//   faultline-scenarios run NAME      runs one scenario in-process, reading FAULTLINE_SEED,
//       FAULTLINE_FAULTS and FAULTLINE_RUN_DIR; exit 0 = pass, exit 1 with
//       "invariant violated: INVARIANT: detail" on stderr = fail.
//
//   auto bin = harness::scenario_binary();
//   auto cat = harness::load_catalog(bin);
//   auto chosen = harness::select(*cat, {"exit/*"});
//
// Thread safety: values and pure functions; load_catalog runs the binary.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "harness/detail/defaults.h"

namespace faultline::harness {

/// A bug point of a scenario: the spec that plants the bug, and how often it must be caught.
struct bug_point {
  std::string point;
  std::string faults;
  double detect_rate = 1.0;
};

/// One scenario of the catalog.
struct scenario_info {
  std::string name;
  std::string description;
  std::chrono::milliseconds timeout{catalog_fallback_timeout};
  /// The share of --jobs one run takes (processes with a device context at once); variant::slots.
  unsigned slots = 1;
  /// The CPU one run keeps busy, in percent (0: undeclared, its slots x 100); variant::cpu_percent.
  unsigned cpu_percent = 0;
  /// Whether its slots are device contexts: false only where the catalog says its device is the
  /// simulated one ("device": "sim"). variant::slots_are_devices.
  bool slots_are_devices = true;
  std::vector<bug_point> bug_points;
  /// The faults a soak draws from (harness/campaign/fault_space.h); empty: the soak varies only seeds.
  std::vector<std::string> fault_space;
};

/// The scenario binary's path: $FAULTLINE_SCENARIOS, else faultline-scenarios beside the
/// running executable.
std::filesystem::path scenario_binary();

/// Parses the `list --json` output. Errors: errc::corrupt naming what is wrong.
core::result<std::vector<scenario_info>> parse_catalog(std::string_view json_text);

/// Runs `binary list --json` and parses it. Errors: not_found when the binary is missing,
/// io_error when it fails, corrupt when its output is not the contract's.
core::result<std::vector<scenario_info>> load_catalog(const std::filesystem::path& binary);

/// The scenarios matching `patterns` (exact names, shell wildcards such as "exit/*", or a family
/// alone: "exit" or "exit/" mean "exit/*"), in catalog order, each once. Errors: not_found naming a pattern that matches nothing.
core::result<std::vector<scenario_info>> select(const std::vector<scenario_info>& catalog,
                                                const std::vector<std::string>& patterns);

/// The catalog as the JSON array of the contract.
nlohmann::json to_json(const std::vector<scenario_info>& catalog);

}  // namespace faultline::harness
