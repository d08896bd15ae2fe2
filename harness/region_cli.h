// `faultline region PATH [--repair] [--json]`: inspects a shared accounting region
// (core/accounting, DESIGN.md §5.3) — its header, every in-use slot with its owner alive or dead,
// the per-device aggregates against the sum of live slots, who holds the lock — and checks its
// invariants; with --repair, reclaims dead processes' slots, repairs slots a dead writer left
// mid-update and recomputes the aggregates, then inspects again. For a person whose node is
// wedged: it never takes the lock to inspect, so it answers while a holder is stuck.
//
// Exit status: 0 when the region is healthy (after the repair, with --repair), 1 when a check
// fails, 2 when the file cannot be read as a region (missing, a symlink, another user's, truncated,
// garbage: one line saying which) or the lock cannot be taken for a repair.
//
// Thread safety: a plain function.
#pragma once

#include <ostream>
#include <string>

namespace faultline::harness {

/// Runs the region subcommand on `path`, printing to `out` (the report) and `err` (errors).
int region_command(const std::string& path, bool repair, bool json, std::ostream& out, std::ostream& err);

}  // namespace faultline::harness
