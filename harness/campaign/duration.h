// Durations as the command line spells them: "500ms", "10s", "2m", "1.5h".
//
// The harness takes every timeout and grace period in this form. A number without a unit is
// rejected rather than guessed (is "30" seconds or milliseconds?).
//
//   core::result<std::chrono::milliseconds> t = harness::parse_duration("2m");  // 120000 ms
//   std::string s = harness::format_duration(std::chrono::milliseconds(1500));    // "1.5s"
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/status.h"

namespace faultline::harness {

/// Parses a non-negative decimal number followed by one of the units ms, s, m, h.
/// Errors: errc::invalid_argument naming the problem (missing unit, unknown unit, negative,
/// not a number, larger than a year).
core::result<std::chrono::milliseconds> parse_duration(std::string_view text);

/// Formats a duration compactly in the unit that reads best: "250ms", "1.5s", "2m", "1h30m".
/// The result parses back to the same value when it is a whole number of ms below a minute or a
/// whole number of seconds above.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace faultline::harness
