// A distributed run's ranks: reading the agent's nccl.PID files and judging which ranks were in
// the collective when the run ended (DESIGN.md §9.5).
//
// NCCL's collectives are asynchronous, so a rank's stack does not say whether it is "in" one; its
// record of the collectives it issued does (faults/preload/nccl_state.h), numbered on each
// communicator as PyTorch's flight recorder numbers them, with how far its stream completed them.
// The front is the first collective, by number, that some rank of the communicator never issued,
// or that no rank completed, or that the ranks issued differently (another API, count, datatype,
// root or op: a desync). A collective completes on every rank or on none, so one rank's event
// that completed speaks for all, and a rank that cannot answer (stopped) is not taken as behind.
// A live rank that issued the front waits in it; a live rank that did not is outside (its count,
// its last collective, the call it is inside, what a fault point did to it); a rank whose process
// died is dead (its signal: the one a point's kill or abort wrote, else the one the runner
// reaped, else "gone"); one that ended with the run exited; a rank of nranks that left no file
// is missing.
//
//   ask_ranks_for_completion(run_dir, alive, 500ms);       // at the deadline, before the kill
//   auto files = harness::read_nccl_ranks(run_dir);        // empty: no NCCL, nothing to say
//   harness::rank_fates f{.hang = true, .alive = {...}};  // noted before the tree was killed
//   std::vector<nccl_rank_record> ranks = harness::judge_ranks(files, f);
//
// Thread safety: read_nccl_ranks and ask_ranks_for_completion use files; judge_ranks is pure.
#pragma once

#include <sys/types.h>

#include <chrono>
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

/// Asks each live rank of `run_dir` (its nccl.PID names a pid of `alive`, in the processes' own
/// numbering) whose agent answers queries to bring its `completed` up to date (nccl_state.h:
/// query_request), and waits for the answers at most `budget` in all: a stopped rank never
/// answers, and keeps what it last knew. Returns how many answered. Call it at a hang's deadline,
/// before the stacks are taken and the tree is killed.
std::size_t ask_ranks_for_completion(const std::filesystem::path& run_dir, const std::set<pid_t>& alive,
                                     std::chrono::milliseconds budget);

/// Whether a live rank of a hung run was still at its work: it had not called exit(). A hang
/// whose ranks wait in a collective is then in the run phase, whatever the launcher did once the
/// harness began to end it (torchrun exits on SIGTERM).
bool a_live_rank_was_working(const std::vector<nccl_rank_file>& files, const rank_fates& fates);

}  // namespace faultline::harness
