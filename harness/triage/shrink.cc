#include "harness/triage/shrink.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "faults/spec.h"
#include "harness/campaign/duration.h"
#include "harness/campaign/state_file.h"
#include "harness/triage/sampler.h"

namespace faultline::harness {
namespace {

using candidate_list = std::vector<std::pair<std::string, std::string>>;

// The lowering candidates of item i's term j: a count halved, a probability halved, a delay
// halved (not below 1 ms).
void lowered_terms(const faults::spec& s, std::size_t i, std::size_t j, candidate_list& out) {
  const faults::term& t = s.items[i].terms[j];
  const std::string where = " of " + s.items[i].written() + " term " + std::to_string(j + 1);
  auto with = [&](auto change, const std::string& what) {
    faults::spec c = s;
    change(c.items[i].terms[j]);
    out.emplace_back(faults::format(c), what + where);
  };
  if (t.count && *t.count > 1) with([](faults::term& x) { *x.count /= 2; }, "halved the count");
  if (t.probability_ppb && *t.probability_ppb > 1) with([](faults::term& x) { *x.probability_ppb /= 2; }, "halved the probability");
  if (t.action.kind == faults::action_kind::delay && t.action.duration >= std::chrono::milliseconds(2))
    with([](faults::term& x) {
      x.action.duration = std::chrono::duration_cast<std::chrono::milliseconds>(x.action.duration / 2);
    }, "halved the delay");
}

// The state of one shrink while it runs.
struct shrinker {
  const shrink_options& o;
  sampler runs;
  shrink_result r;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  bool same(const run_record& x) const { return same_failure(o.target, x); }
  bool cancelled() const { return o.run_settings.cancel && o.run_settings.cancel->load(); }

  // Whether the budget (runs or time) is spent; says so in r.stopped.
  bool out_of_budget() {
    if (runs.runs_spent() >= o.max_runs || std::chrono::steady_clock::now() - started >= o.budget) {
      r.stopped = "budget";
      return true;
    }
    return false;
  }

  core::result<sample_result> measure(const std::string& spec, std::uint64_t n, std::uint64_t enough_hits) {
    variant v = o.base;
    v.faults = spec;
    auto got = runs.sample(v, o.seed, n, [this](const run_record& x) { return same(x); }, enough_hits);
    r.runs_spent = runs.runs_spent();
    if (got && got->interrupted) r.stopped = "interrupted";
    return got;
  }

  // shrink.json, replaced whole (state_file.h): a reader never sees half of it.
  core::status save() { return write_state_file(o.work_dir / "shrink.json", nlohmann::json(to_record(r, o.target))); }

  // Tries one candidate; returns whether it reproduced (and was not cut short).
  core::result<bool> attempt(const std::string& spec, const std::string& change) {
    const std::uint64_t left = o.max_runs > runs.runs_spent() ? o.max_runs - runs.runs_spent() : 0;
    auto got = measure(spec, std::min(r.runs_per_candidate, left), r.hits_to_keep);
    if (!got) return got.error();
    const bool kept = got->hits >= r.hits_to_keep;
    shrink_step step{spec, change, kept, got->runs, got->hits, o.seed};
    // A sample the budget or an interrupt cut short decides nothing.
    const bool whole = kept || got->hits + (r.runs_per_candidate - got->runs) < r.hits_to_keep;
    if (whole) {
      r.steps.push_back(step);
      if (o.on_step) o.on_step(step);
    }
    if (auto s = save(); !s) return s;
    return kept;
  }

  // Greedy passes until one accepts nothing, the budget is spent or the shrink is interrupted.
  core::status passes() {
    std::set<std::string> tried{r.minimal};
    for (bool progress = true; progress;) {
      progress = false;
      for (const auto& [spec, change] : shrink_candidates(r.minimal)) {
        if (!tried.insert(spec).second) continue;
        if (cancelled()) r.stopped = "interrupted";
        if (r.stopped != "done" || out_of_budget()) return {};
        auto ok = attempt(spec, change);
        if (!ok) return ok.error();
        if (r.stopped != "done") return {};
        if (*ok) {
          r.minimal = spec;
          progress = true;
          break;
        }
      }
    }
    return {};
  }
};

}  // namespace

bool same_failure(const run_record& target, const run_record& r) {
  return r.result != outcome::pass && r.result == target.result && r.when == target.when && r.signature == target.signature;
}

candidate_list shrink_candidates(const std::string& text) {
  candidate_list out;
  auto parsed = faults::parse(text);
  if (!parsed) return out;
  const faults::spec& s = *parsed;
  for (std::size_t i = 0; i < s.items.size(); ++i) {
    faults::spec c = s;
    c.items.erase(c.items.begin() + static_cast<std::ptrdiff_t>(i));
    out.emplace_back(faults::format(c), "removed item " + s.items[i].written());
  }
  for (std::size_t i = 0; i < s.items.size(); ++i)
    for (std::size_t j = 0; s.items[i].terms.size() > 1 && j < s.items[i].terms.size(); ++j) {
      faults::spec c = s;
      c.items[i].terms.erase(c.items[i].terms.begin() + static_cast<std::ptrdiff_t>(j));
      out.emplace_back(faults::format(c), "removed term " + std::to_string(j + 1) + " of " + s.items[i].written());
    }
  for (std::size_t i = 0; i < s.items.size(); ++i)
    for (std::size_t j = 0; j < s.items[i].terms.size(); ++j) lowered_terms(s, i, j, out);
  return out;
}

core::result<shrink_result> run_shrink(const shrink_options& o) {
  auto parsed = faults::parse(o.faults);
  if (!parsed) return core::status(core::errc::invalid_argument, parsed.error().message());
  if (o.target.result == outcome::pass) return core::status(core::errc::invalid_argument, "the run passed: nothing to shrink");
  if (!(o.gone_fraction > 0 && o.gone_fraction < 1) || o.confirm_runs == 0)
    return core::status(core::errc::invalid_argument, "shrink: gone_fraction must be in (0, 1) and confirm_runs positive");
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return core::status(core::errc::io_error, "cannot create " + o.work_dir.string() + ": " + ec.message());
  shrinker sh{o, sampler(o.run_settings, o.work_dir / "samples"), {}, std::chrono::steady_clock::now()};
  sh.r.original = sh.r.minimal = faults::format(*parsed);
  auto first = sh.measure(sh.r.minimal, o.confirm_runs, 0);
  if (!first) return first.error();
  sh.r.original_runs = first->runs;
  sh.r.original_hits = first->hits;
  if (first->interrupted || !first->hits) {
    sh.r.reproduced = first->hits > 0;
    if (auto s = sh.save(); !s) return s;
    return sh.r;
  }
  sh.r.repro_seed = first->first_hit->seed;
  const double r0 = static_cast<double>(first->hits) / static_cast<double>(first->runs);
  const double keep_rate = o.gone_fraction * r0;
  sh.r.runs_per_candidate = runs_to_claim(0, keep_rate).value_or(o.max_runs);
  sh.r.hits_to_keep = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(keep_rate * static_cast<double>(sh.r.runs_per_candidate) - 1e-9)));
  if (auto s = sh.passes(); !s) return s;
  if (sh.r.stopped == "done") {  // the minimal spec's rate, from the run's seed again
    auto last = sh.measure(sh.r.minimal, o.confirm_runs, 0);
    if (!last) return last.error();
    if (!last->interrupted) {
      sh.r.confirm_runs = last->runs;
      sh.r.confirm_hits = last->hits;
      sh.r.rate = failure_rate(last->hits, last->runs);
      if (last->first_hit) sh.r.repro_seed = last->first_hit->seed;
    }
  }
  if (auto s = sh.save(); !s) return s;
  return sh.r;
}

shrink_record to_record(const shrink_result& r, const run_record& target) {
  shrink_record j;
  j.run_id = target.run_id;
  j.name = target.name;
  j.seed = target.seed;
  j.outcome = to_string(target.result);
  j.phase = to_string(target.when);
  j.signature = target.signature;
  j.original = r.original;
  j.minimal = r.minimal;
  j.reproduced = r.reproduced;
  j.original_runs = r.original_runs;
  j.original_hits = r.original_hits;
  j.runs_per_candidate = r.runs_per_candidate;
  j.hits_to_keep = r.hits_to_keep;
  j.steps = r.steps;
  j.confirm_runs = r.confirm_runs;
  j.confirm_hits = r.confirm_hits;
  j.rate = r.rate.rate;
  j.rate_lower95 = r.rate.lower95;
  j.rate_upper95 = r.rate.upper95;
  j.repro_seed = r.repro_seed;
  j.runs_spent = r.runs_spent;
  j.stopped = r.stopped;
  return j;
}

}  // namespace faultline::harness
