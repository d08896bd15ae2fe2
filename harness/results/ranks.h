// The words of a distributed run's verdict (DESIGN.md §9.5): the ranks of a run_record, as one
// line for a summary, as a hang's signature, and one rank at a time for the reports' tables.
//
// The records come judged (harness/run/nccl_ranks.h) against the run's front, the first
// collective that did not complete everywhere: each rank waits in it, is outside it, dead, exited
// or missing. These functions only phrase them, so that the runner, the command's summary and
// reports/ (which knows nothing of the runner) say the same thing.
//
//   ranks_verdict(r.ranks)
//     "ranks: 2 outside: 7 collectives, last ncclBroadcast, stopped by nccl/ncclAllGather before
//      call #4; 0 in ncclAllGather #8 (waiting), issued 9 collectives, last ncclReduceScatter; ..."
//   ranks_hang_signature(r.ranks)
//     "hang: rank 2 outside ncclAllGather #8 (stopped by nccl/ncclAllGather), ranks 0,1,3 waiting in it"
//     "hang: desync at #7: ranks 0,1,3 ncclBroadcast(count 64, float32, root 0), rank 2
//      ncclAllGather(count 64, float32)"
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "harness/results/results.h"

namespace faultline::harness {

/// "1" for rank 1, "pid 4242" for a process that never said which rank it was.
std::string rank_label(const nccl_rank_record& r);

/// What one rank was doing, after its label: "in ncclAllReduce #3 (waiting)", "in #7
/// ncclAllGather(count 64, float32) (desync)", "outside: 2 collectives, last ncclAllReduce,
/// stopped by nccl/ncclAllReduce before call #3", "dead (SIGKILL at nccl/ncclAllReduce #5)",
/// "ncclCommInitRankConfig failed by nccl/ncclCommInitRank* (ncclSystemError) at call #1, then
/// exited 1 after 0 collectives", "exited after 4 collectives", "no state". What a point did
/// (stopped, failed, delayed or asleep in its delay) is named in every state.
std::string rank_detail(const nccl_rank_record& r);

/// Every rank on one line, "ranks: " then "LABEL DETAIL" joined by "; ": the dead, outside and
/// missing ranks first (what stopped the run), then those in the collective, then the exited
/// ones, each group by rank. "" when there are no ranks.
std::string ranks_verdict(const std::vector<nccl_rank_record>& ranks);

/// A hang's signature from its ranks: the ranks that kept the front from completing and why,
/// then the ones waiting in it; for a desync, each call issued at the front and its ranks.
/// Without pids or counts of anything but the collective, so that runs hung at the same place
/// group together. "" when no rank was alive at the hang, or when every collective completed and
/// no live rank is in an NCCL call or was touched by a point: the hang is elsewhere, and its
/// frames name it.
std::string ranks_hang_signature(const std::vector<nccl_rank_record>& ranks);

}  // namespace faultline::harness
