// Reading and merging results: shards of one campaign add up, the same run read twice is
// counted once (and the note says so), other campaigns' runs that happen to share a name, seed
// and run number are not mistaken for duplicates, a torn last line is tolerated as the harness
// tolerates it, and bad input is an error naming the file and line. Variants carry their
// expectation, verdict, repro line, durations and timeline.
#include "reports/report_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using testing::operator+;

bool has_note(const report_model& m, const std::string& part) {
  for (const auto& n : m.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

std::string all_notes(const report_model& m) {
  std::string s;
  for (const auto& n : m.notes) s += n + "\n";
  return s;
}

const variant_report* find(const report_model& m, const std::string& label) {
  for (const auto& v : m.variants)
    if (v.label == label) return &v;
  return nullptr;
}

TEST(load_report, summarises_one_campaign_per_variant) {
  testing::temp_dir dir;
  // Two variants interleaved as a campaign numbers them: run k is variant k % 2.
  auto recs = testing::runs("exit/a", 50, 3, outcome::crash, "SIGSEGV: f | main", 0, 2) + testing::runs("exit/b", 50, 0, outcome::pass, "", 1, 2);
  testing::write_results(dir.path(), recs);
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 100u);
  ASSERT_EQ(m->variants.size(), 2u);
  EXPECT_EQ(m->variants[0].label, "exit/a");
  EXPECT_EQ(m->variants[1].label, "exit/b");
  const auto& a = m->variants[0];
  EXPECT_EQ(a.summary.runs, 50u);
  EXPECT_EQ(a.summary.failures, 3u);
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.verdict, "3 of 50 runs failed (6.0%, 95% CI 2.1%-16.2%)");
  ASSERT_EQ(a.summary.signatures.size(), 1u);
  EXPECT_EQ(a.summary.signatures[0].signature, "SIGSEGV: f | main");
  EXPECT_EQ(a.summary.signatures[0].first_log, (dir.path() / "logs/exit-a.s1000.log").string());
  EXPECT_EQ(a.repro, "faultline run exit/a --seed 1000 --repeat 1");
  EXPECT_EQ(a.repro_what, "the first failure");
  EXPECT_TRUE(m->variants[1].ok);
  EXPECT_EQ(m->variants[1].verdict, "no failure in 50 runs (rate <= 5.8% at 95%)");
  EXPECT_FALSE(m->ok());
  EXPECT_EQ(m->failed_variants(), 1u);
  EXPECT_TRUE(m->notes.empty()) << all_notes(*m);
}

TEST(load_report, merges_shards_of_one_campaign) {
  testing::temp_dir dir;
  // Shard i of 3 holds runs k with k % 3 == i.
  for (int i = 0; i < 3; ++i) {
    const fs::path d = dir.path() / ("shard-" + std::to_string(i)) / "out";
    testing::write_manifest(d, std::to_string(i) + "/3", 7, {"exit/a"});
    testing::write_results(d, testing::runs("exit/a", 10, i == 1 ? 2 : 0, outcome::hang, "futex_wait | join", i, 3));
  }
  // One directory holding the shard outputs.
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->inputs.size(), 3u);
  EXPECT_EQ(m->runs, 30u);
  EXPECT_EQ(m->duplicates, 0u);
  ASSERT_EQ(m->variants.size(), 1u);
  EXPECT_EQ(m->variants[0].summary.runs, 30u);
  EXPECT_EQ(m->variants[0].summary.outcomes.at(outcome::hang), 2u);
  EXPECT_EQ(m->variants[0].sources.size(), 3u);
  EXPECT_TRUE(m->notes.empty()) << all_notes(*m);
  ASSERT_TRUE(m->inputs[1].shard);
  EXPECT_EQ(m->inputs[1].shard->to_string(), "1/3");

  // The same, named one by one.
  auto m2 = load_report({dir.path() / "shard-0/out", dir.path() / "shard-1/out", dir.path() / "shard-2/out/results.jsonl"});
  ASSERT_TRUE(m2) << m2.error().message();
  EXPECT_EQ(m2->runs, 30u);
}

TEST(load_report, notes_a_missing_shard) {
  testing::temp_dir dir;
  for (int i : {0, 2}) {
    const fs::path d = dir.path() / ("s" + std::to_string(i));
    testing::write_manifest(d, std::to_string(i) + "/4", 7, {"exit/a"});
    testing::write_results(d, testing::runs("exit/a", 5, 0, outcome::pass, "", i, 4));
  }
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 10u);
  EXPECT_TRUE(has_note(*m, "2 shards missing (1/4, 3/4)")) << all_notes(*m);
}

TEST(load_report, counts_a_shard_given_twice_once_and_says_so) {
  testing::temp_dir dir;
  for (const char* name : {"a", "copy-of-a"}) {
    testing::write_manifest(dir.path() / name, "0/2", 7, {"exit/a"});
    testing::write_results(dir.path() / name, testing::runs("exit/a", 20, 4, outcome::crash, "SIGSEGV: f", 0, 2));
  }
  testing::write_manifest(dir.path() / "b", "1/2", 7, {"exit/a"});
  testing::write_results(dir.path() / "b", testing::runs("exit/a", 20, 0, outcome::pass, "", 1, 2));
  auto m = load_report({dir.path() / "a", dir.path() / "copy-of-a", dir.path() / "b"});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 40u);
  EXPECT_EQ(m->duplicates, 20u);
  EXPECT_EQ(m->variants[0].summary.failures, 4u);
  EXPECT_EQ(m->inputs[1].duplicates, 20u);
  EXPECT_EQ(m->inputs[1].counted, 0u);
  EXPECT_TRUE(has_note(*m, "20 of its 20 runs were already read from " + (dir.path() / "a/results.jsonl").string()))
      << all_notes(*m);
  EXPECT_TRUE(has_note(*m, "counted once")) << all_notes(*m);
}

TEST(load_report, keeps_the_first_reading_of_a_run_recorded_with_another_outcome) {
  testing::temp_dir dir;
  testing::write_manifest(dir.path() / "a", "0/1", 7, {"exit/a"});
  testing::write_results(dir.path() / "a", testing::runs("exit/a", 10, 0));
  testing::write_manifest(dir.path() / "again", "0/1", 7, {"exit/a"});
  testing::write_results(dir.path() / "again", testing::runs("exit/a", 10, 2, outcome::crash, "SIGSEGV: f"));
  auto m = load_report({dir.path() / "a", dir.path() / "again"});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 10u);
  EXPECT_EQ(m->variants[0].summary.failures, 0u);
  EXPECT_TRUE(has_note(*m, "2 of them recorded with another outcome there")) << all_notes(*m);
}

TEST(load_report, reads_a_directory_named_twice_once) {
  testing::temp_dir dir;
  testing::write_results(dir.path() / "a", testing::runs("exit/a", 10, 1, outcome::fail, "invariant x"));
  auto m = load_report({dir.path() / "a", dir.path() / "a/results.jsonl", dir.path() / "a/../a"});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 10u);
  EXPECT_EQ(m->inputs.size(), 1u);
  EXPECT_TRUE(has_note(*m, "given more than once: read once")) << all_notes(*m);
}

TEST(load_report, dedupes_copies_without_a_manifest_by_start_time) {
  testing::temp_dir dir;
  auto recs = testing::runs("cmd", 10, 1, outcome::crash, "SIGSEGV: f");
  testing::write_results(dir.path() / "a", recs);
  testing::write_results(dir.path() / "b", recs);
  // The same run numbers and seeds performed at another time are other runs.
  for (auto& r : recs) r.timestamp = "2026-02-01T00:00:00.000Z";
  testing::write_results(dir.path() / "c", recs);
  auto m = load_report({dir.path() / "a", dir.path() / "b", dir.path() / "c"});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 20u);
  EXPECT_EQ(m->duplicates, 10u);
}

TEST(load_report, does_not_merge_runs_of_different_campaigns) {
  // faultline run and faultline verify both start with run 0 of the first scenario, seed 1.
  testing::temp_dir dir;
  testing::write_manifest(dir.path() / "run", "0/1", 1, {"exit/a", "exit/b"});
  testing::write_results(dir.path() / "run", testing::runs("exit/a", 5, 0, outcome::pass, "", 0, 2));
  testing::write_manifest(dir.path() / "verify", "0/1", 1, {"exit/a", "exit/a@bug/x"});
  testing::write_results(dir.path() / "verify", testing::runs("exit/a", 5, 0, outcome::pass, "", 0, 2));
  auto m = load_report({dir.path() / "run", dir.path() / "verify"});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 10u);
  EXPECT_EQ(m->duplicates, 0u);
  EXPECT_EQ(m->variants[0].summary.runs, 10u);
}

TEST(load_report, tolerates_a_torn_last_line_and_says_so) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::runs("exit/a", 4, 1, outcome::crash, "SIGSEGV: f"), R"({"run_id":"exit-a.s1004","run":4,"na)");
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 4u);
  EXPECT_TRUE(m->inputs[0].torn_tail);
  EXPECT_TRUE(has_note(*m, "its last line is torn")) << all_notes(*m);
}

TEST(load_report, rejects_a_malformed_line_naming_file_and_line) {
  testing::temp_dir dir;
  const auto file = testing::write_results(dir.path(), testing::runs("exit/a", 2), "garbage\n" + nlohmann::json(testing::record("exit/a", 9)).dump() + "\n");
  auto m = load_report({dir.path()});
  ASSERT_FALSE(m);
  EXPECT_EQ(m.code(), core::errc::corrupt);
  EXPECT_NE(m.error().message().find(file.string() + " line 3 is malformed"), std::string::npos) << m.error().message();
}

TEST(load_report, rejects_a_record_missing_fields) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), {}, "{\"run_id\":\"x\",\"outcome\":\"pass\"}\n");
  auto m = load_report({dir.path()});
  ASSERT_FALSE(m);
  EXPECT_EQ(m.code(), core::errc::corrupt);
  EXPECT_NE(m.error().message().find("line 1"), std::string::npos) << m.error().message();
}

TEST(load_report, says_what_is_missing) {
  testing::temp_dir dir;
  auto missing = load_report({dir.path() / "nope"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.code(), core::errc::not_found);
  EXPECT_NE(missing.error().message().find("nope: no such file or directory"), std::string::npos);

  fs::create_directories(dir.path() / "empty/logs");
  auto empty = load_report({dir.path() / "empty"});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.code(), core::errc::not_found);
  EXPECT_NE(empty.error().message().find("holds no results.jsonl"), std::string::npos) << empty.error().message();

  testing::write_results(dir.path() / "none", {});
  auto no_runs = load_report({dir.path() / "none"});
  ASSERT_FALSE(no_runs);
  EXPECT_EQ(no_runs.code(), core::errc::invalid_argument);
  EXPECT_NE(no_runs.error().message().find("no runs recorded in"), std::string::npos);

  EXPECT_FALSE(load_report({}));
}

TEST(load_report, judges_a_planted_bug_point_as_a_detection_check) {
  testing::temp_dir dir;
  auto detected = testing::runs("exit/a@bug/alloc/no-drain", 20, 18, outcome::crash, "SIGSEGV: drain", 0, 1, "bug/alloc/no-drain=print");
  auto missed = testing::runs("exit/b@bug/x", 10, 0, outcome::pass, "", 100, 1, "bug/x=1*print");
  auto off = testing::runs("exit/c", 10, 1, outcome::fail, "invariant", 200, 1, "bug/x=off;sim/allocate=5%fail(ENOMEM)");
  testing::write_results(dir.path(), detected + missed + off);
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const auto* a = find(*m, "exit/a@bug/alloc/no-drain");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->expect, expectation::detection);
  EXPECT_TRUE(a->ok);
  EXPECT_EQ(a->detections, 18u);
  EXPECT_EQ(a->bad, 2u);
  EXPECT_DOUBLE_EQ(a->rate.rate, 0.9);
  EXPECT_EQ(a->repro_what, "a run that missed the bug");
  EXPECT_EQ(a->repro, "faultline run exit/a --seed 1018 --repeat 1 --faults bug/alloc/no-drain=print");
  const auto* b = find(*m, "exit/b@bug/x");
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->ok);
  EXPECT_EQ(b->verdict, "bug point never detected in 10 runs");
  const auto* c = find(*m, "exit/c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->expect, expectation::no_failure);
  EXPECT_FALSE(c->ok);
}

TEST(plants_bug_point, reads_the_spec_text) {
  EXPECT_TRUE(plants_bug_point("bug/alloc/no-drain=print"));
  EXPECT_TRUE(plants_bug_point("sim/allocate=5%fail(ENOMEM); bug/fake/skip-check = 1*print"));
  EXPECT_TRUE(plants_bug_point("bug/x=50%3*delay(5ms)"));
  EXPECT_TRUE(plants_bug_point("bug/x=off->print"));
  EXPECT_FALSE(plants_bug_point("bug/x=off"));
  EXPECT_FALSE(plants_bug_point("sim/allocate=fail"));
  EXPECT_FALSE(plants_bug_point(""));
  EXPECT_FALSE(plants_bug_point("not a spec"));
}

TEST(load_report, tells_one_name_with_two_fault_specs_apart) {
  testing::temp_dir dir;
  testing::write_results(dir.path() / "clean", testing::runs("exit/a", 10, 0));
  auto injected = testing::runs("exit/a", 10, 4, outcome::fail, "invariant", 0, 1, "sim/allocate=5%fail(ENOMEM)");
  for (auto& r : injected) r.timestamp = "2026-01-02T00:00:00.000Z";
  testing::write_results(dir.path() / "faults", injected);
  auto m = load_report({dir.path() / "clean", dir.path() / "faults"});
  ASSERT_TRUE(m) << m.error().message();
  ASSERT_EQ(m->variants.size(), 2u);
  EXPECT_EQ(m->variants[0].label, "exit/a [no faults]");
  EXPECT_EQ(m->variants[1].label, "exit/a [sim/allocate=5%fail(ENOMEM)]");
  EXPECT_EQ(m->variants[0].summary.failures, 0u);
  EXPECT_EQ(m->variants[1].summary.failures, 4u);
}

TEST(load_report, tells_commands_that_share_a_program_name_apart) {
  // Issue 38: `exec -- python3 a.py` (4/10 failed) and `exec -- python3 b.py` (0/5) were one row
  // "python3" at 26.7%, and ./v1/exit_race and ./v2/exit_race one row too. A variant is its whole
  // command line; its row's name is the shortest that no other variant's shares.
  testing::temp_dir dir;
  testing::write_results(dir.path() / "a", testing::command_runs({"python3", "a.py"}, 10, 4, outcome::fail, "exit 1"));
  testing::write_results(dir.path() / "b", testing::command_runs({"python3", "b.py"}, 5, 0, outcome::pass, "", 100));
  testing::write_results(dir.path() / "v1", testing::command_runs({"./v1/exit_race"}, 200, 48, outcome::crash, "SIGSEGV: f", 1000));
  testing::write_results(dir.path() / "v2", testing::command_runs({"./v2/exit_race"}, 200, 93, outcome::crash, "SIGSEGV: f", 2000));
  auto m = load_report({dir.path() / "a", dir.path() / "b", dir.path() / "v1", dir.path() / "v2"});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->runs, 415u);
  ASSERT_EQ(m->variants.size(), 4u);
  const auto* a = find(*m, "python3 a.py");
  const auto* b = find(*m, "python3 b.py");
  const auto* v1 = find(*m, "v1/exit_race");
  const auto* v2 = find(*m, "v2/exit_race");
  ASSERT_TRUE(a && b && v1 && v2) << m->variants[0].label << ", " << m->variants[1].label << ", " << m->variants[2].label << ", "
                                  << m->variants[3].label;
  EXPECT_EQ(a->summary.runs, 10u);
  EXPECT_EQ(a->summary.failures, 4u);
  EXPECT_EQ(b->summary.runs, 5u);
  EXPECT_EQ(b->summary.failures, 0u);
  EXPECT_EQ(v1->summary.failures, 48u);
  EXPECT_EQ(v2->summary.failures, 93u);
  EXPECT_NE(a->repro.find("-- python3 a.py"), std::string::npos) << a->repro;
  EXPECT_NE(v2->repro.find("-- ./v2/exit_race"), std::string::npos) << v2->repro;

  // Alone, a command's row is named for its program.
  auto alone = load_report({dir.path() / "a"});
  ASSERT_TRUE(alone) << alone.error().message();
  ASSERT_EQ(alone->variants.size(), 1u);
  EXPECT_EQ(alone->variants[0].label, "python3");
}

TEST(display_names, are_the_shortest_that_no_two_identities_share) {
  using harness::variant_kind;
  const std::vector<harness::variant_identity> ids = {
      {variant_kind::scenario, {"exit/a"}},         {variant_kind::command, {"python3", "a.py"}},
      {variant_kind::command, {"python3", "b.py"}}, {variant_kind::command, {"/usr/bin/python3", "a.py"}},
      {variant_kind::command, {"./v1/t"}},          {variant_kind::command, {"./v2/t"}},
      {variant_kind::command, {"exit/a"}},          {variant_kind::command, {"solo", "--x"}},
      {variant_kind::command, {"other/a"}}};
  const std::vector<std::string> names = {"exit/a", "python3", "python3", "python3", "t", "t", "a", "solo", "a"};
  EXPECT_EQ(display_names(ids, names), (std::vector<std::string>{"exit/a", "python3 a.py", "python3 b.py", "bin/python3", "v1/t", "v2/t",
                                                                 "exit/a (command)", "solo", "other/a"}));
  // However deep the programs' common path.
  std::string tail;
  for (int i = 2; i <= 30; ++i) tail += "/" + std::to_string(i);
  EXPECT_EQ(display_names({{variant_kind::command, {"/1" + tail + "/t"}}, {variant_kind::command, {"/0" + tail + "/t"}}}, {"t", "t"}),
            (std::vector<std::string>{"1" + tail + "/t", "0" + tail + "/t"}));
}

TEST(load_report, a_command_soak_is_reported_under_its_own_fault_spec) {
  // Issue 38: a soak of a command (one fixed spec) was labelled "drawn per run from the fault
  // space". A scenario soak's runs, each with a spec of its own, still are.
  testing::temp_dir dir;
  const std::string spec = "exit/end=delay(1ms)";
  testing::write_results(dir.path() / "cmd", testing::command_runs({"./prog", "--fast"}, 20, 2, outcome::crash, "SIGSEGV: f", 0, spec));
  std::ofstream(dir.path() / "cmd" / "soak.json")
      << nlohmann::json{{"seed", 1},
                        {"scenarios", nlohmann::json::array()},
                        {"command", {{"argv", nlohmann::json::array({"./prog", "--fast"})}, {"faults", spec}}}}
             .dump();
  auto scen = testing::runs("exit/a", 2, 0, outcome::pass, "", 100);
  scen[0].faults = "sim/stream/op=5%delay(10us)";
  scen[1].faults = "sim/stream/op=7%delay(1ms)";
  testing::write_results(dir.path() / "scenarios", scen);
  std::ofstream(dir.path() / "scenarios" / "soak.json")
      << nlohmann::json{{"seed", 1},
                        {"scenarios", nlohmann::json::array({{{"name", "exit/a"},
                                                              {"fault_space", nlohmann::json::array({"sim/stream/op=1..20%delay(10us..2ms)"})}}})},
                        {"command", nullptr}}
             .dump();
  auto m = load_report({dir.path() / "cmd", dir.path() / "scenarios"});
  ASSERT_TRUE(m) << m.error().message();
  ASSERT_EQ(m->variants.size(), 2u);
  EXPECT_EQ(m->variants[0].faults, spec);
  EXPECT_EQ(m->variants[0].label, "prog");
  EXPECT_EQ(m->variants[0].summary.failures, 2u);
  EXPECT_EQ(m->variants[1].faults, soak_faults_label);
  EXPECT_EQ(m->variants[1].summary.runs, 2u);
}

TEST(load_report, spreads_durations_and_builds_the_timeline) {
  testing::temp_dir dir;
  auto recs = testing::runs("exit/a", 300, 30, outcome::crash, "SIGSEGV: f", 0, 1);  // one run a second for 5 minutes
  for (std::size_t i = 0; i < recs.size(); ++i) recs[i].duration_ms = static_cast<std::int64_t>(i + 1);
  testing::write_results(dir.path(), recs);
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const auto& d = m->variants[0].durations;
  EXPECT_EQ(d.count, 300u);
  EXPECT_EQ(d.min_ms, 1);
  EXPECT_EQ(d.q1_ms, 75);
  EXPECT_EQ(d.median_ms, 150);
  EXPECT_EQ(d.q3_ms, 225);
  EXPECT_EQ(d.p99_ms, 297);
  EXPECT_EQ(d.max_ms, 300);
  EXPECT_DOUBLE_EQ(d.mean_ms, 150.5);
  const auto& t = m->time;
  EXPECT_EQ(t.bucket_ms, 5'000);  // 299 s in at most 120 buckets
  ASSERT_EQ(t.buckets.size(), 60u);
  EXPECT_EQ(t.buckets[0].runs.at(outcome::crash), 5u);  // runs 0-4
  std::uint64_t total = 0, crashes = 0;
  for (const auto& b : t.buckets)
    for (const auto& [o, n] : b.runs) {
      total += n;
      if (o == outcome::crash) crashes += n;
    }
  EXPECT_EQ(total, 300u);
  EXPECT_EQ(crashes, 30u);
}

TEST(repro_command, replays_a_scenario_or_a_command) {
  auto r = testing::record("exit/a@bug/x", 3, outcome::crash, "s");
  r.faults = "bug/x=print";
  EXPECT_EQ(repro_command(r), "faultline run exit/a --seed 1003 --repeat 1 --faults bug/x=print");
  harness::run_record e;
  e.name = "my_test";
  e.seed = 9;
  e.command = {"./my_test", "--gtest_filter=Pool.*", "a b"};
  EXPECT_EQ(repro_command(e), "faultline exec --seed 9 --repeat 1 -- ./my_test '--gtest_filter=Pool.*' 'a b'");
  // Issue 38 (10): what the run recorded as changing what it did is given again.
  e.replay = {"--timeout", "30s", "--env", "K=a b", "--crash-capture", "core", "--no-preload"};
  EXPECT_EQ(repro_command(e), "faultline exec --seed 9 --repeat 1 --timeout 30s --env 'K=a b' --crash-capture core --no-preload -- "
                              "./my_test '--gtest_filter=Pool.*' 'a b'");
  r.replay = {"--timeout", "2m", "--late-cuda"};
  EXPECT_EQ(repro_command(r), "faultline run exit/a --seed 1003 --repeat 1 --faults bug/x=print --timeout 2m --late-cuda");
}

}  // namespace
}  // namespace faultline::reports
