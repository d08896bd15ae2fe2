// The HTML report without a browser: plotly.js is embedded, each plot has its element and its
// figure (a plotly JSON spec that parses back to what was built), recorded text cannot end a
// script element or inject markup, and the figures hold the numbers of the model. Rendering is
// checked by html_browser_test.cc.
#include "reports/html.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using nlohmann::json;
using testing::operator+;

const std::string hostile = "</script><script>alert(1)</script><!-- & \"'";
const std::string fake_plotly = "/* not plotly */ var Plotly = {newPlot: function () {}}; var s = '</script>';";

report_model sample(const fs::path& dir) {
  auto a = testing::runs("exit/a", 40, 4, outcome::crash, hostile);
  auto b = testing::runs("exit/b@bug/x", 10, 9, outcome::fail, "invariant", 100, 1, "bug/x=print");
  auto c = testing::runs("cmd", 10, 0, outcome::pass, "", 200);
  c[0].result = outcome::hang;
  c[0].signature = "futex_wait";
  c[0].when = harness::phase::exit;
  testing::write_results(dir / "out", a + b + c);
  auto m = load_report({dir / "out"});
  EXPECT_TRUE(m) << m.error().message();
  return *m;
}

// The JSON of the figure for plot `id` in `page`.
json figure_in(const std::string& page, const std::string& id) {
  const std::string open = "<script type=\"application/json\" data-plot=\"" + id + "\">";
  auto at = page.find(open);
  if (at == std::string::npos) return nullptr;
  at += open.size();
  return json::parse(page.substr(at, page.find("</script>", at) - at));
}

TEST(html_escape, escapes_markup_and_controls) {
  EXPECT_EQ(html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(html_escape(std::string("\x01\xff", 2)), "\\x01\\xff");
}

TEST(load_plotly_js, says_what_is_missing) {
  testing::temp_dir dir;
  auto none = load_plotly_js("");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.code(), core::errc::not_found);
  EXPECT_NE(none.error().message().find("install python3-plotly"), std::string::npos);
  auto missing = load_plotly_js(dir.path() / "plotly.min.js");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("plotly.js not found at " + (dir.path() / "plotly.min.js").string()), std::string::npos);
  std::ofstream(dir.path() / "other.js") << "console.log(1)";
  auto other = load_plotly_js(dir.path() / "other.js");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.code(), core::errc::corrupt);
}

TEST(load_plotly_js, finds_the_configured_file) {
  if (std::string(FAULTLINE_PLOTLY_JS_PATH).empty()) GTEST_SKIP() << "plotly.js was not found at configure time (python3-plotly)";
  ::unsetenv("FAULTLINE_PLOTLY_JS");
  EXPECT_EQ(plotly_js_path(""), fs::path(FAULTLINE_PLOTLY_JS_PATH));
  EXPECT_EQ(plotly_js_path("/x/p.js"), fs::path("/x/p.js"));
  auto js = load_plotly_js(plotly_js_path(""));
  ASSERT_TRUE(js) << js.error().message();
  EXPECT_GT(js->size(), 1'000'000u);
}

TEST(to_html, embeds_plotly_and_one_figure_per_plot) {
  testing::temp_dir dir;
  const auto m = sample(dir.path());
  const std::string page = to_html(m, {fake_plotly, dir.path(), "faultline report"});
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("var Plotly = {newPlot: function () {}}; var s = '<\\/script>';"), std::string::npos)
      << "plotly.js is embedded, with </script inside it made harmless";
  for (const char* id : plot_ids) {
    EXPECT_NE(page.find("<div class=\"plot\" id=\"" + std::string(id) + "\""), std::string::npos) << id;
    EXPECT_TRUE(figure_in(page, id).is_object()) << id;
  }
  EXPECT_EQ(figure_in(page, "plot-rate"), rate_figure(m));
  EXPECT_EQ(figure_in(page, "plot-timeline"), timeline_figure(m));
  EXPECT_NE(page.find("Plotly.newPlot(target, fig.data, fig.layout"), std::string::npos);
  EXPECT_EQ(page.find("src=\"http"), std::string::npos) << "self-contained: nothing is loaded from elsewhere";
}

TEST(to_html, recorded_text_cannot_end_a_script_or_inject_markup) {
  testing::temp_dir dir;
  const std::string page = to_html(sample(dir.path()), {fake_plotly, dir.path(), "t"});
  EXPECT_EQ(page.find("<script>alert(1)"), std::string::npos);
  EXPECT_EQ(page.find("</script><script>"), std::string::npos);
  EXPECT_NE(page.find("&lt;/script&gt;&lt;script&gt;alert(1)"), std::string::npos) << "shown, escaped, in the tables";
  // Every <script ...> is closed by the one </script> that belongs to it.
  std::size_t opens = 0, closes = 0;
  for (auto at = page.find("<script"); at != std::string::npos; at = page.find("<script", at + 1)) ++opens;
  for (auto at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closes;
  EXPECT_EQ(opens, closes);
  EXPECT_EQ(opens, 2u + std::size(plot_ids));
}

TEST(to_html, links_logs_relative_to_the_page) {
  testing::temp_dir dir;
  const std::string page = to_html(sample(dir.path()), {fake_plotly, dir.path() / "site", "t"});
  EXPECT_NE(page.find("<a href=\"../out/logs/exit-a.s1000.log\">"), std::string::npos) << page.substr(page.find("<h2>Signatures"));
}

TEST(to_html, links_each_signatures_stacks_and_shows_its_top_frames) {
  testing::temp_dir dir;
  auto runs = testing::runs("exit/a", 10, 1, outcome::crash, "SIGSEGV: f");
  runs[0].stacks = "runs/" + runs[0].run_id + "/crash-stacks.txt";
  runs[0].frames = {"f<int>  (prog)", "main  (prog)"};
  testing::write_results(dir.path() / "out", runs);
  auto m = load_report({dir.path() / "out"});
  ASSERT_TRUE(m) << m.error().message();
  const std::string page = to_html(*m, {fake_plotly, dir.path() / "site", "t"});
  const std::string details = page.substr(page.find("<h2>Signatures"));
  EXPECT_NE(details.find("<a href=\"../out/runs/exit-a.s1000/crash-stacks.txt\">"), std::string::npos) << details;
  EXPECT_NE(details.find("<pre>#0  f&lt;int&gt;  (prog)\n#1  main  (prog)</pre>"), std::string::npos) << details;
}

TEST(figures, hold_the_numbers_of_the_model) {
  testing::temp_dir dir;
  const auto m = sample(dir.path());
  const json rate = rate_figure(m);
  ASSERT_EQ(rate["data"].size(), 2u);  // no-failure variants, detection checks
  const json& clean = rate["data"][0];
  EXPECT_EQ(clean["y"], json({"exit/a", "cmd"}));
  EXPECT_DOUBLE_EQ(clean["x"][0].get<double>(), 10.0);
  EXPECT_NEAR(clean["error_x"]["array"][0].get<double>(), (m.variants[0].rate.upper95 - 0.1) * 100, 1e-9);
  EXPECT_NEAR(clean["error_x"]["arrayminus"][0].get<double>(), (0.1 - m.variants[0].rate.lower95) * 100, 1e-9);
  EXPECT_EQ(rate["data"][1]["y"], json({"exit/b@bug/x"}));
  EXPECT_DOUBLE_EQ(rate["data"][1]["x"][0].get<double>(), 90.0);
  EXPECT_EQ(rate["layout"]["yaxis"]["categoryarray"], json({"exit/a", "exit/b@bug/x", "cmd"}));

  const json outcomes = outcome_figure(m);
  std::vector<std::string> names;
  for (const auto& t : outcomes["data"]) names.push_back(t["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"pass", "fail", "crash", "hang"}));
  EXPECT_DOUBLE_EQ(outcomes["data"][2]["x"][0].get<double>(), 10.0);  // crash: 4 of 40 runs of exit/a
  EXPECT_EQ(outcomes["layout"]["barmode"], "stack");

  const json durations = duration_figure(m);
  ASSERT_EQ(durations["data"].size(), 1u);
  EXPECT_EQ(durations["data"][0]["type"], "box");
  EXPECT_EQ(durations["data"][0]["median"][0], m.variants[0].durations.median_ms);
  EXPECT_EQ(durations["data"][0]["upperfence"][2], m.variants[2].durations.max_ms);

  const json timeline = timeline_figure(m);
  std::uint64_t total = 0;
  for (const auto& t : timeline["data"])
    if (t["type"] == "bar")
      for (const auto& n : t["y"]) total += n.get<std::uint64_t>();
  EXPECT_EQ(total, m.runs);
  EXPECT_EQ(timeline["layout"]["xaxis"]["type"], "date");
}

}  // namespace
}  // namespace faultline::reports
