// The regression gate: compares the runs of a current campaign with a baseline written from an
// earlier one, and fails only on evidence of a regression.
//
//   auto base = reports::read_baseline("baseline.json");        // validated; errors are one line
//   auto cur = reports::load_report({"out/run"});
//   auto g = reports::compare(*base, *cur, 0.01);
//   for (const auto& f : g.findings) std::cout << format(f) << "\n";
//   return g.passed ? 0 : 1;
//
// Variants are matched by identity (harness::identity_of: a scenario's name, or a command's whole
// command line as given) and fault spec, so `python3 a.py` is never compared with `python3 b.py`,
// and an `exec` campaign of a command matches a soak of the same command and spec. Findings name
// a variant as the reports do (display_names: "exit/a", "v1/exit_race", "python3 a.py"), with its
// spec ("exit/a [exit/end=delay(5ms)]"; "exit/a [no faults]" where it also runs with a spec), so
// an amplified campaign's variant is told from the bare one. For each matched variant:
//   - its rate of bad runs (failures; for a detection check, runs that missed the bug, errors
//     included) is compared with Fisher's exact test, one-sided: a p-value below alpha that the
//     current rate is greater is a regression (it fails the gate, naming the test, counts, rates
//     and p-value); below alpha that it is less, an improvement;
//   - an outcome class other than pass that the baseline never saw (a first hang), and a failure
//     signature it never saw, fail the gate; one it saw that is gone now is an improvement. A
//     crash signed by its signal alone ("SIGABRT": its stacks were lost, e.g. an overwritten
//     core) is only noted when the baseline holds a crash of that signal (it still counts in
//     the rate).
// A detection check's new or vanished outcome classes and signatures are only noted (a planted
// bug may show itself in more than one way; its detection rate alone says whether it regressed
// or improved). A
// variant new in the current runs is held to an empty baseline: any failure of a no-failure
// variant is a new outcome and signature. A baseline variant the current runs lack is noted
// (not compared), as is every change that is not significant.
//
// Each variant is tested at `alpha` on its own (no correction for the number of variants: a
// clean suite has no failures, and a rate that moves by chance rarely reaches 0.01).
//
// The baseline file (JSON, "format": "faultline-baseline", "version": 2):
//   {"format", "version", "created", "sources": [...], "runs",
//    "variants": [{"name", "command", "faults", "expect": "no-failure"|"detection", "runs",
//                  "failures", "outcomes": {"pass": n, ...}, "signatures": [{"signature",
//                  "outcome", "phase", "count"}]}]}
// "command" is a command's argv as given, null for a scenario (known by its name). parse_baseline
// checks all of it (types, counts that add up, known outcomes, no variant twice) and says what is
// wrong in one line. Version 1 had no "command": it named a command's variant by its program alone
// ("python3"), which may stand for several command lines pooled, so a version 1 baseline is read
// only when each of its variants is a scenario's (a name "family/name", which a program's file
// name never is) and refused otherwise, saying to write a new one.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "harness/results/results.h"
#include "reports/report_model.h"

namespace faultline::reports {

/// The baseline format this build writes (it reads this one and version 1, see above).
inline constexpr int baseline_version = 2;
/// The default significance level of the gate.
inline constexpr double default_alpha = 0.01;

/// A failure signature of a baseline variant.
struct baseline_signature {
  std::string signature;
  harness::outcome result = harness::outcome::fail;
  harness::phase when = harness::phase::none;
  std::uint64_t count = 0;
};

/// One variant's runs, as the gate remembers them.
struct baseline_variant {
  std::string name;                  ///< as recorded: a scenario's name, a command's program
  std::vector<std::string> command;  ///< a command's argv as given; empty for a scenario
  std::string faults;
  expectation expect = expectation::no_failure;
  std::uint64_t runs = 0;
  std::uint64_t failures = 0;  ///< runs that did not pass
  std::map<harness::outcome, std::uint64_t> outcomes;  ///< every outcome, zero counts included
  std::vector<baseline_signature> signatures;

  /// Runs that count against it: failures (no_failure), or runs that missed the bug (detection).
  [[nodiscard]] std::uint64_t bad() const;
  /// What it is a baseline of: a command (`command`) or a scenario (`name`).
  [[nodiscard]] harness::variant_identity id() const;
};

/// What a baseline file holds.
struct baseline {
  int version = baseline_version;    ///< the version it was read as (to_json writes baseline_version)
  std::string created;               ///< ISO 8601 UTC
  std::vector<std::string> sources;  ///< the results files it was made from
  std::uint64_t runs = 0;
  std::vector<baseline_variant> variants;
};

/// The baseline of `m`, stamped `created`.
baseline make_baseline(const report_model& m, std::string created);

/// The file's JSON.
nlohmann::json to_json(const baseline& b);

/// Parses and validates a baseline file's text. Errors: corrupt, with a one-line message saying
/// what is wrong and where ("variants[2].runs: expected a whole number").
core::result<baseline> parse_baseline(std::string_view text);

/// Reads and validates a baseline file. Errors: not_found, io_error, or parse_baseline's, each
/// prefixed with the path.
core::result<baseline> read_baseline(const std::filesystem::path& path);

/// What the gate found about one variant.
enum class finding_kind {
  worse,            ///< the bad-run rate rose significantly (fails)
  new_outcome,      ///< an outcome class the baseline never saw (fails for a no-failure variant)
  new_signature,    ///< a failure signature the baseline never saw (fails for a no-failure variant)
  better,           ///< the bad-run rate fell significantly
  gone_outcome,     ///< an outcome class of the baseline not seen now (an improvement, but not for a detection check)
  gone_signature,   ///< a signature of the baseline not seen now (likewise)
  not_significant,  ///< the rate moved, within chance
  new_variant,      ///< not in the baseline
  missing_variant,  ///< in the baseline, not in the current runs
};

/// "worse", "new outcome", ...
std::string_view to_string(finding_kind k) noexcept;

/// One thing the gate has to say.
struct finding {
  finding_kind kind = finding_kind::not_significant;
  bool fails = false;        ///< this finding fails the gate
  bool improvement = false;  ///< an improvement (a lower rate; an outcome or signature of a no-failure variant gone)
  std::string variant;  ///< the variant: "name", or "name [faults]" (see above)
  std::string text;     ///< what, with counts (and for a rate, the test and its p-value)
  double p = 1;         ///< the test's p-value (worse, better, not_significant)
};

/// The gate's verdict.
struct gate_result {
  std::vector<finding> findings;  ///< failing findings first, then improvements, then notes
  bool passed = true;
  std::uint64_t compared = 0;     ///< variants in both
  std::uint64_t failing_variants = 0;
  std::uint64_t improved_variants = 0;
};

/// Compares `current` with `base` at significance level `alpha` (0 < alpha < 1).
gate_result compare(const baseline& base, const report_model& current, double alpha);

/// "FAIL      exit/static-pool: failure rate worse: ..." / "improved  ..." / "note      ...".
std::string format(const finding& f);

}  // namespace faultline::reports
