#include "harness/results/ranks.h"

#include <algorithm>
#include <map>

#include "faults/nccl_names.h"

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

// The point that acted: the spec's item ("nccl/ncclCommInitRank*"), else the function's point.
std::string rank_fault_point(const nccl_rank_record& r) { return r.fault_item.empty() ? "nccl/" + r.fault_api : r.fault_item; }

std::string duration_text(std::uint64_t ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}

std::string result_text(int result) {
  for (const auto& n : faults::nccl_results)
    if (n.value == result) return std::string(n.name);
  return "result " + std::to_string(result);
}

// The API of a call's text: "ncclBroadcast" of "ncclBroadcast(count 8, float32, root 0)".
std::string call_api(const std::string& call) { return call.substr(0, call.find('(')); }

// "ncclAllGather #8": the collective a waiting rank waits in. A record with no front (written
// before there was one) waits in its last collective, as the verdict of that time judged it.
std::string waiting_text(const nccl_rank_record& r) {
  if (r.front == 0) return r.last_collective + " #" + std::to_string(r.collectives);
  return (r.front_call.empty() ? "" : call_api(r.front_call) + " ") + "#" + std::to_string(r.front);
}

// The run's front as a rank that issued it names it; "" when there is none.
std::string front_text(const std::vector<nccl_rank_record>& ranks) {
  for (const auto& r : ranks)
    if (r.front != 0 && !r.front_call.empty()) return waiting_text(r);
  for (const auto& r : ranks)
    if (r.front != 0 || r.state == rank_state::in_collective) return waiting_text(r);
  return "";
}

// "SIGKILL at nccl/ncclAllReduce #5": how a rank died, its signal and where a point killed it.
std::string rank_death(const nccl_rank_record& r) {
  std::string text = r.signal ? signal_name(*r.signal) : "gone";
  if ((r.fault == "killed" || r.fault == "aborted") && !r.fault_api.empty())
    text += " at " + rank_fault_point(r) + " #" + std::to_string(r.fault_call);
  else if (!r.in_call.empty())
    text += " inside " + r.in_call + (r.in_call == r.last_collective ? " #" + std::to_string(r.collectives) : "");
  return text;
}

// What a point did to a rank, "" when none did (or it killed it: rank_death says so).
std::string rank_fault_text(const nccl_rank_record& r) {
  if (r.fault.empty() || r.fault_api.empty()) return "";
  const std::string call = "call #" + std::to_string(r.fault_call);
  if (r.fault == "stopped") return "stopped by " + rank_fault_point(r) + " before " + call;
  if (r.fault == "failed")
    return r.fault_api + " failed by " + rank_fault_point(r) + " (" + result_text(r.fault_result) + ") at " + call;
  if (r.fault == "delayed") {
    const std::string delay = "delay(" + duration_text(r.fault_delay_ms) + ") of " + rank_fault_point(r);
    return (r.fault_active ? "asleep in " + delay + " before " : "delayed by " + delay + " at ") + call;
  }
  return "";
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
  else if (r.fault == "failed") why = r.fault_api + " failed by " + rank_fault_point(r);
  else if (r.fault == "delayed" && r.fault_active) why = "asleep in delay(" + duration_text(r.fault_delay_ms) + ") of " + rank_fault_point(r);
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
  const std::string fault = rank_fault_text(r);
  switch (r.state) {
    case rank_state::in_collective: {
      std::string text = r.desync ? "in #" + std::to_string(r.front) + " " + r.front_call + " (desync)"
                                  : "in " + waiting_text(r) + " (waiting)";
      if (r.front != 0 && r.collectives > r.front)
        text += ", issued " + rank_collectives_text(r.collectives) + ", last " + r.last_collective;
      if (!fault.empty()) text += ", " + fault;
      return text;
    }
    case rank_state::dead: {
      std::string text = "dead (" + rank_death(r) + ")";
      if (r.fault != "killed" && r.fault != "aborted") text += " after " + rank_collectives_text(r.collectives);
      if (!fault.empty()) text += ", " + fault;
      return text;
    }
    case rank_state::exited: {
      const std::string how = "exited" + (r.exit_code ? " " + std::to_string(*r.exit_code) : std::string());
      if (!fault.empty()) return fault + ", then " + how + " after " + rank_collectives_text(r.collectives);
      return how + " after " + rank_collectives_text(r.collectives);
    }
    case rank_state::missing: return "no state";
    case rank_state::outside: break;
  }
  std::string text = "outside: " + rank_collectives_text(r.collectives);
  if (!r.last_collective.empty()) text += ", last " + r.last_collective;
  if (!r.in_call.empty()) text += ", in " + r.in_call;
  if (!fault.empty()) text += ", " + fault;
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
  const std::string top = front_text(ranks);
  const bool desync = std::any_of(ranks.begin(), ranks.end(), [](const nccl_rank_record& r) { return r.desync; });
  std::vector<std::pair<std::string, std::vector<const nccl_rank_record*>>> culprits, calls;
  std::vector<const nccl_rank_record*> waiting;
  auto add = [](auto& groups, std::string words, const nccl_rank_record* r) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& c) { return c.first == words; });
    if (same == groups.end()) groups.push_back({std::move(words), {r}});
    else same->second.push_back(r);
  };
  for (const auto* r : ranks_in_verdict_order(ranks)) {
    if (desync && !r->front_call.empty()) {
      add(calls, r->front_call, r);  // both sides of a desync, by what each issued
      continue;
    }
    if (r->state == rank_state::in_collective) {
      waiting.push_back(r);
      continue;
    }
    if (r->state == rank_state::exited && !top.empty()) continue;  // ended before the hang: no part of it
    // With every collective complete, a live rank in no NCCL call and untouched by a point is
    // waiting elsewhere: the hang is not NCCL's, and its frames name it.
    if (top.empty() && r->state == rank_state::outside && r->in_call.empty() && r->fault.empty()) continue;
    add(culprits, rank_culprit_words(*r, top), r);
  }
  if (culprits.empty() && calls.empty() && waiting.empty()) return "";
  std::string text = "hang: ";
  if (desync) {
    // "desync at #7: ranks 0,1,3 ncclBroadcast(...), rank 2 ncclAllGather(...)": the most common call first.
    std::stable_sort(calls.begin(), calls.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    const auto at = std::find_if(ranks.begin(), ranks.end(), [](const nccl_rank_record& r) { return r.front != 0; });
    text += "desync at #" + std::to_string(at->front) + ": ";
    for (std::size_t i = 0; i < calls.size(); ++i) text += (i ? ", " : "") + rank_group_labels(calls[i].second) + " " + calls[i].first;
    for (const auto& c : culprits) text += ", " + rank_group_labels(c.second) + " " + c.first;
    return text;
  }
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
