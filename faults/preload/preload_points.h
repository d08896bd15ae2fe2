// What the preloaded libraries' fault points share (preload_points.cc, linked into each): the
// record of items reached, the generator their probabilities draw from, and the actions every
// agent point takes alike. Private to libfaultline_agent.so and libfaultline_lock_points.so.
#pragma once

#include <cstdint>

#include "faults/preload/detail/points.h"

namespace faultline::agent::preload {

/// Opens points.PID in `run_dir` (null: does nothing), once an enabled point may be reached:
/// reaching the point is then a single write(2). An exit race kills the process microseconds
/// after the point is reached; an open() there as well would lose the record of many runs that
/// did reach it.
void open_points_file(const char* run_dir) noexcept;

/// Seeds the generator from FAULTLINE_SEED's text (decimal or 0x hex; ignored when malformed).
/// Every process of a run draws from a stream of its own, picked at its first draw: the run's first
/// process from the seed itself (a run of one process replays exactly from its seed), every other
/// one (exec'd or forked) from the seed mixed with its place among the run's processes (the
/// agent's process_index(); without a phase table, the seed itself too), so that a point's probability decides in each
/// process apart: with one stream, four identical workers under 25%kill would all die or all live.
void seed_points(const char* seed_text) noexcept;

/// Appends the item's pattern to points.PID (protocol.h): the harness reports items that no run
/// reached. One write(2); does nothing where no run directory or no enabled point opened it.
void record_reached(const char* pattern) noexcept;

/// 64 random bits from the agent points' generator (seeded from FAULTLINE_SEED). Thread-safe.
std::uint64_t draw() noexcept;

/// Acts on a term that fired at the point `name`: delay sleeps, abort and kill end the process,
/// stop stops it (SIGSTOP) until it is continued or killed, print says so on stderr. fail and teardown are the caller's (they mean something only to the
/// call the point stands before); off does nothing. `where` (may be null): what the item's filter
/// matched, when it was not the name written (a lock/ point's clone, tail-caller or inlined copy),
/// named on the print line.
void act(const detail::point_term& t, const char* name, const char* where = nullptr) noexcept;

}  // namespace faultline::agent::preload
