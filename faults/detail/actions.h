// How the engine carries out a fired term (private to faultline::faults).
//
// The libfiu callback copies the chosen action into an `action_record` (a flat value, so the copy
// never allocates and outlives a concurrent reconfiguration), and the hook runs it after
// fiu_fail has returned and libfiu's lock is released.
#pragma once

#include <cstdint>

#include "core/points/point.h"
#include "faults/spec.h"

namespace faultline::faults::detail {

/// A flat copy of an `action`.
struct action_record {
  action_kind kind = action_kind::off;
  int code = 1;
  std::int64_t duration_ns = 0;
  std::int64_t timeout_ns = 0;
  int device = 0;
  char rendezvous[max_rendezvous_name_size + 1] = {};
};

/// Flattens `a` (its rendezvous name is at most max_rendezvous_name_size, as parse() checks).
action_record make_record(const action& a) noexcept;

/// Runs `a` for a hit on `point` and says what the point reports. kill and abort do not return.
points::outcome run_action(const char* point, const action_record& a) noexcept;

/// Writes "[faultline:injected] <text>\n" to stderr in one write(2), without allocating.
void log_injected(const char* format, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace faultline::faults::detail
