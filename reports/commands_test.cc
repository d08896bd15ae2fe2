// `faultline report` and `faultline gate` in-process: what they write and print, their exit
// statuses, and that bad input is one clear line with status 2 (never a crash). Without
// plotly.js the HTML report is refused while JUnit and Markdown are still written.
#include "reports/commands.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "reports/detail/pack.h"
#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using testing::operator+;

const std::string stand_in_plotly = "var Plotly = {newPlot: function () {}};";

struct outputs {
  std::ostringstream out, err;
};

struct commands : ::testing::Test {
  testing::temp_dir dir;
  fs::path plotly;

  void SetUp() override {
    plotly = dir.path() / "plotly.js";
    std::ofstream(plotly) << stand_in_plotly;
    testing::write_results(dir.path() / "run", testing::runs("exit/a", 100, 1, outcome::crash, "SIGSEGV: f") +
                                                   testing::runs("exit/b", 100, 0, outcome::pass, "", 1000));
  }

  int report(report_options o, outputs& io) {
    if (o.plotly_js.empty()) o.plotly_js = plotly.string();
    return report_command(o, io.out, io.err);
  }
};

TEST_F(commands, report_writes_every_report_and_says_where) {
  outputs io;
  report_options o;
  o.inputs = {(dir.path() / "run").string()};
  o.junit = (dir.path() / "r/junit.xml").string();
  o.markdown = (dir.path() / "r/summary.md").string();
  o.html = (dir.path() / "r/report.html").string();
  EXPECT_EQ(report(o, io), exit_ok) << io.err.str();
  for (const auto& f : {o.junit, o.markdown, o.html}) {
    EXPECT_TRUE(fs::is_regular_file(f)) << f;
    EXPECT_NE(io.out.str().find(f), std::string::npos) << io.out.str();
  }
  EXPECT_NE(io.out.str().find("faultline report: 200 runs of 2 variants from " + (dir.path() / "run/results.jsonl").string() +
                              "; 1 did not meet its expectation"),
            std::string::npos)
      << io.out.str();
  EXPECT_NE(testing::read_text(o.html).find(detail::base64(detail::gzip(stand_in_plotly))), std::string::npos);
  EXPECT_EQ(testing::read_text(o.junit).rfind("<?xml", 0), 0u);
  EXPECT_EQ(testing::read_text(o.markdown).rfind("## faultline: ", 0), 0u);
  for (const auto& e : fs::directory_iterator(dir.path() / "r"))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "no temporary file left: " << e.path();
}

TEST_F(commands, report_prints_markdown_without_outputs) {
  outputs io;
  report_options o;
  o.inputs = {(dir.path() / "run").string()};
  EXPECT_EQ(report(o, io), exit_ok);
  EXPECT_EQ(io.out.str().rfind("## faultline: ", 0), 0u) << io.out.str();
}

TEST_F(commands, report_without_plotly_still_writes_junit_and_markdown) {
  outputs io;
  report_options o;
  o.inputs = {(dir.path() / "run").string()};
  o.junit = (dir.path() / "junit.xml").string();
  o.markdown = (dir.path() / "summary.md").string();
  o.html = (dir.path() / "report.html").string();
  o.plotly_js = (dir.path() / "nowhere/plotly.min.js").string();
  EXPECT_EQ(report_command(o, io.out, io.err), exit_usage);
  EXPECT_TRUE(fs::is_regular_file(o.junit));
  EXPECT_TRUE(fs::is_regular_file(o.markdown));
  EXPECT_FALSE(fs::exists(o.html));
  EXPECT_NE(io.err.str().find("cannot write the HTML report: plotly.js not found at " + o.plotly_js + " (install python3-plotly"),
            std::string::npos)
      << io.err.str();
}

TEST_F(commands, report_refuses_bad_input_in_one_line) {
  auto status_of = [&](std::vector<std::string> inputs, std::string& err) {
    outputs io;
    report_options o;
    o.inputs = std::move(inputs);
    const int s = report(o, io);
    err = io.err.str();
    return s;
  };
  std::string err;
  EXPECT_EQ(status_of({(dir.path() / "missing").string()}, err), exit_usage);
  EXPECT_EQ(err, "faultline report: error: " + (dir.path() / "missing").string() + ": no such file or directory\n");
  fs::create_directories(dir.path() / "empty");
  EXPECT_EQ(status_of({(dir.path() / "empty").string()}, err), exit_usage);
  EXPECT_NE(err.find("holds no results.jsonl"), std::string::npos) << err;
  testing::write_results(dir.path() / "garbage", {}, "not json\n{}\n");
  EXPECT_EQ(status_of({(dir.path() / "garbage").string()}, err), exit_usage);
  EXPECT_NE(err.find("line 1 is malformed"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(status_of({}, err), exit_usage);

  outputs io;
  report_options o;
  o.inputs = {(dir.path() / "run").string()};
  o.junit = dir.path().string();  // a directory
  EXPECT_EQ(report(o, io), exit_usage);
  EXPECT_NE(io.err.str().find("cannot write the JUnit report: " + dir.path().string() + " is a directory"), std::string::npos) << io.err.str();
}

TEST_F(commands, gate_writes_a_baseline_then_passes_and_fails) {
  const std::string base = (dir.path() / "baseline.json").string();
  {
    outputs io;
    gate_options g;
    g.current = {(dir.path() / "run").string()};
    g.write_baseline = base;
    EXPECT_EQ(gate_command(g, io.out, io.err), exit_ok) << io.err.str();
    EXPECT_NE(io.out.str().find("gate: wrote baseline " + base + ": 200 runs of 2 variants"), std::string::npos) << io.out.str();
  }
  {
    outputs io;
    gate_options g;
    g.current = {(dir.path() / "run").string()};
    g.baseline = base;
    EXPECT_EQ(gate_command(g, io.out, io.err), exit_ok) << io.out.str() << io.err.str();
    EXPECT_NE(io.out.str().find("gate: passed"), std::string::npos) << io.out.str();
  }
  // A worse campaign: 15 crashes of exit/a, and a new signature in exit/b.
  testing::write_results(dir.path() / "worse", testing::runs("exit/a", 100, 15, outcome::crash, "SIGSEGV: f") +
                                                   testing::runs("exit/b", 100, 1, outcome::hang, "futex_wait", 1000));
  outputs io;
  gate_options g;
  g.current = {(dir.path() / "worse").string()};
  g.baseline = base;
  EXPECT_EQ(gate_command(g, io.out, io.err), exit_failed) << io.out.str();
  const std::string text = io.out.str();
  EXPECT_NE(text.find("FAIL     exit/a: failure rate 1 of 100 (1.0%) -> 15 of 100 (15.0%); Fisher's exact test, one-sided (greater): p = "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("FAIL     exit/b: new outcome class hang"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL     exit/b: new signature hang/exit \"futex_wait\""), std::string::npos) << text;
  EXPECT_NE(text.find("gate: FAILED: 2 variants regressed (3 findings above)"), std::string::npos) << text;
}

// Issue 38 (11): a baseline of one variant was described as "N runs of 1 variants".
TEST_F(commands, gate_counts_one_variant_and_one_run_in_the_singular) {
  testing::write_results(dir.path() / "one", testing::runs("exit/a", 1, 0, outcome::crash, "SIGSEGV: f"));
  const std::string base = (dir.path() / "one.json").string();
  {
    outputs io;
    gate_options g;
    g.current = {(dir.path() / "one").string()};
    g.write_baseline = base;
    EXPECT_EQ(gate_command(g, io.out, io.err), exit_ok) << io.err.str();
    EXPECT_NE(io.out.str().find("gate: wrote baseline " + base + ": 1 run of 1 variant "), std::string::npos) << io.out.str();
  }
  outputs io;
  gate_options g;
  g.current = {(dir.path() / "one").string()};
  g.baseline = base;
  EXPECT_EQ(gate_command(g, io.out, io.err), exit_ok) << io.out.str() << io.err.str();
  const std::string text = io.out.str();
  EXPECT_NE(text.find("against baseline " + base + " (1 run of 1 variant, written "), std::string::npos) << text;
  EXPECT_EQ(text.find("1 variants"), std::string::npos) << text;
  EXPECT_EQ(text.find("1 runs"), std::string::npos) << text;
}

TEST_F(commands, gate_refuses_bad_usage_and_bad_baselines_with_status_2) {
  auto run_gate = [&](gate_options g, std::string& err) {
    outputs io;
    const int s = gate_command(g, io.out, io.err);
    err = io.err.str();
    return s;
  };
  const std::string current = (dir.path() / "run").string();
  std::string err;
  EXPECT_EQ(run_gate({{current}, "", "", 0.01}, err), exit_usage);
  EXPECT_NE(err.find("give --baseline FILE"), std::string::npos);
  EXPECT_EQ(run_gate({{current}, "a", "b", 0.01}, err), exit_usage);
  EXPECT_NE(err.find("not both"), std::string::npos);
  EXPECT_EQ(run_gate({{current}, "a", "", 1.5}, err), exit_usage);
  EXPECT_NE(err.find("--alpha must be between 0 and 1"), std::string::npos);
  EXPECT_EQ(run_gate({{}, "a", "", 0.01}, err), exit_usage);

  const fs::path bad = dir.path() / "bad.json";
  for (const std::string& content : {std::string(""), std::string("{\"format\": \"faultline-baseline\", \"vers"), std::string("<xml/>"),
                                     std::string("{\"format\": \"faultline-baseline\", \"version\": 9}"),
                                     std::string("{\"format\": \"faultline-baseline\", \"version\": 1}")}) {
    std::ofstream(bad, std::ios::trunc) << content;
    EXPECT_EQ(run_gate({{current}, bad.string(), "", 0.01}, err), exit_usage) << content;
    EXPECT_EQ(err.rfind("faultline gate: error: baseline " + bad.string() + ": ", 0), 0u) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  EXPECT_EQ(run_gate({{current}, (dir.path() / "none.json").string(), "", 0.01}, err), exit_usage);
  EXPECT_NE(err.find("no such file"), std::string::npos);
  EXPECT_EQ(run_gate({{(dir.path() / "missing").string()}, "", (dir.path() / "b.json").string(), 0.01}, err), exit_usage);
  EXPECT_NE(err.find("no such file or directory"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "b.json"));
}

}  // namespace
}  // namespace faultline::reports
