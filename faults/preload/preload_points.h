// What the preload's fault points share (preload.cc defines it): the record of items reached,
// the generator their probabilities draw from, and the actions every agent point takes alike.
// Private to libfaultline_agent.so.
#pragma once

#include <cstdint>

#include "faults/preload/detail/points.h"

namespace faultline::agent::preload {

/// Appends the item's pattern to points.PID (protocol.h): the harness reports items that no run
/// reached. One write(2); does nothing where no run directory or no enabled point opened it.
void record_reached(const char* pattern) noexcept;

/// 64 random bits from the agent points' generator (seeded from FAULTLINE_SEED). Thread-safe.
std::uint64_t draw() noexcept;

/// Acts on a term that fired at the point `name`: delay sleeps, abort and kill end the process,
/// print says so on stderr. fail and teardown are the caller's (they mean something only to the
/// call the point stands before); off does nothing.
void act(const detail::point_term& t, const char* name) noexcept;

}  // namespace faultline::agent::preload
