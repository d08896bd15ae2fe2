#include "harness/results/summary.h"

#include <algorithm>

#include "faults/spec.h"
#include "harness/results/stack_hints.h"

namespace faultline::harness {
namespace {

// Keeps in `slot` whichever of it and `r` has the lower run number.
void keep_first(std::optional<run_record>& slot, const run_record& r) {
  if (!slot || r.run < slot->run) slot = r;
}

}  // namespace

std::vector<std::string> points_not_reached(const std::string& faults, const std::set<std::string>& reached) {
  std::vector<std::string> out;
  auto spec = faults::parse(faults);
  if (!spec) return out;
  for (const auto& item : spec->items)
    if (!reached.count(item.written())) out.push_back(item.written());
  return out;
}

summary_builder::summary_builder(std::vector<summary_key> keys) {
  for (auto& k : keys) {
    state st;
    st.sum.name = k.name;
    for (outcome o : all_outcomes) st.sum.outcomes[o] = 0;
    st.key = std::move(k);
    index_.emplace(st.key.name, states_.size());
    states_.push_back(std::move(st));
  }
}

bool summary_builder::add(const run_record& r) {
  auto at = index_.find(r.name);
  if (at == index_.end()) return false;
  state& st = states_[at->second];
  variant_summary& s = st.sum;
  ++s.runs;
  ++s.outcomes[r.result];
  st.reached.insert(r.points_reached.begin(), r.points_reached.end());
  for (const auto& l : r.late_cuda) {
    auto [it, fresh] = st.late_of.emplace(l.api, s.late_cuda.size());
    if (fresh) s.late_cuda.push_back({l.api, 0, 0, l.signature, r.run});
    late_cuda_total& t = s.late_cuda[it->second];
    ++t.runs;
    t.calls += l.calls;
    if (r.run < t.first_run_number) {
      t.signature = l.signature;
      t.first_run_number = r.run;
    }
  }
  keep_first(s.first_record, r);
  if (r.result == outcome::pass) {
    keep_first(s.first_pass, r);
    return true;
  }
  ++s.failures;
  keep_first(s.first_failure, r);
  auto [it, fresh] = st.group_of.emplace(r.signature, s.signatures.size());
  if (fresh) s.signatures.push_back({r.signature, r.result, r.when, 0, r.run_id, r.log, r.run, r.stacks, r.frames, r.ranks});
  signature_group& g = s.signatures[it->second];
  ++g.count;
  if (r.run < g.first_run_number) {
    g.result = r.result;
    g.when = r.when;
    g.first_run = r.run_id;
    g.first_log = r.log;
    g.first_run_number = r.run;
    g.first_stacks = r.stacks;
    g.first_frames = r.frames;
    g.first_ranks = r.ranks;
  }
  return true;
}

std::vector<variant_summary> summary_builder::summaries() const {
  std::vector<variant_summary> out;
  out.reserve(states_.size());
  for (const auto& st : states_) {
    variant_summary s = st.sum;
    // Most frequent first; ties in the order the signatures first happened (by run number),
    // which is what a stable sort of run-ordered records gives.
    std::sort(s.signatures.begin(), s.signatures.end(), [](const signature_group& a, const signature_group& b) {
      if (a.count != b.count) return a.count > b.count;
      return a.first_run_number < b.first_run_number;
    });
    s.rate = failure_rate(s.failures, s.runs);
    std::sort(s.late_cuda.begin(), s.late_cuda.end(),
              [](const late_cuda_total& a, const late_cuda_total& b) { return a.api < b.api; });
    if (!st.key.faults.empty()) s.points_never_reached = points_not_reached(st.key.faults, st.reached);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<variant_summary> summarise(const std::vector<run_record>& records, const std::vector<std::string>& names) {
  std::vector<summary_key> keys;
  for (const auto& name : names) {
    summary_key k{name, ""};
    for (const auto& r : records)
      if (r.name == name && !r.faults.empty()) {
        k.faults = r.faults;
        break;
      }
    keys.push_back(std::move(k));
  }
  summary_builder b(std::move(keys));
  for (const auto& r : records) b.add(r);
  return b.summaries();
}

nlohmann::json to_json(const variant_summary& s) {
  nlohmann::json outcomes = nlohmann::json::object();
  for (const auto& [o, n] : s.outcomes) outcomes[std::string(to_string(o))] = n;
  nlohmann::json sigs = nlohmann::json::array();
  for (const auto& g : s.signatures) {
    sigs.push_back({{"signature", g.signature},
                    {"count", g.count},
                    {"outcome", to_string(g.result)},
                    {"phase", g.when == phase::none ? nlohmann::json(nullptr) : nlohmann::json(to_string(g.when))},
                    {"first_run", g.first_run},
                    {"log", g.first_log},
                    {"stacks", g.first_stacks.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.first_stacks)},
                    {"frames", g.first_frames}});
    if (!g.first_ranks.empty()) sigs.back()["ranks"] = g.first_ranks;
    if (g.result == outcome::hang)
      if (const std::string hint = python_frames_hint(g.first_frames); !hint.empty()) sigs.back()["hint"] = hint;
  }
  nlohmann::json j = {{"name", s.name},
                      {"runs", s.runs},
                      {"outcomes", outcomes},
                      {"failures", s.failures},
                      {"failure_rate", s.rate.rate},
                      {"failure_rate_lower95", s.rate.lower95},
                      {"failure_rate_upper95", s.rate.upper95},
                      {"signatures", sigs}};
  if (s.points_never_reached) j["points_never_reached"] = *s.points_never_reached;
  if (!s.late_cuda.empty()) {
    nlohmann::json late = nlohmann::json::array();
    for (const auto& l : s.late_cuda)
      late.push_back({{"api", l.api}, {"runs", l.runs}, {"calls", l.calls}, {"signature", l.signature}});
    j["late_cuda"] = std::move(late);
  }
  return j;
}

}  // namespace faultline::harness
