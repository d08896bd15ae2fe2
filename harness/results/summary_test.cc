// Summaries accumulated one record at a time: whatever order the runs finish in, the summary is
// the one the records sorted by run number give (counts, signature order, first occurrences,
// the replay candidates), and a variant with a fault spec names the points no run reached.
// Method: the same records are fed in run order and shuffled with fixed seeds, and compared.
#include "harness/results/summary.h"
#include "harness/results/stack_hints.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace faultline::harness {
namespace {

run_record rec(std::uint64_t run, const std::string& name, outcome o, const std::string& sig = "") {
  run_record r;
  r.run = run;
  r.name = name;
  r.seed = 100 + run;
  r.run_id = name + ".s" + std::to_string(r.seed);
  r.result = o;
  r.when = o == outcome::pass ? phase::none : (run % 2 ? phase::exit : phase::run);
  r.signature = sig;
  r.log = "logs/" + r.run_id + ".log";
  return r;
}

std::vector<run_record> campaign() {
  std::vector<run_record> rs;
  // "a": passes, with signatures x (3 times, from run 4), y (3 times, from run 2), z once.
  const char* sigs[] = {"", "", "y", "", "x", "y", "x", "", "z", "y", "x", ""};
  for (std::uint64_t k = 0; k < 12; ++k)
    rs.push_back(rec(2 * k, "a", *sigs[k] ? (k == 8 ? outcome::hang : outcome::crash) : outcome::pass, sigs[k]));
  for (std::uint64_t k = 0; k < 12; ++k) rs.push_back(rec(2 * k + 1, "b", outcome::pass));
  return rs;
}

TEST(summary_builder, any_arrival_order_gives_the_run_ordered_summary) {
  const auto ordered = summarise(campaign(), {"a", "b", "c"});
  ASSERT_EQ(ordered.size(), 3u);
  const auto& a = ordered[0];
  EXPECT_EQ(a.runs, 12u);
  EXPECT_EQ(a.failures, 7u);
  EXPECT_EQ(a.outcomes.at(outcome::crash), 6u);
  EXPECT_EQ(a.outcomes.at(outcome::hang), 1u);
  EXPECT_EQ(a.outcomes.at(outcome::leak), 0u);  // zero counts present
  ASSERT_EQ(a.signatures.size(), 3u);
  // x and y both 3 times: y happened first (run 4 < run 8), so it comes first.
  EXPECT_EQ(a.signatures[0].signature, "y");
  EXPECT_EQ(a.signatures[0].first_run, "a.s104");
  EXPECT_EQ(a.signatures[0].first_log, "logs/a.s104.log");
  EXPECT_EQ(a.signatures[1].signature, "x");
  EXPECT_EQ(a.signatures[1].first_run, "a.s108");
  EXPECT_EQ(a.signatures[2].signature, "z");
  EXPECT_EQ(a.signatures[2].result, outcome::hang);
  ASSERT_TRUE(a.first_failure);
  EXPECT_EQ(a.first_failure->run, 4u);
  ASSERT_TRUE(a.first_pass);
  EXPECT_EQ(a.first_pass->run, 0u);
  EXPECT_EQ(ordered[1].failures, 0u);
  EXPECT_FALSE(ordered[1].first_failure);
  EXPECT_EQ(ordered[2].runs, 0u);  // no records: an empty summary
  EXPECT_FALSE(a.points_never_reached);  // no faults

  for (unsigned seed : {1u, 2u, 3u, 4u, 5u}) {
    auto shuffled = campaign();
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(seed));
    summary_builder b({{"a", ""}, {"b", ""}, {"c", ""}});
    for (const auto& r : shuffled) b.add(r);
    const auto got = b.summaries();
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(to_json(got[i]), to_json(ordered[i])) << "seed " << seed;
      EXPECT_EQ(got[i].first_failure.has_value(), ordered[i].first_failure.has_value());
      if (got[i].first_failure) {
        EXPECT_EQ(got[i].first_failure->run, ordered[i].first_failure->run);
      }
      if (got[i].first_record) {
        EXPECT_EQ(got[i].first_record->run, ordered[i].first_record->run);
      }
    }
  }
}

TEST(summary_builder, first_occurrence_sets_a_groups_outcome_and_phase) {
  summary_builder b(std::vector<summary_key>{{"a", ""}});
  auto late = rec(9, "a", outcome::crash, "s");  // phase exit
  auto early = rec(2, "a", outcome::fail, "s");  // phase run
  b.add(late);
  b.add(early);
  auto s = b.summaries().at(0);
  ASSERT_EQ(s.signatures.size(), 1u);
  EXPECT_EQ(s.signatures[0].count, 2u);
  EXPECT_EQ(s.signatures[0].result, outcome::fail);
  EXPECT_EQ(s.signatures[0].when, phase::run);
  EXPECT_EQ(s.signatures[0].first_run, early.run_id);
}

TEST(summary_builder, a_signature_points_to_its_first_runs_stacks_and_top_frames) {
  summary_builder b(std::vector<summary_key>{{"a", ""}});
  auto late = rec(9, "a", outcome::crash, "SIGSEGV: f");
  late.stacks = "runs/" + late.run_id + "/crash-stacks.txt";
  late.frames = {"g  (prog)"};
  auto early = rec(2, "a", outcome::crash, "SIGSEGV: f");
  early.stacks = "runs/" + early.run_id + "/crash-stacks.txt";
  early.frames = {"f  (prog)", "main  (prog)"};
  auto bare = rec(4, "a", outcome::hang, "hang");  // no stacks taken
  b.add(late);
  b.add(early);
  b.add(bare);
  auto s = b.summaries().at(0);
  ASSERT_EQ(s.signatures.size(), 2u);
  EXPECT_EQ(s.signatures[0].first_stacks, early.stacks);
  EXPECT_EQ(s.signatures[0].first_frames, early.frames);
  auto j = to_json(s);
  EXPECT_EQ(j["signatures"][0]["stacks"], early.stacks);
  EXPECT_EQ(j["signatures"][0]["frames"], nlohmann::json({"f  (prog)", "main  (prog)"}));
  EXPECT_TRUE(j["signatures"][1]["stacks"].is_null());
  EXPECT_EQ(j["signatures"][1]["frames"], nlohmann::json::array());
}

// Issue 38 (11): a Python hang named by the interpreter's own C frames gave no hint that py-spy
// (or FAULTLINE_PY_SPY) would name the Python functions.
TEST(python_frames_hint, is_given_for_an_interpreters_own_frames_only) {
  const std::vector<std::string> interpreter = {"clock_nanosleep  (libc.so.6)", "pysleep  (python3.11)",
                                                "??  (python3.11+0x1c2d3, no symbol)"};
  const std::string hint = python_frames_hint(interpreter);
  EXPECT_NE(hint.find("py-spy"), std::string::npos) << hint;
  EXPECT_NE(hint.find("FAULTLINE_PY_SPY"), std::string::npos) << hint;
  EXPECT_NE(python_frames_hint({"PyEval_EvalCode  (libpython3.12.so.1.0)"}), "");
  EXPECT_EQ(python_frames_hint({"wait_for_child  (/srv/t/test_ipc.py)", "<module>  (/srv/t/test_ipc.py)"}), "");
  EXPECT_EQ(python_frames_hint({"f  (prog)", "main  (prog)"}), "");
  EXPECT_EQ(python_frames_hint({}), "");

  summary_builder b(std::vector<summary_key>{{"python3", ""}});
  auto hung = rec(0, "python3", outcome::hang, "hang: pysleep");
  hung.frames = interpreter;
  b.add(hung);
  auto j = to_json(b.summaries().at(0));
  EXPECT_EQ(j["signatures"][0]["hint"], hint);
  auto crashed = rec(1, "python3", outcome::crash, "SIGSEGV: pysleep");  // py-spy reads no crash
  crashed.frames = interpreter;
  summary_builder c(std::vector<summary_key>{{"python3", ""}});
  c.add(crashed);
  EXPECT_FALSE(to_json(c.summaries().at(0))["signatures"][0].contains("hint"));
}

TEST(summary_builder, ignores_records_of_other_variants) {
  summary_builder b(std::vector<summary_key>{{"a", ""}});
  EXPECT_FALSE(b.add(rec(0, "zz", outcome::crash, "s")));
  EXPECT_TRUE(b.add(rec(1, "a", outcome::pass)));
  EXPECT_EQ(b.summaries().at(0).runs, 1u);
  EXPECT_EQ(b.summaries().at(0).failures, 0u);
}

TEST(summary_builder, names_the_spec_points_no_run_reached) {
  summary_builder b({{"f", "exit/end=delay(100ms);sim/*=5%fail(ENOMEM);foo/bar=print"}, {"g", "x/y=off"}, {"h", ""}});
  auto r1 = rec(0, "f", outcome::pass);
  r1.points_reached = {"sim/*"};
  auto r2 = rec(3, "f", outcome::pass);
  b.add(r1);
  b.add(r2);
  auto g = rec(1, "g", outcome::pass);
  g.points_reached = {"x/y"};
  b.add(g);
  b.add(rec(2, "h", outcome::pass));
  auto sums = b.summaries();
  ASSERT_TRUE(sums[0].points_never_reached);
  EXPECT_EQ(*sums[0].points_never_reached, (std::vector<std::string>{"exit/end", "foo/bar"}));  // in spec order
  ASSERT_TRUE(sums[1].points_never_reached);
  EXPECT_TRUE(sums[1].points_never_reached->empty());
  EXPECT_FALSE(sums[2].points_never_reached);

  auto jf = to_json(sums[0]);
  EXPECT_EQ(jf["points_never_reached"], nlohmann::json({"exit/end", "foo/bar"}));
  EXPECT_EQ(to_json(sums[1])["points_never_reached"], nlohmann::json::array());
  EXPECT_FALSE(to_json(sums[2]).contains("points_never_reached"));
}

TEST(summary_builder, totals_late_cuda_calls_by_api_signed_by_the_earliest_run) {
  summary_builder b(std::vector<summary_key>{{"a", ""}});
  auto r5 = rec(5, "a", outcome::fail, "exit 1");
  r5.late_cuda = {{"cudaFree", 4, "late-cuda: cudaFree \u2190 later"}};
  auto r2 = rec(2, "a", outcome::pass);  // a run can pass and still call late (the flag was off)
  r2.late_cuda = {{"cudaFree", 2, "late-cuda: cudaFree \u2190 first"}, {"cudaEventDestroy", 1, "late-cuda: cudaEventDestroy"}};
  b.add(r5);
  b.add(r2);
  b.add(rec(7, "a", outcome::pass));
  const auto s = b.summaries().at(0);
  ASSERT_EQ(s.late_cuda.size(), 2u);
  EXPECT_EQ(s.late_cuda[0].api, "cudaEventDestroy");  // by name
  EXPECT_EQ(s.late_cuda[1].api, "cudaFree");
  EXPECT_EQ(s.late_cuda[1].runs, 2u);
  EXPECT_EQ(s.late_cuda[1].calls, 6u);
  EXPECT_EQ(s.late_cuda[1].signature, "late-cuda: cudaFree \u2190 first");
  EXPECT_EQ(to_json(s)["late_cuda"][1]["calls"], 6);
  EXPECT_FALSE(to_json(b.summaries().at(0)).is_null());
  summary_builder none(std::vector<summary_key>{{"a", ""}});
  none.add(rec(1, "a", outcome::pass));
  EXPECT_FALSE(to_json(none.summaries().at(0)).contains("late_cuda"));
}

TEST(summarise, takes_a_variants_fault_spec_from_its_records) {
  auto r = rec(0, "f", outcome::pass);
  r.faults = "a/b=off;c/d=off";
  r.points_reached = {"c/d"};
  auto sums = summarise({r}, {"f"});
  ASSERT_TRUE(sums[0].points_never_reached);
  EXPECT_EQ(*sums[0].points_never_reached, std::vector<std::string>{"a/b"});
}

}  // namespace
}  // namespace faultline::harness
