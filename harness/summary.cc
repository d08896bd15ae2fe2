#include "harness/summary.h"

#include <algorithm>

namespace faultline::harness {

std::vector<variant_summary> summarise(const std::vector<run_record>& records, const std::vector<std::string>& names) {
  std::vector<variant_summary> out;
  for (const auto& name : names) {
    variant_summary s;
    s.name = name;
    for (outcome o : all_outcomes) s.outcomes[o] = 0;
    std::map<std::string, std::size_t> group_of;
    std::vector<const run_record*> mine;
    for (const auto& r : records)
      if (r.name == name) mine.push_back(&r);
    std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->run < b->run; });
    for (const run_record* r : mine) {
      ++s.runs;
      ++s.outcomes[r->result];
      if (r->result == outcome::pass) continue;
      ++s.failures;
      if (!s.first_failure) s.first_failure = *r;
      auto [it, fresh] = group_of.emplace(r->signature, s.signatures.size());
      if (fresh) s.signatures.push_back({r->signature, r->result, r->when, 0, r->run_id, r->log});
      ++s.signatures[it->second].count;
    }
    std::stable_sort(s.signatures.begin(), s.signatures.end(),
                     [](const signature_group& a, const signature_group& b) { return a.count > b.count; });
    s.rate = failure_rate(s.failures, s.runs);
    out.push_back(std::move(s));
  }
  return out;
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
                    {"log", g.first_log}});
  }
  return {{"name", s.name},
          {"runs", s.runs},
          {"outcomes", outcomes},
          {"failures", s.failures},
          {"failure_rate", s.rate.rate},
          {"failure_rate_lower95", s.rate.lower95},
          {"failure_rate_upper95", s.rate.upper95},
          {"signatures", sigs}};
}

}  // namespace faultline::harness
