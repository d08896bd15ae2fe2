// A distributed run's ranks: reading the agent's nccl.PID files and judging which ranks were in
// the collective when the run ended (DESIGN.md §9.5).
//
// NCCL's collectives are asynchronous, so a rank's stack does not say whether it is "in" one; its
// sequence number does (faults/preload/nccl_state.h, as PyTorch's flight recorder compares them).
// With M the highest count of collectives among the ranks, a live rank that issued M of them
// issued collective #M and waits in it for the others; a live rank below M never reached it and
// is outside (its count, its last collective, the call it is inside, what a fault point did to
// it); a rank whose process died is dead (its signal: the one a point's kill or abort wrote,
// else the one the runner reaped, else "gone"); one that ended with the run exited; a rank of
// nranks that left no file is missing.
//
//   auto files = harness::read_nccl_ranks(run_dir);        // empty: no NCCL, nothing to say
//   harness::rank_fates f{.hang = true, .alive = {...}};  // noted before the tree was killed
//   std::vector<nccl_rank_record> ranks = harness::judge_ranks(files, f);
//
// Thread safety: read_nccl_ranks reads files; judge_ranks is pure.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "faults/preload/nccl_state.h"
#include "harness/results/results.h"

namespace faultline::harness {

/// One process's nccl.PID: the pid its name carries (the process's own view of it, a PID
/// namespace's inside one) and the state the agent left.
struct nccl_rank_file {
  pid_t pid = 0;
  agent::nccl_rank_state state{};
};

/// Every nccl.PID of `run_dir` that holds a whole, finished state, in pid order. A file of the
/// wrong size (truncated, or another layout), with the wrong magic or version (not filled in
/// yet, or garbage), or whose name is not "nccl." and digits, is skipped: the judge works with
/// the ranks it can trust.
std::vector<nccl_rank_file> read_nccl_ranks(const std::filesystem::path& run_dir);

/// What the runner knows of the run's processes, keyed by the pids the files carry.
struct rank_fates {
  /// The run hung: `alive` holds the processes that were alive when the hang was declared
  /// (noted before the harness killed the tree). Otherwise every process has ended by itself.
  bool hang = false;
  std::set<pid_t> alive;
  /// waitpid statuses the runner reaped (the leader's), for a dead rank's signal.
  std::map<pid_t, int> wait_status;
  /// The pid the harness (and stacks.txt) knows a process by, where it differs from the file's
  /// (a run in its own PID namespace).
  std::map<pid_t, pid_t> host_pid;
};

/// Adds to `fates.wait_status` the signal of each process of `run_dir` that left a crash report
/// (crash.PID, protocol.h) and has no status yet: a rank that crashed while the run went on is
/// dead by that signal, not exited, though the runner reaped only the leader.
void add_crashed_ranks(const std::filesystem::path& run_dir, rank_fates& fates);

/// The verdict on every rank (see the file comment), ordered by rank, the processes with no
/// rank last by pid, then a record per missing rank of the largest nranks any rank gave.
std::vector<nccl_rank_record> judge_ranks(const std::vector<nccl_rank_file>& files, const rank_fates& fates);

}  // namespace faultline::harness
