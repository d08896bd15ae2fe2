// The regression gate: a significantly worse rate fails (naming the test and p-value), the same
// or a chance-sized change passes, an improvement is printed, a new outcome class or signature
// fails a clean variant but is only noted for a detection check, and a baseline survives its
// own round trip while every malformed one is refused in one line.
#include "reports/gate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using testing::operator+;

report_model model_of(const fs::path& dir, const std::vector<harness::run_record>& recs) {
  testing::write_results(dir, recs);
  auto m = load_report({dir});
  EXPECT_TRUE(m) << m.error().message();
  return *m;
}

// A baseline and a current campaign of variant exit/a.
struct gate_case {
  testing::temp_dir dir;
  baseline base;
  report_model current;

  gate_case(const std::vector<harness::run_record>& before, const std::vector<harness::run_record>& after) {
    base = make_baseline(model_of(dir.path() / "base", before), "2026-01-01T00:00:00.000Z");
    current = model_of(dir.path() / "now", after);
  }
};

std::vector<finding> of_kind(const gate_result& g, finding_kind k) {
  std::vector<finding> out;
  for (const auto& f : g.findings)
    if (f.kind == k) out.push_back(f);
  return out;
}

std::string dump(const gate_result& g) {
  std::string s;
  for (const auto& f : g.findings) s += format(f) + "\n";
  return s;
}

TEST(gate, fails_on_a_significantly_worse_rate_naming_test_and_p_value) {
  gate_case c(testing::runs("exit/a", 100, 1, outcome::crash, "SIGSEGV: f"), testing::runs("exit/a", 100, 12, outcome::crash, "SIGSEGV: f"));
  auto g = compare(c.base, c.current, 0.01);
  EXPECT_FALSE(g.passed) << dump(g);
  auto worse = of_kind(g, finding_kind::worse);
  ASSERT_EQ(worse.size(), 1u) << dump(g);
  EXPECT_TRUE(worse[0].fails);
  EXPECT_NEAR(worse[0].p, 0.00126974872793, 1e-9);
  EXPECT_EQ(format(worse[0]),
            "FAIL     exit/a: failure rate 1 of 100 (1.0%) -> 12 of 100 (12.0%); Fisher's exact test, one-sided (greater): p = 0.0013 < alpha 0.01");
  EXPECT_EQ(g.findings.front().kind, finding_kind::worse) << "failing findings come first";
  EXPECT_EQ(g.failing_variants, 1u);
}

TEST(gate, passes_the_same_and_a_change_within_chance) {
  gate_case same(testing::runs("exit/a", 100, 2, outcome::crash, "SIGSEGV: f"), testing::runs("exit/a", 100, 2, outcome::crash, "SIGSEGV: f"));
  auto g = compare(same.base, same.current, 0.01);
  EXPECT_TRUE(g.passed) << dump(g);
  EXPECT_TRUE(g.findings.empty()) << dump(g);
  EXPECT_EQ(g.compared, 1u);

  gate_case chance(testing::runs("exit/a", 100, 1, outcome::crash, "SIGSEGV: f"), testing::runs("exit/a", 100, 4, outcome::crash, "SIGSEGV: f"));
  auto h = compare(chance.base, chance.current, 0.01);
  EXPECT_TRUE(h.passed) << dump(h);
  auto ns = of_kind(h, finding_kind::not_significant);
  ASSERT_EQ(ns.size(), 1u) << dump(h);
  EXPECT_NE(ns[0].text.find("within chance"), std::string::npos);
  // The same change is a regression at a looser alpha.
  EXPECT_FALSE(compare(chance.base, chance.current, 0.2).passed);
}

TEST(gate, prints_what_improved) {
  gate_case c(testing::runs("exit/a", 100, 10, outcome::hang, "futex_wait | join"), testing::runs("exit/a", 100, 0));
  auto g = compare(c.base, c.current, 0.01);
  EXPECT_TRUE(g.passed) << dump(g);
  EXPECT_EQ(g.improved_variants, 1u);
  auto better = of_kind(g, finding_kind::better);
  ASSERT_EQ(better.size(), 1u) << dump(g);
  EXPECT_NEAR(better[0].p, 0.000771026062718, 1e-9);
  EXPECT_EQ(format(better[0]).rfind("improved exit/a: failure rate 10 of 100 (10.0%) -> 0 of 100 (0%)", 0), 0u) << dump(g);
  ASSERT_EQ(of_kind(g, finding_kind::gone_outcome).size(), 1u) << dump(g);
  ASSERT_EQ(of_kind(g, finding_kind::gone_signature).size(), 1u) << dump(g);
  EXPECT_TRUE(of_kind(g, finding_kind::gone_signature)[0].improvement);
  EXPECT_EQ(format(of_kind(g, finding_kind::gone_outcome)[0]), "improved exit/a: outcome class hang no longer seen (baseline: 10 of 100 (10.0%))");
}

TEST(gate, fails_on_a_new_signature_or_outcome_class) {
  auto before = testing::runs("exit/a", 100, 5, outcome::crash, "SIGSEGV: f");
  auto after = testing::runs("exit/a", 100, 5, outcome::crash, "SIGSEGV: f");
  after[5].result = outcome::crash;
  after[5].signature = "SIGSEGV: g | other";
  after[5].when = harness::phase::run;
  after[6].result = outcome::hang;
  after[6].signature = "futex_wait";
  gate_case c(before, after);
  auto g = compare(c.base, c.current, 0.01);
  EXPECT_FALSE(g.passed) << dump(g);
  EXPECT_TRUE(of_kind(g, finding_kind::worse).empty()) << "7 of 100 against 5 of 100 is no significant rise";
  auto sigs = of_kind(g, finding_kind::new_signature);
  ASSERT_EQ(sigs.size(), 2u) << dump(g);
  EXPECT_TRUE(sigs[0].fails);
  EXPECT_NE(format(sigs[0]).find("FAIL     exit/a: new signature crash/run \"SIGSEGV: g | other\" in 1 run (first exit-a.s1005"),
            std::string::npos)
      << dump(g);
  auto outcomes = of_kind(g, finding_kind::new_outcome);
  ASSERT_EQ(outcomes.size(), 1u) << dump(g);
  EXPECT_NE(outcomes[0].text.find("new outcome class hang: 1 of 100 (1.0%) runs, never in the baseline's 100"), std::string::npos) << dump(g);
}

TEST(gate, judges_a_detection_check_by_its_detection_rate) {
  const std::string faults = "bug/x=print";
  // Detected in 20 of 20, then in 5 of 20 with a new way of failing: the rate fails the gate,
  // the new signature is only noted.
  gate_case c(testing::runs("exit/a@bug/x", 20, 20, outcome::fail, "invariant x", 0, 1, faults),
              testing::runs("exit/a@bug/x", 20, 5, outcome::crash, "SIGSEGV: x", 0, 1, faults));
  auto g = compare(c.base, c.current, 0.01);
  EXPECT_FALSE(g.passed) << dump(g);
  auto worse = of_kind(g, finding_kind::worse);
  ASSERT_EQ(worse.size(), 1u) << dump(g);
  EXPECT_NE(worse[0].text.find("runs that missed the bug 0 of 20 (0%) -> 15 of 20 (75.0%)"), std::string::npos) << dump(g);
  for (const auto& f : g.findings)
    if (f.kind != finding_kind::worse) {
      EXPECT_FALSE(f.fails) << format(f);
    }
  EXPECT_EQ(of_kind(g, finding_kind::new_signature).size(), 1u) << dump(g);
  // Its old way of failing is gone: not an improvement of a detection check.
  ASSERT_EQ(of_kind(g, finding_kind::gone_signature).size(), 1u) << dump(g);
  EXPECT_FALSE(of_kind(g, finding_kind::gone_signature)[0].improvement);
  EXPECT_EQ(format(of_kind(g, finding_kind::gone_outcome)[0]).rfind("note ", 0), 0u) << dump(g);
  EXPECT_EQ(g.improved_variants, 0u);

  // More detections than before is no regression.
  gate_case d(testing::runs("exit/a@bug/x", 20, 10, outcome::fail, "invariant x", 0, 1, faults),
              testing::runs("exit/a@bug/x", 20, 20, outcome::fail, "invariant x", 0, 1, faults));
  EXPECT_TRUE(compare(d.base, d.current, 0.01).passed);
}

TEST(gate, holds_a_new_variant_to_an_empty_baseline_and_notes_a_missing_one) {
  gate_case c(testing::runs("exit/a", 10) + testing::runs("exit/gone", 10, 0, outcome::pass, "", 100),
              testing::runs("exit/a", 10) + testing::runs("exit/new", 10, 1, outcome::crash, "SIGSEGV: n", 200) +
                  testing::runs("exit/new-clean", 10, 0, outcome::pass, "", 300));
  auto g = compare(c.base, c.current, 0.01);
  EXPECT_FALSE(g.passed) << dump(g);
  EXPECT_EQ(g.compared, 1u);
  EXPECT_EQ(g.failing_variants, 1u) << dump(g);
  EXPECT_EQ(of_kind(g, finding_kind::new_variant).size(), 2u) << dump(g);
  auto missing = of_kind(g, finding_kind::missing_variant);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].variant, "exit/gone");
  for (const auto& f : g.findings)
    if (f.fails) {
      EXPECT_EQ(f.variant, "exit/new") << format(f);
    }
}

TEST(gate, names_each_variant_with_its_fault_spec) {
  // The same scenario bare in the baseline and amplified now: two variants, each named with its
  // spec, not one name both "not in the baseline" and "not in the current runs".
  const std::string amplified = "exit/end=delay(5ms)";
  gate_case c(testing::runs("exit/a", 20), testing::runs("exit/a", 20, 15, outcome::crash, "SIGSEGV: f", 0, 1, amplified));
  auto g = compare(c.base, c.current, 0.01);
  auto added = of_kind(g, finding_kind::new_variant);
  ASSERT_EQ(added.size(), 1u) << dump(g);
  EXPECT_EQ(added[0].variant, "exit/a [exit/end=delay(5ms)]");
  EXPECT_NE(added[0].text.find("not in the baseline with this fault spec (it has no faults)"), std::string::npos) << dump(g);
  auto missing = of_kind(g, finding_kind::missing_variant);
  ASSERT_EQ(missing.size(), 1u) << dump(g);
  EXPECT_EQ(missing[0].variant, "exit/a [no faults]");
  EXPECT_NE(missing[0].text.find("with this fault spec (they have [exit/end=delay(5ms)])"), std::string::npos) << dump(g);
  for (const auto& f : g.findings) EXPECT_NE(f.variant, "exit/a") << format(f);

  // Matched variants with a spec carry it too.
  gate_case d(testing::runs("exit/b", 20, 0, outcome::pass, "", 0, 1, amplified),
              testing::runs("exit/b", 20, 20, outcome::crash, "SIGSEGV: f", 0, 1, amplified));
  auto worse = of_kind(compare(d.base, d.current, 0.01), finding_kind::worse);
  ASSERT_EQ(worse.size(), 1u);
  EXPECT_EQ(worse[0].variant, "exit/b [exit/end=delay(5ms)]");
}

TEST(gate, a_signal_only_signature_is_no_new_signature_when_the_baseline_crashed_with_that_signal) {
  // 5 of 100 crashed with SIGABRT in both; now two of them lost their cores.
  auto before = testing::runs("exit/a", 100, 5, outcome::crash, "SIGABRT: pool::release | main");
  auto after = testing::runs("exit/a", 100, 5, outcome::crash, "SIGABRT: pool::release | main");
  after[0].signature = after[1].signature = "SIGABRT";
  gate_case c(before, after);
  auto g = compare(c.base, c.current, 0.01);
  EXPECT_TRUE(g.passed) << dump(g);
  auto sigs = of_kind(g, finding_kind::new_signature);
  ASSERT_EQ(sigs.size(), 1u) << dump(g);
  EXPECT_FALSE(sigs[0].fails);
  EXPECT_NE(sigs[0].text.find("signal-only signature crash/exit \"SIGABRT\" in 2 runs"), std::string::npos) << dump(g);

  // Another signal than the baseline's, or a signature with frames, is still new.
  auto other = after;
  other[0].signature = other[1].signature = "SIGSEGV";
  gate_case d(before, other);
  auto g2 = compare(d.base, d.current, 0.01);
  EXPECT_FALSE(g2.passed) << dump(g2);
  ASSERT_EQ(of_kind(g2, finding_kind::new_signature).size(), 1u) << dump(g2);
  EXPECT_TRUE(of_kind(g2, finding_kind::new_signature)[0].fails);
  auto framed = after;
  framed[0].signature = "SIGABRT: other | main";
  framed[1].signature = "SIGABRT: other | main";
  gate_case e(before, framed);
  EXPECT_FALSE(compare(e.base, e.current, 0.01).passed);
}

TEST(gate, tells_commands_that_share_a_program_name_apart) {
  // Issue 38: ./v1/exit_race and ./v2/exit_race were pooled into one variant, so v1 getting worse
  // while v2 got better by as much passed the gate. Each command line is a variant of its own.
  testing::temp_dir dir;
  auto race = [](const std::string& program, std::uint64_t crashes, std::uint64_t first) {
    return testing::command_runs({program}, 200, crashes, outcome::crash, "SIGSEGV: race", first);
  };
  testing::write_results(dir.path() / "base-v1", race("./v1/exit_race", 48, 0));
  testing::write_results(dir.path() / "base-v2", race("./v2/exit_race", 93, 1000));
  testing::write_results(dir.path() / "now-v1", race("./v1/exit_race", 93, 2000));
  testing::write_results(dir.path() / "now-v2", race("./v2/exit_race", 48, 3000));
  auto before = load_report({dir.path() / "base-v1", dir.path() / "base-v2"});
  auto after = load_report({dir.path() / "now-v1", dir.path() / "now-v2"});
  ASSERT_TRUE(before && after);
  const baseline b = make_baseline(*before, "2026-01-01T00:00:00.000Z");
  ASSERT_EQ(b.variants.size(), 2u);
  // The baseline records what was run.
  const nlohmann::json j = to_json(b);
  EXPECT_EQ(j["variants"][0]["command"], nlohmann::json::array({"./v1/exit_race"})) << j.dump(2);
  EXPECT_EQ(j["variants"][1]["command"], nlohmann::json::array({"./v2/exit_race"})) << j.dump(2);
  auto back = parse_baseline(j.dump());
  ASSERT_TRUE(back) << back.error().message();
  auto g = compare(*back, *after, 0.01);
  EXPECT_FALSE(g.passed) << dump(g);
  EXPECT_EQ(g.compared, 2u) << dump(g);
  auto worse = of_kind(g, finding_kind::worse);
  ASSERT_EQ(worse.size(), 1u) << dump(g);
  EXPECT_EQ(worse[0].variant, "v1/exit_race");
  auto better = of_kind(g, finding_kind::better);
  ASSERT_EQ(better.size(), 1u) << dump(g);
  EXPECT_EQ(better[0].variant, "v2/exit_race");

  // Arguments tell scripts of one interpreter apart.
  testing::write_results(dir.path() / "a", testing::command_runs({"python3", "a.py"}, 10, 4, outcome::fail, "exit 1"));
  testing::write_results(dir.path() / "b", testing::command_runs({"python3", "b.py"}, 5, 0, outcome::pass, "", 100));
  auto scripts = load_report({dir.path() / "a", dir.path() / "b"});
  ASSERT_TRUE(scripts);
  auto same = compare(make_baseline(*scripts, "2026-01-01T00:00:00.000Z"), *scripts, 0.01);
  EXPECT_TRUE(same.passed) << dump(same);
  EXPECT_EQ(same.compared, 2u) << dump(same);
}

TEST(gate, matches_a_command_soak_with_an_exec_of_the_same_command_and_spec) {
  // Issue 38: a baseline written from `soak -- CMD` named its spec "drawn per run from the fault
  // space", so an `exec` of the same command and spec was "new outcome class ... no baseline".
  testing::temp_dir dir;
  const std::string spec = "exit/end=delay(1ms)";
  testing::write_results(dir.path() / "soak", testing::command_runs({"./prog"}, 40, 2, outcome::crash, "SIGSEGV: f", 0, spec));
  std::ofstream(dir.path() / "soak" / "soak.json")
      << nlohmann::json{{"seed", 1},
                        {"scenarios", nlohmann::json::array()},
                        {"command", {{"argv", nlohmann::json::array({"./prog"})}, {"faults", spec}}}}
             .dump();
  testing::write_results(dir.path() / "exec", testing::command_runs({"./prog"}, 20, 1, outcome::crash, "SIGSEGV: f", 0, spec));
  auto soak = load_report({dir.path() / "soak"});
  auto exec = load_report({dir.path() / "exec"});
  ASSERT_TRUE(soak && exec);
  const baseline b = make_baseline(*soak, "2026-01-01T00:00:00.000Z");
  ASSERT_EQ(b.variants.size(), 1u);
  EXPECT_EQ(b.variants[0].faults, spec);
  auto g = compare(b, *exec, 0.01);
  EXPECT_TRUE(g.passed) << dump(g);
  EXPECT_EQ(g.compared, 1u) << dump(g);
  EXPECT_TRUE(of_kind(g, finding_kind::new_variant).empty()) << dump(g);
}

TEST(baseline, version_1_is_read_for_scenarios_and_refused_for_commands) {
  // Version 1 named a command's variant by its program alone ("python3"), which may stand for
  // several command lines pooled: such a baseline is refused, saying how to write a new one. Its
  // scenarios' variants were named as they still are.
  auto v1 = [](const std::string& name) {
    return nlohmann::json{{"format", "faultline-baseline"},
                          {"version", 1},
                          {"created", "2026-01-01T00:00:00.000Z"},
                          {"sources", nlohmann::json::array({"out/results.jsonl"})},
                          {"runs", 10},
                          {"variants",
                           nlohmann::json::array({{{"name", name},
                             {"faults", ""},
                             {"expect", "no-failure"},
                             {"runs", 10},
                             {"failures", 0},
                             {"outcomes", {{"pass", 10}}},
                             {"signatures", nlohmann::json::array()}}})}}
        .dump();
  };
  auto scenarios = parse_baseline(v1("exit/a"));
  ASSERT_TRUE(scenarios) << scenarios.error().message();
  testing::temp_dir dir;
  auto g = compare(*scenarios, model_of(dir.path(), testing::runs("exit/a", 10)), 0.01);
  EXPECT_TRUE(g.passed) << dump(g);
  EXPECT_EQ(g.compared, 1u) << dump(g);
  auto commands = parse_baseline(v1("python3"));
  ASSERT_FALSE(commands);
  EXPECT_EQ(commands.code(), core::errc::corrupt);
  EXPECT_NE(commands.error().message().find("variants[0]: baseline version 1 names the command \"python3\" by its program alone"),
            std::string::npos)
      << commands.error().message();
  EXPECT_NE(commands.error().message().find("faultline gate --write-baseline"), std::string::npos) << commands.error().message();
}

TEST(baseline, survives_its_round_trip) {
  testing::temp_dir dir;
  auto m = model_of(dir.path(), testing::runs("exit/a", 50, 3, outcome::crash, "SIGSEGV: \"quoted\" \x01", 0, 2) +
                                    testing::runs("exit/a@bug/x", 10, 10, outcome::fail, "inv", 1, 2, "bug/x=print"));
  const baseline b = make_baseline(m, "2026-01-01T00:00:00.000Z");
  auto back = parse_baseline(to_json(b).dump(2));
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->runs, 60u);
  ASSERT_EQ(back->variants.size(), 2u);
  EXPECT_EQ(back->variants[0].failures, 3u);
  EXPECT_EQ(back->variants[0].signatures[0].signature, "SIGSEGV: \"quoted\" \x01");
  EXPECT_EQ(back->variants[1].expect, expectation::detection);
  EXPECT_EQ(back->variants[1].bad(), 0u);
  EXPECT_EQ(back->sources, b.sources);
  // A campaign compared with its own baseline passes with nothing to say.
  auto g = compare(*back, m, 0.01);
  EXPECT_TRUE(g.passed);
  EXPECT_TRUE(g.findings.empty()) << dump(g);
}

TEST(baseline, refuses_malformed_files_in_one_line) {
  testing::temp_dir dir;
  auto m = model_of(dir.path(), testing::runs("exit/a", 10, 2, outcome::crash, "SIGSEGV: f"));
  const nlohmann::json good = to_json(make_baseline(m, "2026-01-01T00:00:00.000Z"));
  auto error_of = [](const std::string& text) {
    auto b = parse_baseline(text);
    EXPECT_FALSE(b) << text;
    if (b) return std::string();
    EXPECT_EQ(b.code(), core::errc::corrupt);
    EXPECT_EQ(b.error().message().find('\n'), std::string::npos) << b.error().message();
    return b.error().message();
  };
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    return j.dump();
  };
  EXPECT_EQ(error_of(""), "empty file, not a baseline");
  EXPECT_NE(error_of("garbage").find("not JSON"), std::string::npos);
  const std::string text = good.dump(2);
  EXPECT_NE(error_of(text.substr(0, text.size() / 2)).find("not JSON (truncated or not a baseline)"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("not a faultline baseline"), std::string::npos);
  EXPECT_NE(error_of("{\"version\": 1}").find("not a faultline baseline"), std::string::npos);
  EXPECT_EQ(error_of(with([](auto& j) { j["version"] = 3; })),
            "baseline version 3 is not supported (this faultline reads versions 1 and 2; write a new one with faultline gate "
            "--write-baseline)");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0].erase("command"); })), "variants[0]: missing \"command\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["command"] = nlohmann::json::array(); })),
            "variants[0].command: expected null (a scenario) or a command's argv (an array of strings)");
  EXPECT_EQ(error_of(with([](auto& j) { j.erase("version"); })), "baseline: missing \"version\"");
  EXPECT_EQ(error_of(with([](auto& j) { j.erase("variants"); })), "baseline: missing \"variants\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0].erase("runs"); })), "variants[0]: missing \"runs\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["runs"] = "ten"; })), "variants[0].runs: expected a whole number, got \"ten\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["runs"] = -1; })), "variants[0].runs: expected a whole number, got -1");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["failures"] = 11; })), "variants[0].failures: 11 is more than its 10 runs");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["outcomes"]["pass"] = 9; })),
            "variants[0].outcomes: the counts add up to 11, not to its 10 runs");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["outcomes"]["exploded"] = 0; })), "variants[0].outcomes: unknown outcome \"exploded\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["expect"] = "maybe"; })),
            "variants[0].expect: expected \"no-failure\" or \"detection\", got \"maybe\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"][0]["signatures"][0]["outcome"] = "pass"; })),
            "variants[0].signatures[0].outcome: expected an outcome other than pass, got \"pass\"");
  EXPECT_EQ(error_of(with([](auto& j) { j["variants"].push_back(j["variants"][0]); })),
            "variants[1]: variant \"exit/a\" with these faults appears twice");
  EXPECT_EQ(error_of(with([](auto& j) { j["runs"] = 11; })), "runs: 11, but the variants' runs add up to 10");
  EXPECT_TRUE(parse_baseline(good.dump()));
}

TEST(baseline, read_names_the_file) {
  testing::temp_dir dir;
  auto missing = read_baseline(dir.path() / "nope.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(), "baseline " + (dir.path() / "nope.json").string() + ": no such file");
  std::ofstream(dir.path() / "bad.json") << "{\"format\": \"faultline-baseline\", \"version\": 1";
  auto bad = read_baseline(dir.path() / "bad.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message().rfind("baseline " + (dir.path() / "bad.json").string() + ": not JSON", 0), 0u) << bad.error().message();
}

}  // namespace
}  // namespace faultline::reports
