// The words of a distributed run's verdict (DESIGN.md §9.5): the ranks of a run_record, as one
// line for a summary, as a hang's signature, and one rank at a time for the reports' tables.
//
// The records come judged (harness/run/nccl_ranks.h): each rank is in the collective, outside
// it, dead, exited or missing. These functions only phrase them, so that the runner, the
// command's summary and reports/ (which knows nothing of the runner) say the same thing.
//
//   ranks_verdict(r.ranks)
//     "ranks: 1 outside: 2 collectives, last ncclAllReduce, stopped by nccl/ncclAllReduce before
//      call #3; 0 in ncclAllReduce #3 (waiting)"
//   ranks_hang_signature(r.ranks)
//     "hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it"
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "harness/results/results.h"

namespace faultline::harness {

/// "1" for rank 1, "pid 4242" for a process that never said which rank it was.
std::string rank_label(const nccl_rank_record& r);

/// What one rank was doing, after its label: "in ncclAllReduce #3 (waiting)", "outside: 2
/// collectives, last ncclAllReduce, stopped by nccl/ncclAllReduce before call #3", "dead
/// (SIGKILL at nccl/ncclAllReduce #5)", "exited after 4 collectives", "no state".
std::string rank_detail(const nccl_rank_record& r);

/// Every rank on one line, "ranks: " then "LABEL DETAIL" joined by "; ": the dead, outside and
/// missing ranks first (what stopped the run), then those in the collective, then the exited
/// ones, each group by rank. "" when there are no ranks.
std::string ranks_verdict(const std::vector<nccl_rank_record>& ranks);

/// A hang's signature from its ranks: the ranks that kept the collective from completing, then
/// the ones waiting in it, without pids or counts of anything but the collective, so that runs
/// hung at the same place group together. "" when no rank was alive at the hang (none in the
/// collective or outside it): the hang is elsewhere, and its frames name it.
std::string ranks_hang_signature(const std::vector<nccl_rank_record>& ranks);

}  // namespace faultline::harness
