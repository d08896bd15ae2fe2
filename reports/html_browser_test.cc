// The HTML report in a real browser: a headless Chromium loads the page that `faultline report
// --html` wrote (plotly.js embedded, no network) and its DOM after the scripts ran must hold,
// for every plot, plotly's drawing (svg.main-svg) with the traces of that plot (points, bars,
// boxes), and the page must log no script error. A control page whose plotly does not draw
// proves that the check sees the difference.
//
// What a person sees, for the campaign set of issue 28 (where ❌ and ✅ were empty boxes, the
// timeline's left tick labels were cut off and its right axis title sat on its ticks): a copy of
// the page with a checker script appended waits for the plots, then measures in the browser and
// writes what it found into the DOM, which the test reads:
//   - glyphs: every character of the page's visible text and of the plots' labels outside
//     ASCII is drawn on a canvas in the page's font and compared, pixel for pixel, with a
//     character no font has (U+10FFFD: the browser's empty box) and with nothing drawn. Equal
//     means the reader sees a box (or nothing): no font on this machine has that character.
//     This asks the fonts the browser really has, so it holds on any machine, and fails for
//     emoji wherever no emoji font is installed (a stock headless Chromium, CI);
//   - PASS/FAIL marks: one for the verdict and one per variant, each a word with a width;
//   - axes: every tick label and axis title (plotly's .xtick/.ytick/.y2tick text and
//     .g-xtitle/.g-ytitle/.g-y2title) lies inside its plot's drawing area, and no axis title
//     overlaps a tick label of its axis (the rectangles the browser laid out).
// A control copy with the timeline's old layout (fixed margins, no automargin) proves that the
// axis check sees cut labels. FAULTLINE_REPORT_SCREENSHOT=FILE.png also saves a screenshot of
// the page, for a person to look at. Skipped, saying why, when chromium or plotly.js is not
// installed (Debian: chromium, python3-plotly).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reports/commands.h"
#include "reports/html.h"
#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using nlohmann::json;
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

// Loads `page` in a headless Chromium and returns the DOM after its scripts ran; with a
// `screenshot` path, saves a screenshot of the page instead (the DOM is then empty).
rendered render(const std::string& chromium, const fs::path& page, const fs::path& work, const std::string& screenshot = "") {
  const fs::path dom = work / "dom.html", log = work / "chromium.log", profile = work / "profile";
  const std::string action =
      screenshot.empty() ? "--dump-dom" : "--hide-scrollbars --window-size=1280,4000 --screenshot='" + screenshot + "'";
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  const std::string cmd = "timeout 90 '" + chromium + "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage " +
                          "--no-first-run --disable-extensions --user-data-dir='" + profile.string() + "' " +
                          "--enable-logging=stderr --v=0 --virtual-time-budget=10000 " + action + " 'file://" + page.string() +
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

// Appended to a copy of a report (see the file's comment): writes its findings as JSON into
// <pre id="faultline-check">, with <, > and & escaped so that the DOM dump keeps it verbatim.
constexpr const char* checker = R"(<script>
(function () {
  var started = Date.now();
  function pixels(text, font) {
    var canvas = document.createElement('canvas');
    canvas.width = 96;
    canvas.height = 64;
    var g = canvas.getContext('2d');
    g.font = font;
    g.textBaseline = 'middle';
    g.fillStyle = '#000';
    g.fillText(text, 16, 32);
    return Array.prototype.join.call(g.getImageData(0, 0, canvas.width, canvas.height).data, ',');
  }
  function box(el) {
    var r = el.getBoundingClientRect();
    return {l: r.left, t: r.top, r: r.right, b: r.bottom};
  }
  function inside(a, area) { return a.l >= area.l - 0.5 && a.r <= area.r + 0.5 && a.t >= area.t - 0.5 && a.b <= area.b + 0.5; }
  function overlap(a, b) { return a.l < b.r - 1 && b.l < a.r - 1 && a.t < b.b - 1 && b.t < a.b - 1; }
  function round(b) { return '[' + [b.l, b.t, b.r, b.b].map(Math.round).join(', ') + ']'; }
  function check() {
    var out = {plots: document.body.getAttribute('data-plots'), problems: [], missing_glyphs: [], checked_chars: 0, labels: 0};
    // Glyphs: the visible text and the plots' labels.
    var text = document.body.innerText;
    var labels = document.querySelectorAll('svg text');
    for (var i = 0; i < labels.length; i++) text += labels[i].textContent;
    var font = '16px ' + getComputedStyle(document.body).fontFamily;
    var none = pixels('\u{10FFFD}', font), blank = pixels('', font), seen = {};
    for (var ch of text) {
      if (ch.codePointAt(0) < 0x7f || /\s/.test(ch) || seen[ch]) continue;
      seen[ch] = true;
      ++out.checked_chars;
      var drawn = pixels(ch, font);
      if (drawn === none || drawn === blank) out.missing_glyphs.push(ch + ' U+' + ch.codePointAt(0).toString(16).toUpperCase());
    }
    // PASS/FAIL marks.
    var marks = document.querySelectorAll('.mark');
    out.verdict_marks = document.querySelectorAll('.verdict .mark').length;
    out.row_marks = document.querySelectorAll('tbody tr > td:first-child .mark').length;
    for (var i = 0; i < marks.length; i++)
      if (!/^(PASS|FAIL)$/.test(marks[i].textContent) || marks[i].getBoundingClientRect().width < 8)
        out.problems.push('mark ' + i + ' "' + marks[i].textContent + '" is empty');
    // Axes.
    var plots = document.querySelectorAll('.js-plotly-plot');
    out.drawn_plots = plots.length;
    for (var p = 0; p < plots.length; p++) {
      var plot = plots[p], area = box(plot.querySelector('.svg-container'));
      var all = plot.querySelectorAll('.xtick text, .ytick text, .y2tick text, .g-xtitle text, .g-ytitle text, .g-y2title text');
      for (var i = 0; i < all.length; i++) {
        if (!all[i].textContent) continue;
        ++out.labels;
        var b = box(all[i]);
        if (!inside(b, area))
          out.problems.push(plot.id + ': "' + all[i].textContent + '" (' + all[i].parentNode.getAttribute('class') + ') at ' +
                            round(b) + ' is not inside the plot ' + round(area));
      }
      ['x', 'y', 'y2'].forEach(function (axis) {
        var title = plot.querySelector('.g-' + axis + 'title text');
        if (!title || !title.textContent) return;
        var ticks = plot.querySelectorAll('.' + axis + 'tick text');
        for (var i = 0; i < ticks.length; i++)
          if (ticks[i].textContent && overlap(box(title), box(ticks[i])))
            out.problems.push(plot.id + ': the title "' + title.textContent + '" ' + round(box(title)) +
                              ' overlaps the tick label "' + ticks[i].textContent + '" ' + round(box(ticks[i])));
      });
    }
    var pre = document.createElement('pre');
    pre.id = 'faultline-check';
    pre.textContent = JSON.stringify(out).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026');
    document.body.appendChild(pre);
  }
  // Until the page says its plots are done, or they all are (a page that draws them at once),
  // or 5 s (of Chromium's 10 s virtual time budget) have passed.
  (function wait() {
    var done = document.body.getAttribute('data-plots') ||
               document.querySelectorAll('.js-plotly-plot').length === document.querySelectorAll('[data-plot]').length;
    if (!done && Date.now() - started < 5000) return setTimeout(wait, 50);
    check();
  })();
})();
</script>
)";

// What the checker found on `page` (a copy of it with the checker appended is loaded).
json check_in_browser(const std::string& chromium, const fs::path& page, const fs::path& work) {
  std::string html = testing::read_text(page);
  const auto end = html.rfind("</body>");
  if (end == std::string::npos) return {{"error", "no </body> in the page"}};
  html.insert(end, checker);
  const fs::path copy = work / "checked.html";
  std::ofstream(copy, std::ios::binary | std::ios::trunc) << html;
  const rendered r = render(chromium, copy, work);
  const std::string open = "<pre id=\"faultline-check\">";
  const auto at = r.dom.find(open);
  if (r.status != 0 || at == std::string::npos) return {{"error", "no findings: status " + std::to_string(r.status) + "\n" + r.log}};
  const auto from = at + open.size();
  return json::parse(r.dom.substr(from, r.dom.find("</pre>", from) - from));
}

// The report of issue 28's campaign set (5,000 runs, 20 variants, 4 campaigns), at DIR/report.html.
fs::path campaign_set_report(const fs::path& dir) {
  std::ostringstream out, err;
  report_options o;
  for (const auto& d : testing::campaign_set(dir / "set", 5000)) o.inputs.push_back(d.string());
  o.html = (dir / "report.html").string();
  EXPECT_EQ(report_command(o, out, err), exit_ok) << err.str();
  return o.html;
}

TEST(html_in_a_browser, marks_and_labels_are_drawn_where_a_reader_sees_them) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (Debian package: chromium): the HTML report was not rendered";
  if (std::string(FAULTLINE_PLOTLY_JS_PATH).empty() && !std::getenv("FAULTLINE_PLOTLY_JS"))
    GTEST_SKIP() << "plotly.js not found at configure time (Debian package: python3-plotly)";
  testing::temp_dir dir;
  const fs::path page = campaign_set_report(dir.path());
  const json found = check_in_browser(chromium, page, dir.path());
  ASSERT_FALSE(found.contains("error")) << found["error"].get<std::string>();
  EXPECT_EQ(found["plots"], "drawn") << found.dump(2);
  EXPECT_EQ(found["drawn_plots"], std::size(plot_ids));
  EXPECT_EQ(found["missing_glyphs"], json::array()) << "characters this browser draws as empty boxes";
  EXPECT_GE(found["checked_chars"].get<int>(), 1) << "the en dash of the intervals, at least";
  EXPECT_EQ(found["verdict_marks"], 1);
  EXPECT_EQ(found["row_marks"], 20);
  EXPECT_GE(found["labels"].get<int>(), 50) << "tick labels and titles were measured";
  EXPECT_EQ(found["problems"], json::array()) << found["problems"].dump(2);
  if (const char* shot = std::getenv("FAULTLINE_REPORT_SCREENSHOT"); shot && *shot) {
    const rendered r = render(chromium, page, dir.path(), shot);
    EXPECT_EQ(r.status, 0) << r.log;
  }
}

// The control: the same report with the timeline's layout as it was (margins of 10 and 20
// pixels, no automargin), whose tick labels the check must find cut off.
TEST(html_in_a_browser, the_check_sees_labels_cut_off) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed (Debian package: chromium)";
  if (std::string(FAULTLINE_PLOTLY_JS_PATH).empty() && !std::getenv("FAULTLINE_PLOTLY_JS"))
    GTEST_SKIP() << "plotly.js not found at configure time (Debian package: python3-plotly)";
  testing::temp_dir dir;
  const fs::path page = campaign_set_report(dir.path());
  std::string html = testing::read_text(page);
  const std::string open = "data-plot=\"plot-timeline\">";
  const auto from = html.find(open) + open.size(), to = html.find("</script>", from);
  json fig = json::parse(html.substr(from, to - from));
  fig["layout"]["margin"] = {{"l", 10}, {"r", 20}, {"t", 50}, {"b", 50}};
  for (const char* axis : {"xaxis", "yaxis", "yaxis2"}) fig["layout"][axis]["automargin"] = false;
  html.replace(from, to - from, fig.dump());
  std::ofstream(dir.path() / "old-layout.html", std::ios::binary | std::ios::trunc) << html;
  const json found = check_in_browser(chromium, dir.path() / "old-layout.html", dir.path());
  ASSERT_FALSE(found.contains("error")) << found["error"].get<std::string>();
  bool cut = false;
  for (const auto& p : found["problems"]) cut = cut || p.get<std::string>().rfind("plot-timeline: ", 0) == 0;
  EXPECT_TRUE(cut) << found.dump(2);
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
