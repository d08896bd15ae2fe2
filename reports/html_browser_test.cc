// The HTML report in a real browser: a headless Chromium loads the page that `faultline report
// --html` wrote (plotly.js embedded, no network) and its DOM after the scripts ran must hold,
// for every plot, plotly's drawing (svg.main-svg) with the traces of that plot (points, bars,
// boxes), and the page must log no script error. A control page whose plotly does not draw
// proves that the check sees the difference. Skipped, saying why, when chromium or plotly.js is
// not installed (Debian: chromium, python3-plotly).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reports/commands.h"
#include "reports/html.h"
#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using testing::operator+;

// The browser: $FAULTLINE_CHROMIUM, else the first of the usual names on PATH.
std::string find_chromium() {
  if (const char* env = std::getenv("FAULTLINE_CHROMIUM"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
      const fs::path p = fs::path(dir) / name;
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return "";
}

struct rendered {
  int status = -1;
  std::string dom, log;
};

// Loads `page` in a headless Chromium and returns the DOM after its scripts ran.
rendered render(const std::string& chromium, const fs::path& page, const fs::path& work) {
  const fs::path dom = work / "dom.html", log = work / "chromium.log", profile = work / "profile";
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  const std::string cmd = "timeout 90 '" + chromium + "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage " +
                          "--no-first-run --disable-extensions --user-data-dir='" + profile.string() + "' " +
                          "--enable-logging=stderr --v=0 --virtual-time-budget=10000 --dump-dom 'file://" + page.string() +
                          "' >'" + dom.string() + "' 2>'" + log.string() + "'";
  rendered r;
  r.status = std::system(cmd.c_str());
  r.dom = testing::read_text(dom);
  r.log = testing::read_text(log);
  return r;
}

// The part of the DOM that belongs to the plot `id`: from its element's start tag to the
// figure's script, which follows the element.
std::string plot_part(const std::string& dom, const std::string& id) {
  auto at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  at = dom.rfind("<div", at);
  const auto end = dom.find("data-plot=\"" + id + "\"", at);
  return dom.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(html_in_a_browser, every_plot_is_drawn) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (Debian package: chromium): the HTML report was not rendered";
  if (std::string(FAULTLINE_PLOTLY_JS_PATH).empty() && !std::getenv("FAULTLINE_PLOTLY_JS"))
    GTEST_SKIP() << "plotly.js not found at configure time (Debian package: python3-plotly)";

  testing::temp_dir dir;
  auto recs = testing::runs("exit/static-pool", 120, 9, outcome::crash, "SIGSEGV: pool::~pool | main </script>", 0, 3) +
              testing::runs("exit/static-pool@bug/alloc/no-exit-guard", 120, 118, outcome::fail, "no-device-call-after-teardown", 1, 3,
                            "bug/alloc/no-exit-guard=print") +
              testing::runs("accounting/kill-mid-lock", 120, 2, outcome::hang, "futex_wait | lock", 2, 3);
  for (std::size_t i = 0; i < recs.size(); ++i) recs[i].duration_ms = 5 + static_cast<std::int64_t>((i * 37) % 400);
  testing::write_results(dir.path() / "out", recs);

  std::ostringstream out, err;
  report_options o;
  o.inputs = {(dir.path() / "out").string()};
  o.html = (dir.path() / "report.html").string();
  ASSERT_EQ(report_command(o, out, err), exit_ok) << err.str();

  const rendered r = render(chromium, dir.path() / "report.html", dir.path());
  ASSERT_EQ(r.status, 0) << "chromium failed:\n" << r.log;
  ASSERT_FALSE(r.dom.empty()) << r.log;
  // The trace each plot must have drawn (plotly's class names for its trace layers).
  const std::pair<const char*, std::vector<const char*>> expected[] = {
      {"plot-rate", {"trace scatter", "errorbar"}},
      {"plot-outcomes", {"trace bars"}},
      {"plot-durations", {"trace boxes"}},
      {"plot-timeline", {"trace bars", "trace scatter"}},
  };
  for (const auto& [id, traces] : expected) {
    const std::string part = plot_part(r.dom, id);
    ASSERT_FALSE(part.empty()) << id << " is not in the DOM";
    EXPECT_GE(count(part, "class=\"main-svg\""), 1u) << id << " was not drawn";
    EXPECT_NE(part.find("js-plotly-plot"), std::string::npos) << id;
    for (const char* trace : traces) EXPECT_NE(part.find(trace), std::string::npos) << id << " has no " << trace;
    EXPECT_EQ(part.find("could not be drawn"), std::string::npos) << id;
  }
  EXPECT_EQ(r.log.find("Uncaught"), std::string::npos) << r.log;
  EXPECT_EQ(r.log.find("faultline report:"), std::string::npos) << r.log;
}

TEST(html_in_a_browser, the_check_sees_a_page_that_draws_nothing) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (Debian package: chromium)";
  testing::temp_dir dir;
  testing::write_results(dir.path() / "out", testing::runs("exit/a", 10, 1, outcome::crash, "SIGSEGV: f"));
  std::ofstream(dir.path() / "plotly.js") << "var Plotly = {newPlot: function () { throw new Error('no plotly here'); }};";
  std::ostringstream out, err;
  report_options o;
  o.inputs = {(dir.path() / "out").string()};
  o.html = (dir.path() / "report.html").string();
  o.plotly_js = (dir.path() / "plotly.js").string();
  ASSERT_EQ(report_command(o, out, err), exit_ok) << err.str();
  const rendered r = render(chromium, dir.path() / "report.html", dir.path());
  ASSERT_EQ(r.status, 0) << r.log;
  for (const char* id : plot_ids) {
    EXPECT_EQ(count(plot_part(r.dom, id), "class=\"main-svg\""), 0u) << id;
    EXPECT_NE(plot_part(r.dom, id).find("could not be drawn: Error: no plotly here"), std::string::npos) << id;
  }
  EXPECT_NE(r.log.find("faultline report: plot-rate: Error: no plotly here"), std::string::npos) << r.log;
}

}  // namespace
}  // namespace faultline::reports
