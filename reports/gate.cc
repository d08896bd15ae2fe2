#include "reports/gate.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/file_io.h"
#include "reports/detail/text.h"
#include "reports/significance.h"

namespace faultline::reports {
namespace {

using harness::outcome;
using harness::phase;
using nlohmann::json;

constexpr const char* format_name = "faultline-baseline";

// A validation failure: where in the document, and what is wrong there.
struct invalid {
  std::string message;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw invalid{where + ": " + what}; }

const json& field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(where, std::string("missing \"") + key + "\"");
  return *it;
}

std::uint64_t count_of(const json& v, const std::string& where) {
  if (!v.is_number_unsigned()) fail(where, "expected a whole number, got " + detail::one_line(v.dump().substr(0, 40)));
  return v.get<std::uint64_t>();
}

std::string string_of(const json& v, const std::string& where) {
  if (!v.is_string()) fail(where, "expected a string, got " + detail::one_line(v.dump().substr(0, 40)));
  return v.get<std::string>();
}

std::string sub(const std::string& where, const char* key) { return where + "." + key; }

baseline_variant parse_variant(const json& j, const std::string& where, std::int64_t version) {
  if (!j.is_object()) fail(where, "expected an object");
  baseline_variant v;
  v.name = string_of(field(j, "name", where), sub(where, "name"));
  if (v.name.empty()) fail(sub(where, "name"), "must not be empty");
  if (version >= 2) {
    const json& c = field(j, "command", where);
    if (!c.is_null()) {
      if (!c.is_array() || c.empty()) fail(sub(where, "command"), "expected null (a scenario) or a command's argv (an array of strings)");
      for (std::size_t i = 0; i < c.size(); ++i)
        v.command.push_back(string_of(c[i], sub(where, "command") + "[" + std::to_string(i) + "]"));
    }
  } else if (v.name.find('/') == std::string::npos) {
    // A scenario is "family/name"; exec named a command by its program's file name.
    fail(where, "baseline version 1 names the command \"" + detail::one_line(v.name) +
                    "\" by its program alone, which may pool several command lines (python3 a.py and python3 b.py); write a new "
                    "baseline with faultline gate --write-baseline");
  }
  v.faults = string_of(field(j, "faults", where), sub(where, "faults"));
  const std::string expect = string_of(field(j, "expect", where), sub(where, "expect"));
  auto e = expectation_from_string(expect);
  if (!e) fail(sub(where, "expect"), "expected \"no-failure\" or \"detection\", got \"" + detail::one_line(expect) + "\"");
  v.expect = *e;
  v.runs = count_of(field(j, "runs", where), sub(where, "runs"));
  v.failures = count_of(field(j, "failures", where), sub(where, "failures"));
  if (v.failures > v.runs) fail(sub(where, "failures"), std::to_string(v.failures) + " is more than its " + detail::counted(v.runs, "run"));

  const json& outcomes = field(j, "outcomes", where);
  const std::string ow = sub(where, "outcomes");
  if (!outcomes.is_object()) fail(ow, "expected an object of counts");
  for (outcome o : harness::all_outcomes) v.outcomes[o] = 0;
  std::uint64_t total = 0, not_passed = 0;
  for (const auto& [key, value] : outcomes.items()) {
    auto o = harness::outcome_from_string(key);
    if (!o) fail(ow, "unknown outcome \"" + detail::one_line(key) + "\"");
    const std::uint64_t n = count_of(value, ow + "." + key);
    v.outcomes[*o] = n;
    total += n;
    if (*o != outcome::pass) not_passed += n;
  }
  if (total != v.runs) fail(ow, "the counts add up to " + std::to_string(total) + ", not to its " + detail::counted(v.runs, "run"));
  if (not_passed != v.failures)
    fail(ow, detail::counted(not_passed, "run") + " did not pass, but \"failures\" is " + std::to_string(v.failures));

  const json& sigs = field(j, "signatures", where);
  const std::string sw = sub(where, "signatures");
  if (!sigs.is_array()) fail(sw, "expected an array");
  std::uint64_t in_signatures = 0;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < sigs.size(); ++i) {
    const std::string w = sw + "[" + std::to_string(i) + "]";
    const json& s = sigs[i];
    if (!s.is_object()) fail(w, "expected an object");
    baseline_signature g;
    g.signature = string_of(field(s, "signature", w), sub(w, "signature"));
    const std::string o = string_of(field(s, "outcome", w), sub(w, "outcome"));
    auto oc = harness::outcome_from_string(o);
    if (!oc || *oc == outcome::pass) fail(sub(w, "outcome"), "expected an outcome other than pass, got \"" + detail::one_line(o) + "\"");
    g.result = *oc;
    const json& p = field(s, "phase", w);
    if (!p.is_null()) {
      auto ph = harness::phase_from_string(string_of(p, sub(w, "phase")));
      if (!ph) fail(sub(w, "phase"), "expected \"run\", \"exit\" or null");
      g.when = *ph;
    }
    g.count = count_of(field(s, "count", w), sub(w, "count"));
    if (g.count == 0) fail(sub(w, "count"), "must be at least 1");
    if (!seen.insert(g.signature).second) fail(sub(w, "signature"), "appears twice");
    in_signatures += g.count;
    v.signatures.push_back(std::move(g));
  }
  if (in_signatures > v.failures)
    fail(sw, "the counts add up to " + std::to_string(in_signatures) + ", more than its " + detail::counted(v.failures, "failure"));
  return v;
}

baseline parse_document(const json& j) {
  if (!j.is_object()) throw invalid{"not a faultline baseline (expected a JSON object)"};
  auto fmt = j.find("format");
  if (fmt == j.end() || !fmt->is_string() || fmt->get<std::string>() != format_name)
    throw invalid{std::string("not a faultline baseline (it has no \"format\": \"") + format_name + "\")"};
  const json& ver = field(j, "version", "baseline");
  if (!ver.is_number_integer()) fail("version", "expected a whole number");
  const std::int64_t version = ver.get<std::int64_t>();
  if (version != 1 && version != baseline_version)
    throw invalid{"baseline version " + ver.dump() + " is not supported (this faultline reads versions 1 and " +
                  std::to_string(baseline_version) + "; write a new one with faultline gate --write-baseline)"};
  baseline b;
  b.version = static_cast<int>(version);
  b.created = string_of(field(j, "created", "baseline"), "created");
  const json& sources = field(j, "sources", "baseline");
  if (!sources.is_array()) fail("sources", "expected an array of paths");
  for (std::size_t i = 0; i < sources.size(); ++i) b.sources.push_back(string_of(sources[i], "sources[" + std::to_string(i) + "]"));
  b.runs = count_of(field(j, "runs", "baseline"), "runs");
  const json& variants = field(j, "variants", "baseline");
  if (!variants.is_array()) fail("variants", "expected an array");
  std::set<std::pair<harness::variant_identity, std::string>> keys;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const std::string w = "variants[" + std::to_string(i) + "]";
    auto v = parse_variant(variants[i], w, version);
    if (!keys.emplace(v.id(), v.faults).second) fail(w, "variant \"" + detail::one_line(v.name) + "\" with these faults appears twice");
    total += v.runs;
    b.variants.push_back(std::move(v));
  }
  if (total != b.runs) fail("runs", std::to_string(b.runs) + ", but the variants' runs add up to " + std::to_string(total));
  return b;
}

std::string fraction(std::uint64_t k, std::uint64_t n) {
  return detail::thousands(k) + " of " + detail::thousands(n) + " (" + detail::percent(n ? static_cast<double>(k) / static_cast<double>(n) : 0.0) + ")";
}

std::uint64_t get(const std::map<outcome, std::uint64_t>& m, outcome o) {
  auto it = m.find(o);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

std::uint64_t baseline_variant::bad() const {
  if (expect == expectation::no_failure) return failures;
  const std::uint64_t errors = outcomes.count(outcome::error) ? outcomes.at(outcome::error) : 0;
  return runs - (failures - errors);  // runs that did not detect the bug, errors included
}

harness::variant_identity baseline_variant::id() const {
  if (command.empty()) return {harness::variant_kind::scenario, {name}};
  return {harness::variant_kind::command, command};
}

baseline make_baseline(const report_model& m, std::string created) {
  baseline b;
  b.created = std::move(created);
  for (const auto& in : m.inputs) b.sources.push_back(in.results.string());
  b.runs = m.runs;
  for (const auto& v : m.variants) {
    baseline_variant bv;
    bv.name = v.name;
    if (v.id.kind == harness::variant_kind::command) bv.command = v.id.what;
    bv.faults = v.faults;
    bv.expect = v.expect;
    bv.runs = v.summary.runs;
    bv.failures = v.summary.failures;
    bv.outcomes = v.summary.outcomes;
    for (outcome o : harness::all_outcomes) bv.outcomes.emplace(o, 0);
    for (const auto& g : v.summary.signatures) bv.signatures.push_back({g.signature, g.result, g.when, g.count});
    b.variants.push_back(std::move(bv));
  }
  return b;
}

json to_json(const baseline& b) {
  json variants = json::array();
  for (const auto& v : b.variants) {
    json outcomes = json::object();
    for (const auto& [o, n] : v.outcomes) outcomes[std::string(harness::to_string(o))] = n;
    json sigs = json::array();
    for (const auto& g : v.signatures)
      sigs.push_back({{"signature", g.signature},
                      {"outcome", harness::to_string(g.result)},
                      {"phase", g.when == phase::none ? json(nullptr) : json(harness::to_string(g.when))},
                      {"count", g.count}});
    variants.push_back({{"name", v.name},
                        {"command", v.command.empty() ? json(nullptr) : json(v.command)},
                        {"faults", v.faults},
                        {"expect", to_string(v.expect)},
                        {"runs", v.runs},
                        {"failures", v.failures},
                        {"outcomes", outcomes},
                        {"signatures", sigs}});
  }
  return {{"format", format_name}, {"version", baseline_version}, {"created", b.created},
          {"sources", b.sources},    {"runs", b.runs},              {"variants", variants}};
}

core::result<baseline> parse_baseline(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return core::status(core::errc::corrupt, "empty file, not a baseline");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 1: ..." without the tag.
    std::string what = e.what();
    if (auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos) what = what.substr(close + 2);
    return core::status(core::errc::corrupt, "not JSON (truncated or not a baseline): " + detail::one_line(what));
  }
  try {
    return parse_document(j);
  } catch (const invalid& e) {
    return core::status(core::errc::corrupt, e.message);
  } catch (const json::exception& e) {
    return core::status(core::errc::corrupt, detail::one_line(e.what()));
  }
}

core::result<baseline> read_baseline(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return core::status(core::errc::invalid_argument, "baseline " + path.string() + " is a directory");
  auto text = core::io::read_file(path, 256 << 20);
  if (!text) {
    if (text.code() == core::errc::not_found) return core::status(core::errc::not_found, "baseline " + path.string() + ": no such file");
    return core::status(text.code(), "baseline " + path.string() + ": " + text.error().message());
  }
  auto b = parse_baseline(*text);
  if (!b) return core::status(b.code(), "baseline " + path.string() + ": " + b.error().message());
  return b;
}

std::string_view to_string(finding_kind k) noexcept {
  switch (k) {
    case finding_kind::worse: return "worse";
    case finding_kind::new_outcome: return "new outcome";
    case finding_kind::new_signature: return "new signature";
    case finding_kind::better: return "better";
    case finding_kind::gone_outcome: return "outcome gone";
    case finding_kind::gone_signature: return "signature gone";
    case finding_kind::not_significant: return "not significant";
    case finding_kind::new_variant: return "new variant";
    case finding_kind::missing_variant: return "missing variant";
  }
  return "?";
}

namespace {

using harness::variant_identity;

// A variant as the gate names it: its display name with its fault spec, since variants match by
// identity and spec (an amplified campaign's variant is another variant than the bare one of the
// same name). A variant without faults says so where its identity also runs with a spec.
std::string gate_label(const std::string& shown, const std::string& faults, bool also_with_faults) {
  if (!faults.empty()) return shown + " [" + faults + "]";
  return also_with_faults ? shown + " [no faults]" : shown;
}

// The specs `id` has in `specs` other than `faults`, for a note: "no faults, [x=kill]".
std::string other_specs(const std::multimap<variant_identity, std::string>& specs, const variant_identity& id, const std::string& faults) {
  std::string out;
  for (auto [it, end] = specs.equal_range(id); it != end; ++it) {
    if (it->second == faults) continue;
    out += (out.empty() ? "" : ", ") + (it->second.empty() ? std::string("no faults") : "[" + it->second + "]");
  }
  return out;
}

// "SIGABRT": a crash named by its signal alone (its stacks were lost: an overwritten core, a
// crash report never written), as classify() names one without frames.
bool signal_only(const std::string& signature) {
  if (signature.size() < 4 || signature.rfind("SIG", 0) != 0) return false;
  return std::all_of(signature.begin() + 3, signature.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-';
  });
}

// Whether `sig` (a signal's name) is the signal of a crash signature: "SIGABRT", "SIGABRT: f".
bool crash_of_signal(const baseline_signature& s, const std::string& sig) {
  return s.result == outcome::crash && s.signature.rfind(sig, 0) == 0 &&
         (s.signature.size() == sig.size() || s.signature.compare(sig.size(), 1, ":") == 0);
}

}  // namespace

gate_result compare(const baseline& base, const report_model& current, double alpha) {
  gate_result g;
  std::vector<finding> fails, better, notes;
  using key = std::pair<variant_identity, std::string>;  // identity, faults
  std::set<key> matched;
  std::map<key, const baseline_variant*> base_of;
  for (const auto& bv : base.variants) base_of[{bv.id(), bv.faults}] = &bv;
  std::set<variant_identity> named_with_faults;
  std::multimap<variant_identity, std::string> base_specs, current_specs;
  // Display names over both sides, so that a baseline's variant and a current one of another
  // identity never share one.
  std::map<variant_identity, std::size_t> index;
  std::vector<variant_identity> ids;
  std::vector<std::string> names;
  auto know = [&](const variant_identity& id, const std::string& name, const std::string& faults) {
    if (index.emplace(id, ids.size()).second) {
      ids.push_back(id);
      names.push_back(name);
    }
    if (!faults.empty()) named_with_faults.insert(id);
  };
  for (const auto& bv : base.variants) {
    base_specs.emplace(bv.id(), bv.faults);
    know(bv.id(), bv.name, bv.faults);
  }
  for (const auto& v : current.variants) {
    current_specs.emplace(v.id, v.faults);
    know(v.id, v.name, v.faults);
  }
  const std::vector<std::string> shown = display_names(ids, names);
  auto label_of = [&](const variant_identity& id, const std::string& faults) {
    return gate_label(shown[index.at(id)], faults, named_with_faults.count(id) > 0);
  };

  for (const auto& v : current.variants) {
    const bool detection = v.expect == expectation::detection;
    const std::string what = detection ? "runs that missed the bug" : "failure rate";
    auto it = base_of.find({v.id, v.faults});
    baseline_variant empty;
    empty.name = v.name;
    empty.faults = v.faults;
    empty.expect = v.expect;
    const baseline_variant* b = it == base_of.end() ? &empty : it->second;
    const std::string label = label_of(v.id, v.faults);
    bool variant_fails = false, variant_better = false;
    auto add = [&](finding_kind kind, bool fails_gate, std::string text, double p = 1) {
      // A detection check that no longer shows an outcome or signature has not improved: it
      // may have stopped detecting (its rate says whether it got worse).
      const bool improvement = kind == finding_kind::better ||
                               (!detection && (kind == finding_kind::gone_outcome || kind == finding_kind::gone_signature));
      finding f{kind, fails_gate, improvement, label, std::move(text), p};
      variant_fails = variant_fails || fails_gate;
      if (fails_gate) {
        fails.push_back(std::move(f));
      } else if (improvement) {
        variant_better = true;
        better.push_back(std::move(f));
      } else {
        notes.push_back(std::move(f));
      }
    };

    if (it == base_of.end()) {
      const std::string others = other_specs(base_specs, v.id, v.faults);
      add(finding_kind::new_variant, false,
          std::string(others.empty() ? "not in the baseline" : "not in the baseline with this fault spec (it has " + others + ")") +
              " (" + detail::counted(v.summary.runs, "run") + " now; " + v.verdict + ")");
    } else {
      matched.insert({v.id, v.faults});
      ++g.compared;
      const proportion was{b->bad(), b->runs}, now{v.bad, v.summary.runs};
      const double p_worse = fisher_greater(was, now);
      const double p_better = fisher_less(was, now);
      const std::string change = what + " " + fraction(was.failures, was.runs) + " -> " + fraction(now.failures, now.runs);
      if (p_worse < alpha) {
        add(finding_kind::worse, true,
            change + "; Fisher's exact test, one-sided (greater): " + detail::p_value(p_worse) + " < alpha " + detail::number(alpha),
            p_worse);
      } else if (p_better < alpha) {
        add(finding_kind::better, false, change + "; Fisher's exact test, one-sided (less): " + detail::p_value(p_better), p_better);
      } else if (was.failures * now.runs != now.failures * was.runs) {
        add(finding_kind::not_significant, false,
            change + ": within chance (Fisher's exact test, one-sided: " + detail::p_value(std::min(p_worse, p_better)) + ")",
            std::min(p_worse, p_better));
      }
    }

    // Outcome classes and signatures: new ones fail a no-failure variant; a detection check's
    // are noted.
    for (outcome o : harness::all_outcomes) {
      if (o == outcome::pass) continue;
      const std::uint64_t was = get(b->outcomes, o), now = get(v.summary.outcomes, o);
      if (was == 0 && now > 0)
        add(finding_kind::new_outcome, !detection,
            "new outcome class " + std::string(harness::to_string(o)) + ": " + fraction(now, v.summary.runs) + (v.summary.runs == 1 ? " run" : " runs") +
                (b->runs ? ", never in the baseline's " + detail::thousands(b->runs) : std::string(", no baseline")));
      else if (was > 0 && now == 0 && it != base_of.end())
        add(finding_kind::gone_outcome, false,
            "outcome class " + std::string(harness::to_string(o)) + " no longer seen (baseline: " + fraction(was, b->runs) + ")");
    }
    std::set<std::string> base_sigs;
    for (const auto& s : b->signatures) base_sigs.insert(s.signature);
    std::set<std::string> now_sigs;
    for (const auto& s : v.summary.signatures) {
      now_sigs.insert(s.signature);
      if (s.signature.empty() || base_sigs.count(s.signature)) continue;
      // A crash named by its signal alone may be any crash of that signal whose stacks were
      // lost: not a new way of failing when the baseline crashed with that signal (its rate
      // still counts).
      if (s.result == outcome::crash && signal_only(s.signature) &&
          std::any_of(b->signatures.begin(), b->signatures.end(),
                      [&](const baseline_signature& bs) { return crash_of_signal(bs, s.signature); })) {
        add(finding_kind::new_signature, false,
            "signal-only signature " + detail::outcome_and_phase(s.result, s.when) + " \"" + detail::one_line(s.signature) + "\" in " +
                detail::thousands(s.count) + (s.count == 1 ? " run" : " runs") +
                " (no stacks to tell it from the baseline's crashes of the same signal; first " + s.first_run + ")");
        continue;
      }
      add(finding_kind::new_signature, !detection,
          "new signature " + detail::outcome_and_phase(s.result, s.when) + " \"" + detail::one_line(s.signature) + "\" in " +
              detail::thousands(s.count) + (s.count == 1 ? " run" : " runs") + " (first " + s.first_run +
              (s.first_log.empty() ? "" : ", log " + s.first_log) + ")");
    }
    if (it != base_of.end()) {
      for (const auto& s : b->signatures) {
        if (s.signature.empty() || now_sigs.count(s.signature)) continue;
        add(finding_kind::gone_signature, false,
            "signature no longer seen: " + detail::outcome_and_phase(s.result, s.when) + " \"" + detail::one_line(s.signature) + "\" (baseline: " +
                detail::thousands(s.count) + (s.count == 1 ? " run)" : " runs)"));
      }
    }
    if (variant_fails) ++g.failing_variants;
    else if (variant_better) ++g.improved_variants;
  }
  for (const auto& bv : base.variants) {
    if (matched.count({bv.id(), bv.faults})) continue;
    const std::string others = other_specs(current_specs, bv.id(), bv.faults);
    finding f{finding_kind::missing_variant, false, false, label_of(bv.id(), bv.faults),
              "in the baseline (" + detail::counted(bv.runs, "run") + ") but not in the current runs" +
                  (others.empty() ? std::string() : " with this fault spec (they have " + others + ")") + ": not compared",
              1};
    notes.push_back(std::move(f));
  }
  g.passed = fails.empty();
  for (auto* part : {&fails, &better, &notes})
    for (auto& f : *part) g.findings.push_back(std::move(f));
  return g;
}

std::string format(const finding& f) {
  const char* tag = f.fails ? "FAIL     " : f.improvement ? "improved " : "note     ";
  return std::string(tag) + detail::one_line(f.variant) + ": " + detail::one_line(f.text);
}

}  // namespace faultline::reports
