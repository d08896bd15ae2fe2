// A scenario's fault space: the faults its clean implementation must survive, from which a soak
// draws a different fault spec for every run.
//
// A space is a list of spec items (faults/spec.h) in which any number may be a range LO..HI:
//   "sim/stream/op=1..20%delay(10us..2ms)"     percentage 1-20, delay 10 µs-2 ms
//   "registry/worker/task=1..3*delay(1ms..5ms)"
// A draw keeps each item with probability 1/2 (at least one), and replaces every range with a
// value in it: percentages and counts uniformly, durations log-uniformly (a 10 µs-2 ms delay is as
// often under 150 µs as over it). The result is an ordinary spec. Bug points ("bug/...") are
// never part of a space: a soak explores faults a correct implementation tolerates, and planted
// bugs are verify's business.
//
//   auto spec = harness::draw_faults({"sim/stream/op=1..20%delay(10us..2ms)"}, seed);
//   // "sim/stream/op=7%delay(412us)"
//
// The same space and seed give the same spec on every machine (faultline's splitmix64, mapped
// by hand). Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace faultline::harness {

/// Checks a space: every item, with each range at its low and at its high end, is a valid spec
/// item that names no bug point and no wildcard; ranges are ascending and their two ends have
/// the same kind (both durations or both plain numbers). Errors: invalid_argument naming the
/// item and what is wrong.
core::status check_fault_space(const std::vector<std::string>& space);

/// Draws one spec from `space` with `seed` (see above). An empty space gives "". Errors: as
/// check_fault_space for a malformed item.
core::result<std::string> draw_faults(const std::vector<std::string>& space, std::uint64_t seed);

/// The seed of run `run`'s draw in a soak seeded `soak_seed`: independent of the run's own
/// FAULTLINE_SEED, so that the faults and the scenario's choices do not move together.
std::uint64_t fault_draw_seed(std::uint64_t soak_seed, std::uint64_t run) noexcept;

}  // namespace faultline::harness
