// `faultline report` and `faultline gate` through the binary, on the outputs of real campaigns
// of the stand-in scenario binary (faultline-fake-scenarios): the two shards of a `faultline
// run` merge into one report that counts every run once (and a shard given twice is said to
// be), a `faultline verify` whose bug point stops being detected fails the gate that a good
// verify's baseline set, and two programs of one name run by `faultline exec` are two rows and
// two variants of the gate.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/tests/e2e_util.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::testing::program;
using harness::testing::run_faultline;

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class reports_e2e : public ::testing::Test {
 protected:
  std::map<std::string, std::string> fake_env(bool miss_bug = false) {
    return {{"FAULTLINE_SCENARIOS", program("faultline-fake-scenarios").string()}, {"FAKE_SCENARIOS_MISS_BUG", miss_bug ? "1" : ""}};
  }
  fs::path at(const std::string& name) { return dir_.path() / name; }
  fs::path fake_plotly() {
    const fs::path p = at("plotly.js");
    std::ofstream(p) << "var Plotly = {newPlot: function () {}};";
    return p;
  }
  harness::testing::scratch_dir dir_;
};

TEST_F(reports_e2e, report_merges_the_shards_of_a_campaign) {
  // fake/behave with fake/fail-on-odd-seed fails on odd seeds: run k has seed 1 + k, so shard
  // 0/2 (runs 0, 2, 4, 6) fails every run and shard 1/2 none: 4 of 8 in all.
  for (const char* shard : {"0/2", "1/2"}) {
    auto r = run_faultline({"run", "fake/behave", "--faults", "fake/fail-on-odd-seed=print", "--repeat", "8", "--seed", "1", "--shard",
                            shard, "--out", at(std::string("shards/") + shard[0]).string()},
                           fake_env());
    ASSERT_EQ(r.status, shard[0] == '0' ? 1 : 0) << r.err;
  }
  auto r = run_faultline({"report", at("shards").string(), "--junit", at("r/junit.xml").string(), "--markdown", at("r/summary.md").string(),
                          "--html", at("r/report.html").string(), "--plotly-js", fake_plotly().string()});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("faultline report: 8 runs of 1 variant"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(at("r/report.html").string()), std::string::npos) << r.out;
  const std::string xml = read_text(at("r/junit.xml"));
  EXPECT_NE(xml.find("<property name=\"runs\" value=\"8\"/>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<property name=\"failures\" value=\"4\"/>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure type=\"fail\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("repro: faultline run fake/behave --seed 1 --repeat 1 --faults fake/fail-on-odd-seed=print"), std::string::npos) << xml;
  EXPECT_NE(read_text(at("r/summary.md")).find("| 8 | 4 | 50.0%"), std::string::npos) << read_text(at("r/summary.md"));

  // Shard 0 given twice: its runs count once, and the note says so.
  auto twice = run_faultline({"report", at("shards/0").string(), at("shards/1").string(), at("shards/0").string() + "/"});
  EXPECT_EQ(twice.status, 0) << twice.err;
  EXPECT_NE(twice.err.find("given more than once: read once"), std::string::npos) << twice.err;
  EXPECT_NE(twice.err.find("faultline report: 8 runs of 1 variant"), std::string::npos) << twice.err;
  // A copy of shard 0 elsewhere: the same runs, counted once.
  fs::create_directories(at("copy"));
  fs::copy(at("shards/0"), at("copy/0"), fs::copy_options::recursive);
  auto copy = run_faultline({"report", at("shards").string(), at("copy").string(), "--markdown", at("r/copy.md").string()});
  EXPECT_EQ(copy.status, 0) << copy.err;
  EXPECT_NE(copy.out.find("8 runs of 1 variant"), std::string::npos) << copy.out;
  EXPECT_NE(copy.err.find("4 of its 4 runs were already read from " + at("shards/0/results.jsonl").string()), std::string::npos) << copy.err;
  // Only one shard: the other is missing.
  auto half = run_faultline({"report", at("shards/1").string()});
  EXPECT_EQ(half.status, 0);
  EXPECT_NE(half.err.find("1 shard missing (0/2)"), std::string::npos) << half.err;
}

// Issue 38 (10): the reports' replay lines dropped --timeout (a replayed hang waited exec's 10
// minutes), and every other option that changed what the run did: --env, --crash-capture,
// --no-preload. The command's own repro line and the three reports' now give the same options.
TEST_F(reports_e2e, replay_lines_give_every_option_that_changed_the_run) {
  auto r = run_faultline({"exec", "--seed", "3", "--timeout", "1s", "--env", "FL_REPLAY=a b", "--crash-capture", "none", "--no-preload",
                          "--no-stacks", "--out", at("hang").string(), "--", "/bin/sh", "-c", "sleep 306.5"});
  ASSERT_EQ(r.status, 1) << r.err << r.out;
  const std::string options = "--seed 3 --repeat 1 --timeout 1s --env 'FL_REPLAY=a b' --crash-capture none --no-preload -- /bin/sh -c";
  EXPECT_NE(r.out.find("repro: faultline exec --seed 3 --repeat 1 --out faultline-repro --replace --timeout 1s --env 'FL_REPLAY=a b' "
                       "--crash-capture none --no-preload -- /bin/sh -c 'sleep 306.5'"),
            std::string::npos)
      << r.out;
  auto rep = run_faultline({"report", at("hang").string(), "--junit", at("r/junit.xml").string(), "--markdown", at("r/summary.md").string(),
                            "--html", at("r/report.html").string(), "--plotly-js", fake_plotly().string()});
  ASSERT_EQ(rep.status, 0) << rep.err << rep.out;
  EXPECT_NE(read_text(at("r/summary.md")).find("faultline exec " + options + " 'sleep 306.5'"), std::string::npos)
      << read_text(at("r/summary.md"));
  EXPECT_NE(read_text(at("r/junit.xml")).find("repro: faultline exec " + options),
            std::string::npos)
      << read_text(at("r/junit.xml"));
  const std::string html = read_text(at("r/report.html"));
  EXPECT_NE(html.find("--seed 3 --repeat 1 --timeout 1s --env &#39;FL_REPLAY=a b&#39; --crash-capture none"), std::string::npos);
  EXPECT_NE(html.find("--crash-capture none --no-preload -- /bin/sh -c "), std::string::npos);
}

TEST_F(reports_e2e, gate_fails_when_a_bug_point_stops_being_detected) {
  auto good = run_faultline({"verify", "fake/counter", "--repeat", "12", "--seed", "1", "--out", at("good").string()}, fake_env());
  ASSERT_EQ(good.status, 0) << good.out << good.err;
  auto base = run_faultline({"gate", "--write-baseline", at("baseline.json").string(), "--current", at("good").string()});
  ASSERT_EQ(base.status, 0) << base.err;
  EXPECT_NE(base.out.find("gate: wrote baseline"), std::string::npos);

  // The same verify again passes the gate.
  auto again = run_faultline({"verify", "fake/counter", "--repeat", "12", "--seed", "100", "--out", at("again").string()}, fake_env());
  ASSERT_EQ(again.status, 0);
  auto pass = run_faultline({"gate", "--baseline", at("baseline.json").string(), "--current", at("again").string()});
  EXPECT_EQ(pass.status, 0) << pass.out << pass.err;
  EXPECT_NE(pass.out.find("gate: passed"), std::string::npos) << pass.out;

  // The bug point goes undetected: verify fails, and so does the gate, naming the test.
  auto miss = run_faultline({"verify", "fake/counter", "--repeat", "12", "--seed", "1", "--out", at("miss").string()}, fake_env(true));
  ASSERT_EQ(miss.status, 1);
  auto fail = run_faultline({"gate", "--baseline", at("baseline.json").string(), "--current", at("miss").string()});
  EXPECT_EQ(fail.status, 1) << fail.out << fail.err;
  EXPECT_NE(fail.out.find("FAIL     fake/counter@bug/fake/skip-check [bug/fake/skip-check=1*print]: runs that missed the bug 0 of 12 (0%) -> 12 of 12 (100%); "
                          "Fisher's exact test, one-sided (greater): p = "),
            std::string::npos)
      << fail.out;

  // And the report of that run says which variant missed its expectation.
  auto rep = run_faultline({"report", at("miss").string()});
  EXPECT_EQ(rep.status, 0);
  EXPECT_NE(rep.out.find("bug point never detected in 12 runs"), std::string::npos) << rep.out;

  // Bad input: exit status 2 and one line.
  std::ofstream(at("torn.json")) << read_text(at("baseline.json")).substr(0, 100);
  auto torn = run_faultline({"gate", "--baseline", at("torn.json").string(), "--current", at("miss").string()});
  EXPECT_EQ(torn.status, 2);
  EXPECT_NE(torn.err.find("not JSON (truncated or not a baseline)"), std::string::npos) << torn.err;
}

TEST_F(reports_e2e, help_documents_every_option) {
  auto report = run_faultline({"report", "--help"});
  EXPECT_EQ(report.status, 0);
  for (const char* opt : {"--junit", "--html", "--markdown", "--plotly-js", "--title", "Exit status"})
    EXPECT_NE(report.out.find(opt), std::string::npos) << opt << "\n" << report.out;
  auto gate = run_faultline({"gate", "--help"});
  EXPECT_EQ(gate.status, 0);
  for (const char* opt : {"--baseline", "--write-baseline", "--current", "--alpha", "Fisher", "Exit status"})
    EXPECT_NE(gate.out.find(opt), std::string::npos) << opt << "\n" << gate.out;
  auto usage = run_faultline({"report"});
  EXPECT_EQ(usage.status, 2);
  auto no_current = run_faultline({"gate", "--baseline", "x"});
  EXPECT_EQ(no_current.status, 2);
}

TEST_F(reports_e2e, commands_of_one_program_name_are_rows_and_variants_of_their_own) {
  // Issue 38: ./v1/exit_race and ./v2/exit_race, run by exec, were one row and one variant of the
  // gate. Here v1/prog passes and v2/prog fails; then v1/prog starts failing too, which the pooled
  // variant (3 of 6 failed, then 6 of 6) would have let through as within chance.
  auto build = [&](const char* version, const char* testdata) {
    fs::create_directories(at(version));
    fs::copy_file(program(testdata), at(std::string(version) + "/prog"), fs::copy_options::overwrite_existing);
  };
  build("v1", "fl_testdata_pass");
  build("v2", "fl_testdata_fail");
  auto exec = [&](const char* version, const char* out) {
    return run_faultline(
        {"exec", "--repeat", "3", "--seed", "1", "--out", at(out).string(), "--", at(std::string(version) + "/prog").string()});
  };
  ASSERT_EQ(exec("v1", "out-v1").status, 0);
  ASSERT_EQ(exec("v2", "out-v2").status, 1);
  EXPECT_NE(read_text(at("out-v1/results.jsonl")).find("\"kind\":\"command\""), std::string::npos);

  auto report = run_faultline({"report", at("out-v1").string(), at("out-v2").string(), "--markdown", "-"});
  ASSERT_EQ(report.status, 0) << report.err;
  EXPECT_NE(report.out.find("1 of 2 variants did not meet their expectation"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("`v1/prog`"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("`v2/prog`"), std::string::npos) << report.out;

  auto base = run_faultline({"gate", "--write-baseline", at("baseline.json").string(), "--current", at("out-v1").string(), "--current",
                             at("out-v2").string()});
  ASSERT_EQ(base.status, 0) << base.err;
  build("v1", "fl_testdata_fail");
  ASSERT_EQ(exec("v1", "out-v1-now").status, 1);
  auto gate = run_faultline({"gate", "--baseline", at("baseline.json").string(), "--current", at("out-v1-now").string(), "--current",
                             at("out-v2").string()});
  EXPECT_EQ(gate.status, 1) << gate.out << gate.err;
  EXPECT_NE(gate.out.find("FAIL     v1/prog: new outcome class fail"), std::string::npos) << gate.out;
  EXPECT_EQ(gate.out.find("FAIL     v2/prog"), std::string::npos) << gate.out;
}

}  // namespace
}  // namespace faultline::reports
