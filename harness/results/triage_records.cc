#include "harness/results/triage_records.h"

#include <algorithm>

#include "core/file_io.h"

namespace faultline::harness {

namespace fs = std::filesystem;

void to_json(nlohmann::json& j, const shrink_record& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps)
    steps.push_back({{"spec", s.spec}, {"change", s.change}, {"reproduced", s.reproduced}, {"runs", s.runs}, {"hits", s.hits},
                     {"first_seed", s.first_seed}});
  j = {{"run_id", r.run_id}, {"name", r.name}, {"seed", r.seed}, {"outcome", r.outcome}, {"phase", r.phase},
       {"signature", r.signature}, {"original", r.original}, {"minimal", r.minimal}, {"reproduced", r.reproduced},
       {"original_runs", r.original_runs}, {"original_hits", r.original_hits}, {"runs_per_candidate", r.runs_per_candidate},
       {"hits_to_keep", r.hits_to_keep}, {"steps", steps}, {"confirm_runs", r.confirm_runs}, {"confirm_hits", r.confirm_hits},
       {"rate", r.rate}, {"rate_lower95", r.rate_lower95}, {"rate_upper95", r.rate_upper95}, {"repro_seed", r.repro_seed},
       {"runs_spent", r.runs_spent}, {"stopped", r.stopped}};
}

void from_json(const nlohmann::json& j, shrink_record& r) {
  j.at("run_id").get_to(r.run_id);
  j.at("name").get_to(r.name);
  j.at("seed").get_to(r.seed);
  j.at("outcome").get_to(r.outcome);
  j.at("phase").get_to(r.phase);
  j.at("signature").get_to(r.signature);
  j.at("original").get_to(r.original);
  j.at("minimal").get_to(r.minimal);
  j.at("reproduced").get_to(r.reproduced);
  j.at("original_runs").get_to(r.original_runs);
  j.at("original_hits").get_to(r.original_hits);
  j.at("runs_per_candidate").get_to(r.runs_per_candidate);
  j.at("hits_to_keep").get_to(r.hits_to_keep);
  r.steps.clear();
  for (const auto& s : j.at("steps"))
    r.steps.push_back({s.at("spec").get<std::string>(), s.at("change").get<std::string>(), s.at("reproduced").get<bool>(),
                       s.at("runs").get<std::uint64_t>(), s.at("hits").get<std::uint64_t>(), s.at("first_seed").get<std::uint64_t>()});
  j.at("confirm_runs").get_to(r.confirm_runs);
  j.at("confirm_hits").get_to(r.confirm_hits);
  j.at("rate").get_to(r.rate);
  j.at("rate_lower95").get_to(r.rate_lower95);
  j.at("rate_upper95").get_to(r.rate_upper95);
  j.at("repro_seed").get_to(r.repro_seed);
  j.at("runs_spent").get_to(r.runs_spent);
  j.at("stopped").get_to(r.stopped);
}

void to_json(nlohmann::json& j, const bisect_record& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps)
    steps.push_back({{"commit", s.commit}, {"subject", s.subject}, {"role", s.role}, {"verdict", s.verdict}, {"runs", s.runs},
                     {"failures", s.failures}, {"p_like_bad", s.p_like_bad}, {"p_like_good", s.p_like_good}, {"why", s.why}});
  j = {{"good", r.good}, {"bad", r.bad}, {"alpha", r.alpha}, {"runs", r.runs}, {"batch", r.batch}, {"seed", r.seed},
       {"signature", r.signature ? nlohmann::json(*r.signature) : nlohmann::json(nullptr)}, {"commits", r.commits},
       {"steps", steps}, {"first_bad", r.first_bad ? nlohmann::json(*r.first_bad) : nlohmann::json(nullptr)},
       {"undecided_range", r.undecided_range}, {"problem", r.problem}, {"interrupted", r.interrupted}};
}

void from_json(const nlohmann::json& j, bisect_record& r) {
  j.at("good").get_to(r.good);
  j.at("bad").get_to(r.bad);
  j.at("alpha").get_to(r.alpha);
  j.at("runs").get_to(r.runs);
  j.at("batch").get_to(r.batch);
  j.at("seed").get_to(r.seed);
  r.signature = j.at("signature").is_null() ? std::nullopt : std::optional(j.at("signature").get<std::string>());
  j.at("commits").get_to(r.commits);
  r.steps.clear();
  for (const auto& s : j.at("steps")) {
    bisect_step_record x;
    s.at("commit").get_to(x.commit);
    s.at("subject").get_to(x.subject);
    s.at("role").get_to(x.role);
    s.at("verdict").get_to(x.verdict);
    s.at("runs").get_to(x.runs);
    s.at("failures").get_to(x.failures);
    s.at("p_like_bad").get_to(x.p_like_bad);
    s.at("p_like_good").get_to(x.p_like_good);
    s.at("why").get_to(x.why);
    r.steps.push_back(std::move(x));
  }
  r.first_bad = j.at("first_bad").is_null() ? std::nullopt : std::optional(j.at("first_bad").get<std::string>());
  j.at("undecided_range").get_to(r.undecided_range);
  j.at("problem").get_to(r.problem);
  j.at("interrupted").get_to(r.interrupted);
}

namespace {

template <typename T>
core::result<T> read_record(const fs::path& file) {
  auto text = core::io::read_file(file);
  if (!text) return text.error();
  try {
    return nlohmann::json::parse(*text).get<T>();
  } catch (const nlohmann::json::exception& e) {
    return core::status(core::errc::corrupt, file.string() + " is malformed: " + e.what());
  }
}

}  // namespace

core::result<triage_records> find_triage_records(const fs::path& dir) {
  triage_records found;
  std::error_code ec;
  if (fs::is_regular_file(dir / "bisect.json", ec)) {
    auto b = read_record<bisect_record>(dir / "bisect.json");
    if (!b) return b.error();
    found.bisect = std::move(*b);
  }
  for (fs::directory_iterator it(dir / "shrink", ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path file = it->path() / "shrink.json";
    std::error_code e2;
    if (!fs::is_regular_file(file, e2)) continue;
    auto s = read_record<shrink_record>(file);
    if (!s) return s.error();
    found.shrinks.push_back(std::move(*s));
  }
  std::sort(found.shrinks.begin(), found.shrinks.end(), [](const auto& a, const auto& b) { return a.run_id < b.run_id; });
  return found;
}

}  // namespace faultline::harness
