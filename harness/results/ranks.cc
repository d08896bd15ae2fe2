#include "harness/results/ranks.h"

#include <algorithm>
#include <map>

namespace faultline::harness {
namespace {

// The order a verdict lists the ranks in: what stopped the collective first.
int rank_culprit_order(rank_state s) {
  switch (s) {
    case rank_state::dead: return 0;
    case rank_state::outside: return 1;
    case rank_state::missing: return 2;
    case rank_state::in_collective: return 3;
    case rank_state::exited: return 4;
  }
  return 5;
}

std::vector<const nccl_rank_record*> ranks_in_verdict_order(const std::vector<nccl_rank_record>& ranks) {
  std::vector<const nccl_rank_record*> out;
  for (const auto& r : ranks) out.push_back(&r);
  std::stable_sort(out.begin(), out.end(), [](const nccl_rank_record* a, const nccl_rank_record* b) {
    if (rank_culprit_order(a->state) != rank_culprit_order(b->state)) return rank_culprit_order(a->state) < rank_culprit_order(b->state);
    // Known ranks by number, then the processes that never said, by pid.
    if ((a->rank < 0) != (b->rank < 0)) return a->rank >= 0;
    return a->rank != b->rank ? a->rank < b->rank : a->pid < b->pid;
  });
  return out;
}

std::string rank_collectives_text(std::uint64_t n) { return std::to_string(n) + (n == 1 ? " collective" : " collectives"); }

std::string rank_fault_point(const nccl_rank_record& r) { return "nccl/" + r.fault_api; }

// "SIGKILL at nccl/ncclAllReduce #5": how a rank died, its signal and where a point killed it.
std::string rank_death(const nccl_rank_record& r) {
  std::string text = r.signal ? signal_name(*r.signal) : "gone";
  if ((r.fault == "killed" || r.fault == "aborted") && !r.fault_api.empty())
    text += " at " + rank_fault_point(r) + " #" + std::to_string(r.fault_call);
  else if (!r.in_call.empty())
    text += " inside " + r.in_call + (r.in_call == r.last_collective ? " #" + std::to_string(r.collectives) : "");
  return text;
}

// What a point did to a rank that is still alive, "" when none did.
std::string rank_fault_text(const nccl_rank_record& r) {
  if (r.fault.empty() || r.fault_api.empty()) return "";
  const std::string call = "call #" + std::to_string(r.fault_call);
  if (r.fault == "stopped") return "stopped by " + rank_fault_point(r) + " before " + call;
  if (r.fault == "failed") return rank_fault_point(r) + " failed " + call + " (result " + std::to_string(r.fault_result) + ")";
  if (r.fault == "delayed") return rank_fault_point(r) + " delayed " + call;
  return r.fault + " by " + rank_fault_point(r) + " at " + call;
}

// A hang signature's words for one rank that kept the collective from completing; `top` is
// "ncclAllReduce #3" (the collective the waiting ranks are in), "" when none is.
std::string rank_culprit_words(const nccl_rank_record& r, const std::string& top) {
  switch (r.state) {
    case rank_state::dead: return "dead (" + rank_death(r) + ")";
    case rank_state::missing: return "without state";
    case rank_state::exited: return "exited";
    case rank_state::in_collective: return "waiting";
    case rank_state::outside: break;
  }
  std::string why;
  if (r.fault == "stopped") why = "stopped by " + rank_fault_point(r);
  else if (r.fault == "failed") why = rank_fault_point(r) + " failed";
  else if (!r.in_call.empty()) why = "in " + r.in_call;
  else why = rank_collectives_text(r.collectives);
  return "outside" + (top.empty() ? "" : " " + top) + " (" + why + ")";
}

std::string rank_group_labels(const std::vector<const nccl_rank_record*>& group) {
  std::string text = group.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < group.size(); ++i) text += (i ? "," : "") + rank_label(*group[i]);
  return text;
}

}  // namespace

std::string rank_label(const nccl_rank_record& r) { return r.rank >= 0 ? std::to_string(r.rank) : "pid " + std::to_string(r.pid); }

std::string rank_detail(const nccl_rank_record& r) {
  switch (r.state) {
    case rank_state::in_collective:
      return "in " + r.last_collective + " #" + std::to_string(r.collectives) + " (waiting)";
    case rank_state::dead: {
      std::string text = "dead (" + rank_death(r) + ")";
      if (r.fault != "killed" && r.fault != "aborted") text += " after " + rank_collectives_text(r.collectives);
      return text;
    }
    case rank_state::exited: return "exited after " + rank_collectives_text(r.collectives);
    case rank_state::missing: return "no state";
    case rank_state::outside: break;
  }
  std::string text = "outside: " + rank_collectives_text(r.collectives);
  if (!r.last_collective.empty()) text += ", last " + r.last_collective;
  if (!r.in_call.empty()) text += ", in " + r.in_call;
  if (auto f = rank_fault_text(r); !f.empty()) text += ", " + f;
  return text;
}

std::string ranks_verdict(const std::vector<nccl_rank_record>& ranks) {
  if (ranks.empty()) return "";
  std::string text = "ranks: ";
  bool first = true;
  for (const auto* r : ranks_in_verdict_order(ranks)) {
    text += (first ? "" : "; ") + rank_label(*r) + " " + rank_detail(*r);
    first = false;
  }
  return text;
}

// Ranks with the same words are named together ("ranks 1,3 outside ..."), so that a signature
// stays one line at 64 ranks when they fail alike.
std::string ranks_hang_signature(const std::vector<nccl_rank_record>& ranks) {
  // Ranks that had all ended when the run hung are no part of the hang: its frames name it.
  const bool any_alive = std::any_of(ranks.begin(), ranks.end(), [](const nccl_rank_record& r) {
    return r.state == rank_state::in_collective || r.state == rank_state::outside;
  });
  if (!any_alive) return "";
  std::string top;
  for (const auto& r : ranks)
    if (r.state == rank_state::in_collective) top = r.last_collective + " #" + std::to_string(r.collectives);
  std::vector<std::pair<std::string, std::vector<const nccl_rank_record*>>> culprits;
  std::vector<const nccl_rank_record*> waiting;
  for (const auto* r : ranks_in_verdict_order(ranks)) {
    if (r->state == rank_state::in_collective) {
      waiting.push_back(r);
      continue;
    }
    if (r->state == rank_state::exited && !top.empty()) continue;  // ended before the hang: no part of it
    std::string words = rank_culprit_words(*r, top);
    auto same = std::find_if(culprits.begin(), culprits.end(), [&](const auto& c) { return c.first == words; });
    if (same == culprits.end()) culprits.push_back({std::move(words), {r}});
    else same->second.push_back(r);
  }
  std::string text = "hang: ";
  for (std::size_t i = 0; i < culprits.size(); ++i)
    text += (i ? ", " : "") + rank_group_labels(culprits[i].second) + " " + culprits[i].first;
  if (!waiting.empty()) {
    // "waiting in it" only right after "outside ncclAllReduce #3", which named the collective.
    const bool named = !culprits.empty() && culprits.back().first.rfind("outside " + top + " ", 0) == 0;
    text += (culprits.empty() ? "" : ", ") + rank_group_labels(waiting) + " waiting in " + (named ? "it" : top);
  }
  return text;
}

}  // namespace faultline::harness
