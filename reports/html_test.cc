// The HTML report without a browser: plotly.js is embedded once (gzipped, in base64: unpacked
// here with zlib, it is the source given), each plot has its element and its figure (a plotly
// JSON spec that parses back to what was built), recorded text cannot end a script element or
// inject markup, the figures hold the numbers of the model, every axis makes room for its
// labels, verdicts are words and not emoji, and the page stays small: under 2 MB for a campaign
// set of 5,000 runs with the plotly.js the build found (8.7 MB before: plotly.js unminified and
// verbatim), growing with the variants, not the runs. Rendering is checked by
// html_browser_test.cc.
#include "reports/html.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>

#include "reports/detail/text.h"
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

// The plotly.js that `page` carries: its #plotly-js element, base64-decoded and gunzipped.
std::string embedded_plotly(const std::string& page) {
  const std::string open = "<script type=\"application/octet-stream\" id=\"plotly-js\" data-encoding=\"gzip+base64\">";
  auto at = page.find(open);
  if (at == std::string::npos) return "(no #plotly-js element)";
  at += open.size();
  const std::string text = page.substr(at, page.find("</script>", at) - at);
  static const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string packed;
  unsigned bits = 0, n = 0;
  for (char c : text) {
    if (c == '=') break;
    const auto d = digits.find(c);
    if (d == std::string::npos) return "(not base64)";
    bits = bits << 6 | static_cast<unsigned>(d);
    if ((n += 6) >= 8) packed += static_cast<char>(bits >> (n -= 8) & 0xff);
  }
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "(inflateInit2 failed)";
  std::string out;
  char buf[1 << 14];
  z.next_in = reinterpret_cast<Bytef*>(packed.data());
  z.avail_in = static_cast<uInt>(packed.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END ? out : "(not gzip)";
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
  EXPECT_EQ(embedded_plotly(page), fake_plotly) << "plotly.js is embedded, packed";
  EXPECT_EQ(page.find("var Plotly"), std::string::npos) << "and only packed: its </script cannot end the element";
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
  EXPECT_NE(details.find(">#0  f&lt;int&gt;  (prog)\n#1  main  (prog)</pre>"), std::string::npos) << details;
  EXPECT_EQ(details.find("<details><summary>top frames"), std::string::npos) << "the frames show without a click";
}

TEST(figures, hold_the_numbers_of_the_model) {
  testing::temp_dir dir;
  const auto m = sample(dir.path());
  const json rate = rate_figure(m);
  ASSERT_EQ(rate["data"].size(), 2u);  // no-failure variants, detection checks
  const json& clean = rate["data"][0];
  EXPECT_EQ(clean["y"], json({"exit/a", "cmd"}));
  EXPECT_DOUBLE_EQ(clean["x"][0].get<double>(), 10.0);
  EXPECT_NEAR(clean["error_x"]["array"][0].get<double>(), (m.variants[0].rate.upper95 - 0.1) * 100, 5e-4);  // three decimals
  EXPECT_NEAR(clean["error_x"]["arrayminus"][0].get<double>(), (0.1 - m.variants[0].rate.lower95) * 100, 5e-4);
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
  // Consecutive buckets: a first date and a width, not a date per bucket in every trace.
  EXPECT_EQ(timeline["data"][0]["x0"], detail::iso_utc_ms(m.time.buckets.front().start_ms + m.time.bucket_ms / 2));
  EXPECT_EQ(timeline["data"][0]["dx"], m.time.bucket_ms);
  EXPECT_FALSE(timeline["data"][0].contains("x"));
}

TEST(figures, every_axis_makes_room_for_its_labels) {
  testing::temp_dir dir;
  const auto m = sample(dir.path());
  for (const json& fig : {rate_figure(m), outcome_figure(m), duration_figure(m), timeline_figure(m)}) {
    std::size_t axes = 0;
    for (const auto& [key, value] : fig["layout"].items()) {
      if (key.rfind("xaxis", 0) != 0 && key.rfind("yaxis", 0) != 0) continue;
      ++axes;
      EXPECT_EQ(value.value("automargin", false), true) << key << " of " << fig["layout"]["title"]["text"];
    }
    EXPECT_GE(axes, 2u) << fig["layout"]["title"]["text"];
  }
  EXPECT_TRUE(timeline_figure(m)["layout"].contains("yaxis2"));
}

TEST(to_html, verdicts_are_words_that_every_font_draws) {
  testing::temp_dir dir;
  const std::string page = to_html(sample(dir.path()), {fake_plotly, dir.path(), "t"});
  EXPECT_EQ(page.find("\u2705"), std::string::npos) << "no ✅: a browser without an emoji font draws an empty box";
  EXPECT_EQ(page.find("\u274c"), std::string::npos) << "no ❌";
  EXPECT_NE(page.find("<p class=\"verdict bad\"><span class=\"mark fail\">FAIL</span> 2 of 3 variants"), std::string::npos);
  std::size_t pass = 0, fail = 0;
  for (auto at = page.find("<span class=\"mark pass\">PASS</span>"); at != std::string::npos; at = page.find("mark pass", at + 1)) ++pass;
  for (auto at = page.find("<span class=\"mark fail\">FAIL</span>"); at != std::string::npos; at = page.find("mark fail", at + 1)) ++fail;
  EXPECT_GE(pass, 2u);  // a row each for the two variants that met their expectation
  EXPECT_GE(fail, 3u);  // the verdict, the row and the details of exit/a
}

TEST(to_html, lists_a_variants_twenty_most_frequent_signatures) {
  testing::temp_dir dir;
  std::vector<harness::run_record> recs;
  for (std::uint64_t i = 0; i < 30; ++i)
    for (std::uint64_t k = 0; k <= i; ++k) recs.push_back(testing::record("exit/a", recs.size(), outcome::crash, "sig-" + std::to_string(i)));
  testing::write_results(dir.path() / "out", recs);
  auto m = load_report({dir.path() / "out"});
  ASSERT_TRUE(m) << m.error().message();
  const std::string page = to_html(*m, {fake_plotly, dir.path(), "t"});
  EXPECT_NE(page.find("<code>sig-29</code>"), std::string::npos);  // 30 runs: the most frequent
  EXPECT_NE(page.find("<code>sig-10</code>"), std::string::npos);  // the 20th
  EXPECT_EQ(page.find("<code>sig-9</code>"), std::string::npos);
  // sig-0 .. sig-9: 1 + 2 + ... + 10 runs
  EXPECT_NE(page.find("<p>10 more signatures, of 55 runs, are not listed (every run is in its results file).</p>"), std::string::npos);
}

// The campaign set of issue 28 (its report weighed 8.7 MB, of which plotly.js verbatim was 8.65 MB
// and the figures and tables 0.1 MB), with the plotly.js this build embeds.
TEST(to_html, a_campaign_set_of_5000_runs_weighs_under_2_mb) {
  if (std::string(FAULTLINE_PLOTLY_JS_PATH).empty()) GTEST_SKIP() << "plotly.js was not found at configure time (python3-plotly)";
  testing::temp_dir dir;
  std::vector<fs::path> inputs;
  for (const auto& d : testing::campaign_set(dir.path(), 5000)) inputs.push_back(d);
  auto m = load_report(inputs);
  ASSERT_TRUE(m) << m.error().message();
  ASSERT_EQ(m->runs, 5000u);
  ASSERT_EQ(m->variants.size(), 20u);
  auto js = load_plotly_js(FAULTLINE_PLOTLY_JS_PATH);
  ASSERT_TRUE(js) << js.error().message();
  const std::string page = to_html(*m, {*js, dir.path(), "faultline report"});
  EXPECT_LT(page.size(), 2'000'000u) << "plotly.js " << js->size() << " bytes (" << FAULTLINE_PLOTLY_JS_PATH
                                      << "; unminified without esbuild at configure time)";
  EXPECT_EQ(embedded_plotly(page), *js);
}

// With plotly.js left out of the count, the page of 20 variants is the same size for 8,000 and
// for 16,000 runs, though every crash has a signature of its own (at 8,000, more than 20 a
// variant already).
TEST(to_html, grows_with_the_variants_not_the_runs) {
  testing::temp_dir dir;
  auto page_of = [&](std::uint64_t runs) {
    std::vector<fs::path> inputs;
    for (const auto& d : testing::campaign_set(dir.path() / std::to_string(runs), runs)) inputs.push_back(d);
    auto m = load_report(inputs);
    EXPECT_TRUE(m) << m.error().message();
    return m ? to_html(*m, {"", dir.path(), "t"}) : std::string();
  };
  const std::size_t small = page_of(8000).size(), large = page_of(16000).size();
  EXPECT_LT(large, small + small / 20) << small << " bytes for 8,000 runs, " << large << " for 16,000";
  EXPECT_LT(large, 400'000u);
}

TEST(to_html, a_distributed_hang_has_a_table_of_its_ranks) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::distributed_hang("ddp/allreduce", 3));
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const std::string page = to_html(*m, {fake_plotly, dir.path(), "faultline report"});
  EXPECT_NE(page.find("<p>Ranks of <code>ddp-allreduce.s1000</code>: ranks: 1 outside: 2 collectives"), std::string::npos);
  EXPECT_NE(page.find("<tr><td class=\"num\">1</td><td class=\"num\">4101</td><td>outside</td><td class=\"num\">2</td>"
                      "<td>ncclAllReduce</td><td></td><td>stopped by nccl/ncclAllReduce #3</td><td>SIGSTOP</td></tr>"),
            std::string::npos);
}

}  // namespace
}  // namespace faultline::reports
