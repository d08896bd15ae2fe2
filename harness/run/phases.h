// The agent's phase markers as the runner reads them: from the run directory's phase table
// (faults/preload/phase_table.h) and from phase.PID files (faults/preload/protocol.h).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>

#include "core/status.h"

namespace faultline::harness {

/// Readies RUN_DIR/phases for a run: creates it (zero-filled, with its header) or, when it is
/// there with this layout, zeroes the slots the previous run used. An io_error names the file.
core::status reset_phase_table(const std::filesystem::path& run_dir);

/// The markers text ("run\nexit\n") of every process of the run that carries the agent, by pid:
/// each published slot of the table and each phase.PID file (a pid in both gets both texts, the
/// table's first). A table that is missing or not of this layout counts as empty.
std::map<pid_t, std::string> read_phases(const std::filesystem::path& run_dir);

}  // namespace faultline::harness
