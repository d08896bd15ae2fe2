#include "reports/html.h"
#include "reports/triage_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/file_io.h"
#include "harness/results/ranks.h"
#include "harness/results/stack_hints.h"
#include "reports/detail/pack.h"
#include "reports/detail/text.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using harness::phase;
using nlohmann::json;

const char* color_of(outcome o) {
  switch (o) {
    case outcome::pass: return "#2ca02c";
    case outcome::fail: return "#ff7f0e";
    case outcome::crash: return "#d62728";
    case outcome::hang: return "#9467bd";
    case outcome::leak: return "#8c564b";
    case outcome::error: return "#7f7f7f";
  }
  return "#7f7f7f";
}

// A plotted number with the three decimals a plot can show (rates are in percent): the page
// carries "12.345", not "12.345678901234567".
json num(double v) { return std::round(v * 1000) / 1000; }

// Labels as plotly shows them: printable, one line.
json labels(const report_model& m) {
  json out = json::array();
  for (const auto& v : m.variants) out.push_back(detail::one_line(v.label));
  return out;
}

// Height for a chart with one row per variant.
int rows_height(std::size_t rows) { return 160 + 28 * static_cast<int>(rows); }

// Every axis makes room for its tick labels and title (plotly's automargin): with fixed margins
// long tick labels were cut at the plot's edge and a second axis's title sat on its ticks.
json value_axis(const std::string& title) { return {{"title", {{"text", title}, {"standoff", 8}}}, {"automargin", true}}; }

json category_axis(const report_model& m) {
  return {{"type", "category"}, {"categoryorder", "array"}, {"categoryarray", labels(m)}, {"autorange", "reversed"},
          {"automargin", true}};
}

json base_layout(const std::string& title, int height) {
  return {{"title", {{"text", title}, {"x", 0.01}}},
          {"height", height},
          {"margin", {{"l", 10}, {"r", 20}, {"t", 50}, {"b", 50}}},
          {"legend", {{"orientation", "h"}, {"y", -0.15}, {"traceorder", "normal"}}},
          {"hovermode", "closest"},
          {"font", {{"size", 12}}}};
}

// A figure as JSON that can sit inside a <script> element: no "<", ">" or "&" appears raw (they
// can occur only inside JSON strings, where \u003c is the same character), so nothing in it can
// close the element or open a comment.
std::string script_json(const json& j) {
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

// A link target for `file` from the page's directory, percent-encoded.
std::string href_to(const std::string& file, const fs::path& html_dir) {
  std::error_code ec;
  fs::path target = fs::absolute(file, ec);
  fs::path base = fs::absolute(html_dir.empty() ? fs::path(".") : html_dir, ec);
  fs::path rel = target.lexically_normal().lexically_relative(base.lexically_normal());
  const std::string path = rel.empty() ? target.string() : rel.string();
  std::string out;
  static constexpr char hex[] = "0123456789ABCDEF";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  return out;
}

std::string code(std::string_view text) { return "<code>" + html_escape(text) + "</code>"; }

// Whether a variant met its expectation, as a coloured word. Words, not emoji: a stock headless
// Chromium has no emoji font and drew ✅ and ❌ as empty boxes; every font draws "PASS".
std::string mark(bool ok) { return ok ? "<span class=\"mark pass\">PASS</span>" : "<span class=\"mark fail\">FAIL</span>"; }

// A distributed run's ranks (a signature's first run): each one's state, and the pid whose
// stacks the run's stack dump holds.
std::string html_rank_table(const harness::signature_group& g) {
  std::string out = "<p>Ranks of " + code(g.first_run) + ": " + html_escape(harness::ranks_verdict(g.first_ranks)) + "</p>\n";
  out += "<table class=\"ranks\"><thead><tr><th>rank</th><th>pid</th><th>state</th><th>collectives</th><th>last collective</th>"
         "<th>in call</th><th>fault</th><th>signal</th></tr></thead><tbody>\n";
  for (const auto& k : g.first_ranks) {
    std::string fault = k.fault.empty() ? "" : k.fault + " by nccl/" + k.fault_api + " #" + std::to_string(k.fault_call);
    out += "<tr><td class=\"num\">" + (k.rank >= 0 ? std::to_string(k.rank) : std::string("?")) + "</td><td class=\"num\">" +
           (k.pid ? std::to_string(k.pid) : std::string()) + "</td><td>" + html_escape(harness::to_string(k.state)) +
           "</td><td class=\"num\">" + std::to_string(k.collectives) + "</td><td>" + html_escape(k.last_collective) + "</td><td>" +
           html_escape(k.in_call) + "</td><td>" + html_escape(fault) + "</td><td>" +
           (k.signal ? html_escape(harness::signal_name(*k.signal)) : std::string()) + "</td></tr>\n";
  }
  return out + "</tbody></table>\n";
}

// Signatures listed per variant, the most frequent first: a variant whose every crash has a
// signature of its own (addresses in its frames) must not make the page grow with its runs.
constexpr std::size_t signatures_listed = 20;

std::string rate_text(const harness::rate_estimate& r) {
  return detail::percent(r.rate) + " <span class=\"ci\">(" + detail::percent(r.lower95) + "–" + detail::percent(r.upper95) + ")</span>";
}

std::string outcome_badges(const harness::variant_summary& s) {
  std::string out;
  for (const auto& [o, n] : s.outcomes) {
    if (!n) continue;
    out += "<span class=\"badge\" style=\"background:" + std::string(color_of(o)) + "\">" + std::string(harness::to_string(o)) + " " +
           detail::thousands(n) + "</span> ";
  }
  return out;
}

constexpr const char* style = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1200px; padding: 0 16px; color: #1f2328; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
.verdict { font-size: 16px; font-weight: 600; padding: 8px 12px; border-radius: 6px; display: inline-block; }
.verdict.ok { background: #dafbe1; } .verdict.bad { background: #ffebe9; }
.notes { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: 8px 12px; }
.notes li { margin: 2px 0; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; white-space: nowrap; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f6f8fa; padding: 1px 4px; border-radius: 4px; white-space: pre-wrap; word-break: break-all; }
pre { background: #f6f8fa; padding: 8px 12px; border-radius: 6px; overflow-x: auto; }
.ci { color: #656d76; }
.badge { color: #fff; border-radius: 10px; padding: 0 7px; font-size: 12px; white-space: nowrap; }
.mark { color: #fff; border-radius: 4px; padding: 1px 6px; font-size: 12px; font-weight: 700; letter-spacing: 0.04em; white-space: nowrap; }
.mark.pass { background: #1a7f37; } .mark.fail { background: #cf222e; }
pre.frames { margin: 4px 0 0; padding: 4px 8px; font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap; word-break: break-all; }
.plot { min-height: 200px; }
details { margin: 8px 0; } summary { cursor: pointer; font-weight: 600; }
)";

// Unpacks plotly.js (gzip in base64, from the element #plotly-js), runs it, then draws each
// figure. The body's data-plots says when it is done: "drawn", or "failed" when plotly.js could
// not be unpacked; a plot that could not be drawn says why in its element and on the console.
constexpr const char* driver = R"(
(function () {
  var specs = document.querySelectorAll('script[type="application/json"][data-plot]');
  function draw() {
    for (var i = 0; i < specs.length; i++) {
      var el = specs[i], target = document.getElementById(el.getAttribute('data-plot'));
      try {
        var fig = JSON.parse(el.textContent);
        Plotly.newPlot(target, fig.data, fig.layout, {displaylogo: false, responsive: true});
      } catch (e) {
        target.textContent = 'This plot could not be drawn: ' + e;
        console.error('faultline report: ' + target.id + ': ' + e);
      }
    }
    document.body.setAttribute('data-plots', 'drawn');
  }
  function fail(why) {
    for (var i = 0; i < specs.length; i++) {
      var target = document.getElementById(specs[i].getAttribute('data-plot'));
      target.textContent = 'This plot could not be drawn: ' + why;
      console.error('faultline report: ' + target.id + ': ' + why);
    }
    document.body.setAttribute('data-plots', 'failed');
  }
  var unpack = 'plotly.js could not be unpacked (it needs DecompressionStream: Chrome 80, Firefox 113, Safari 16.4 or later): ';
  try {
    var packed = atob(document.getElementById('plotly-js').textContent);
    var bytes = new Uint8Array(packed.length);
    for (var i = 0; i < packed.length; i++) bytes[i] = packed.charCodeAt(i);
    new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text().then(function (js) {
      var script = document.createElement('script');
      script.textContent = js;
      document.head.appendChild(script);
      draw();
    }).catch(function (e) { fail(unpack + e); });
  } catch (e) {
    fail(unpack + e);
  }
})();
)";

}  // namespace

fs::path plotly_js_path(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* env = std::getenv("FAULTLINE_PLOTLY_JS"); env && *env) return env;
  std::error_code ec;
  const fs::path built = FAULTLINE_PLOTLY_JS_PATH;
  if (built.empty() || fs::exists(built, ec)) return built;
  return std::string(FAULTLINE_PLOTLY_JS_SOURCE_PATH).empty() ? built : fs::path(FAULTLINE_PLOTLY_JS_SOURCE_PATH);
}

core::result<std::string> load_plotly_js(const fs::path& path) {
  if (path.empty())
    return core::status(core::errc::not_found,
                        "plotly.js was not found when faultline was configured (install python3-plotly and reconfigure, or "
                        "give --plotly-js FILE or FAULTLINE_PLOTLY_JS)");
  auto text = core::io::read_file(path, 64 << 20);
  if (!text) {
    if (text.code() == core::errc::not_found)
      return core::status(core::errc::not_found, "plotly.js not found at " + path.string() +
                                                     " (install python3-plotly, or give --plotly-js FILE or FAULTLINE_PLOTLY_JS)");
    return text.error();
  }
  if (text->find("newPlot") == std::string::npos)
    return core::status(core::errc::corrupt, path.string() + " is not plotly.js (it defines no newPlot)");
  return text;
}

std::string html_escape(std::string_view text) {
  const std::string p = detail::printable(text);
  std::string out;
  out.reserve(p.size());
  for (char c : p) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

json rate_figure(const report_model& m) {
  json data = json::array();
  for (expectation kind : {expectation::no_failure, expectation::detection}) {
    json x = json::array(), y = json::array(), plus = json::array(), minus = json::array(), text = json::array(),
         colors = json::array();
    for (const auto& v : m.variants) {
      if (v.expect != kind) continue;
      x.push_back(num(v.rate.rate * 100));
      y.push_back(detail::one_line(v.label));
      plus.push_back(num((v.rate.upper95 - v.rate.rate) * 100));
      minus.push_back(num((v.rate.rate - v.rate.lower95) * 100));
      text.push_back(detail::one_line(v.label + ": " + v.verdict));
      colors.push_back(v.ok ? "#1a7f37" : "#cf222e");
    }
    if (y.empty()) continue;
    const bool detection = kind == expectation::detection;
    data.push_back({{"type", "scatter"},
                    {"mode", "markers"},
                    {"name", detection ? "detection rate (bug point planted)" : "failure rate"},
                    {"x", x},
                    {"y", y},
                    {"error_x", {{"type", "data"}, {"symmetric", false}, {"array", plus}, {"arrayminus", minus}, {"thickness", 1.5}}},
                    {"marker", {{"color", colors}, {"size", 9}, {"symbol", detection ? "diamond" : "circle"}}},
                    {"hovertext", text},
                    {"hoverinfo", "text"}});
  }
  json layout = base_layout("Failure rate per variant, with its 95% interval", rows_height(m.variants.size()));
  // Small rates stay readable: the axis ends a little past the highest upper bound.
  double top = 0;
  for (const auto& v : m.variants) top = std::max(top, v.rate.upper95 * 100);
  layout["xaxis"] = value_axis("% of runs");
  layout["xaxis"]["range"] = {num(-0.02 * std::max(5.0, top)), num(std::min(102.0, std::max(5.0, top * 1.1)))};
  layout["xaxis"]["zeroline"] = true;
  layout["yaxis"] = category_axis(m);
  return {{"data", data}, {"layout", layout}};
}

json outcome_figure(const report_model& m) {
  json data = json::array();
  for (outcome o : harness::all_outcomes) {
    json x = json::array(), y = json::array(), text = json::array();
    bool any = false;
    for (const auto& v : m.variants) {
      const std::uint64_t n = v.summary.outcomes.count(o) ? v.summary.outcomes.at(o) : 0;
      any = any || n;
      x.push_back(num(v.summary.runs ? 100.0 * static_cast<double>(n) / static_cast<double>(v.summary.runs) : 0.0));
      y.push_back(detail::one_line(v.label));
      text.push_back(std::string(harness::to_string(o)) + ": " + detail::thousands(n) + " of " + detail::thousands(v.summary.runs));
    }
    if (!any) continue;
    data.push_back({{"type", "bar"},
                    {"orientation", "h"},
                    {"name", harness::to_string(o)},
                    {"x", x},
                    {"y", y},
                    {"hovertext", text},
                    {"hoverinfo", "text"},
                    {"marker", {{"color", color_of(o)}}}});
  }
  json layout = base_layout("Outcomes per variant", rows_height(m.variants.size()));
  layout["barmode"] = "stack";
  layout["xaxis"] = value_axis("% of runs");
  layout["xaxis"]["range"] = {0, 100};
  layout["yaxis"] = category_axis(m);
  return {{"data", data}, {"layout", layout}};
}

json duration_figure(const report_model& m) {
  json y = json::array(), q1 = json::array(), median = json::array(), q3 = json::array(), lo = json::array(), hi = json::array(),
       mean = json::array();
  std::int64_t min_all = -1, max_all = 0;
  for (const auto& v : m.variants) {
    const auto& d = v.durations;
    y.push_back(detail::one_line(v.label));
    q1.push_back(d.q1_ms);
    median.push_back(d.median_ms);
    q3.push_back(d.q3_ms);
    lo.push_back(d.min_ms);
    hi.push_back(d.max_ms);
    mean.push_back(num(d.mean_ms));
    min_all = min_all < 0 ? d.min_ms : std::min(min_all, d.min_ms);
    max_all = std::max(max_all, d.max_ms);
  }
  json data = json::array();
  data.push_back({{"type", "box"},
                  {"orientation", "h"},
                  {"name", "duration"},
                  {"y", y},
                  {"q1", q1},
                  {"median", median},
                  {"q3", q3},
                  {"lowerfence", lo},
                  {"upperfence", hi},
                  {"mean", mean},
                  {"boxpoints", false},
                  {"marker", {{"color", "#0969da"}}},
                  {"showlegend", false}});
  json layout = base_layout("Run durations per variant (whiskers: shortest and longest run)", rows_height(m.variants.size()));
  const bool log_axis = min_all >= 1 && max_all > 10 * min_all;
  layout["xaxis"] = value_axis("milliseconds");
  layout["xaxis"]["type"] = log_axis ? "log" : "linear";
  layout["yaxis"] = category_axis(m);
  return {{"data", data}, {"layout", layout}};
}

json timeline_figure(const report_model& m) {
  const timeline& t = m.time;
  json data = json::array();
  json layout = base_layout("Timeline: runs started per interval, by outcome", 420);
  if (t.bucket_ms == 0) {
    layout["annotations"] = {{{"text", "no run has a start time"}, {"showarrow", false}, {"xref", "paper"}, {"yref", "paper"}, {"x", 0.5}, {"y", 0.5}}};
    return {{"data", data}, {"layout", layout}};
  }
  // The buckets are consecutive: each trace gives its first bucket's middle and the width (x0,
  // dx) instead of one date per bucket.
  const std::string x0 = detail::iso_utc_ms(t.buckets.front().start_ms + t.bucket_ms / 2);
  for (outcome o : harness::all_outcomes) {
    json y = json::array();
    bool any = false;
    for (const auto& b : t.buckets) {
      const std::uint64_t n = b.runs.count(o) ? b.runs.at(o) : 0;
      any = any || n;
      y.push_back(n);
    }
    if (!any) continue;
    data.push_back({{"type", "bar"}, {"name", harness::to_string(o)}, {"x0", x0}, {"dx", t.bucket_ms}, {"y", y}, {"width", t.bucket_ms},
                    {"marker", {{"color", color_of(o)}}}});
  }
  json share = json::array();
  for (const auto& b : t.buckets) {
    std::uint64_t runs = 0, failed = 0;
    for (const auto& [o, n] : b.runs) {
      runs += n;
      if (o != outcome::pass) failed += n;
    }
    share.push_back(runs ? num(100.0 * static_cast<double>(failed) / static_cast<double>(runs)) : json(nullptr));
  }
  data.push_back({{"type", "scatter"}, {"mode", "lines+markers"}, {"name", "% not passing"}, {"x0", x0}, {"dx", t.bucket_ms}, {"y", share}, {"yaxis", "y2"},
                  {"line", {{"color", "#1f2328"}, {"width", 1.5}}}, {"marker", {{"size", 4}}}, {"connectgaps", false}});
  layout["barmode"] = "stack";
  layout["bargap"] = 0;
  const std::int64_t s = t.bucket_ms / 1000;
  const std::string width = s % 86400 == 0 ? std::to_string(s / 86400) + " d"
                            : s % 3600 == 0 ? std::to_string(s / 3600) + " h"
                            : s % 60 == 0   ? std::to_string(s / 60) + " min"
                                            : std::to_string(s) + " s";
  layout["xaxis"] = value_axis("start time (UTC), intervals of " + width);
  layout["xaxis"]["type"] = "date";
  layout["yaxis"] = value_axis("runs");
  layout["yaxis"]["rangemode"] = "tozero";
  layout["yaxis2"] = value_axis("% not passing");
  layout["yaxis2"].update({{"overlaying", "y"}, {"side", "right"}, {"range", {0, 100}}, {"showgrid", false}});
  return {{"data", data}, {"layout", layout}};
}

std::string to_html(const report_model& m, const html_options& o) {
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_escape(o.title) + "</title>\n<style>" + std::string(style) + "</style>\n</head>\n<body>\n";
  out += "<h1>" + html_escape(o.title) + "</h1>\n";

  const std::uint64_t failed = m.failed_variants();
  const std::size_t n = m.variants.size();
  if (failed == 0) {
    out += "<p class=\"verdict ok\">" + mark(true) + " " + std::string(n == 1 ? "The variant met its expectation" : "All " + detail::thousands(n) + " variants met their expectation") + "</p>\n";
  } else {
    out += "<p class=\"verdict bad\">" + mark(false) + " " + detail::thousands(failed) + " of " + detail::thousands(n) +
           (n == 1 ? " variant did not meet its expectation" : " variants did not meet their expectation") + "</p>\n";
  }
  out += "<p>" + detail::thousands(m.runs) + (m.runs == 1 ? " run" : " runs") + " of " + detail::thousands(n) +
         (n == 1 ? " variant" : " variants") + " from ";
  for (std::size_t i = 0; i < m.inputs.size(); ++i) out += (i ? ", " : "") + code(m.inputs[i].results.string());
  if (m.time.bucket_ms) out += "; started " + html_escape(detail::iso_utc_ms(m.time.first_ms)) + " – " + html_escape(detail::iso_utc_ms(m.time.last_ms));
  out += ".</p>\n";
  if (!m.notes.empty()) {
    out += "<div class=\"notes\"><strong>Notes</strong><ul>\n";
    for (const auto& note : m.notes) out += "<li>" + html_escape(note) + "</li>\n";
    out += "</ul></div>\n";
  }

  const std::pair<const char*, json> figures[] = {
      {"Failure rate", rate_figure(m)}, {"Outcomes", outcome_figure(m)}, {"Durations", duration_figure(m)}, {"Timeline", timeline_figure(m)}};
  out += "<h2>Plots</h2>\n";
  for (std::size_t i = 0; i < std::size(figures); ++i) {
    out += "<div class=\"plot\" id=\"" + std::string(plot_ids[i]) + "\" role=\"img\" aria-label=\"" + figures[i].first + "\"></div>\n";
    out += "<script type=\"application/json\" data-plot=\"" + std::string(plot_ids[i]) + "\">" + script_json(figures[i].second) + "</script>\n";
  }

  out += "<h2>Variants</h2>\n<table>\n<thead><tr><th>met</th><th>variant</th><th>faults</th><th>runs</th><th>failed</th>"
         "<th>rate (95% CI)</th><th>outcomes</th><th>duration median / p99</th><th>most frequent signature</th></tr></thead>\n<tbody>\n";
  for (const auto& v : m.variants) {
    const auto& s = v.summary;
    out += std::string("<tr class=\"") + (v.ok ? "ok" : "bad") + "\"><td title=\"" + html_escape(v.verdict) + "\">" + mark(v.ok) + "</td>";
    out += "<td>" + code(v.label) + "</td><td>" + (v.faults.empty() ? std::string() : code(v.faults)) + "</td>";
    out += "<td class=\"num\">" + detail::thousands(s.runs) + "</td><td class=\"num\">" +
           (v.expect == expectation::detection ? detail::thousands(v.detections) + " detected" : detail::thousands(s.failures)) + "</td>";
    out += "<td class=\"num\">" + rate_text(v.rate) + "</td><td>" + outcome_badges(s) + "</td>";
    out += "<td class=\"num\">" + detail::thousands(static_cast<std::uint64_t>(v.durations.median_ms)) + " / " +
           detail::thousands(static_cast<std::uint64_t>(v.durations.p99_ms)) + " ms</td><td>";
    if (!s.signatures.empty()) {
      const auto& g = s.signatures.front();
      out += html_escape(detail::outcome_and_phase(g.result, g.when)) + " " + (g.signature.empty() ? std::string("(none)") : code(g.signature));
    }
    out += "</td></tr>\n";
  }
  out += "</tbody>\n</table>\n";

  bool any_details = false;
  for (const auto& v : m.variants) {
    if (v.ok && v.summary.signatures.empty()) continue;
    if (!any_details) out += "<h2>Signatures and repro</h2>\n";
    any_details = true;
    out += std::string("<details") + (v.ok ? "" : " open") + "><summary>" + mark(v.ok) + " " + code(v.label) + ": " +
           html_escape(v.verdict) + "</summary>\n";
    if (!v.summary.signatures.empty()) {
      out += "<table><thead><tr><th>runs</th><th>outcome</th><th>signature</th><th>first run</th><th>log</th><th>stacks</th></tr></thead><tbody>\n";
      const auto& sigs = v.summary.signatures;
      for (std::size_t k = 0; k < sigs.size() && k < signatures_listed; ++k) {
        const auto& g = sigs[k];
        out += "<tr><td class=\"num\">" + detail::thousands(g.count) + "</td><td>" + html_escape(detail::outcome_and_phase(g.result, g.when)) +
               "</td><td>" + (g.signature.empty() ? std::string("(none)") : code(g.signature)) + "</td><td>" + code(g.first_run) + "</td><td>";
        if (!g.first_log.empty()) out += "<a href=\"" + html_escape(href_to(g.first_log, o.html_dir)) + "\">" + html_escape(g.first_log) + "</a>";
        else out += "(not kept)";
        out += "</td><td>";
        if (!g.first_stacks.empty())
          out += "<a href=\"" + html_escape(href_to(g.first_stacks, o.html_dir)) + "\">" + html_escape(g.first_stacks) + "</a>";
        else out += "(none)";
        if (!g.first_frames.empty()) {
          std::string frames;
          for (std::size_t i = 0; i < g.first_frames.size(); ++i)
            frames += (i ? "\n#" : "#") + std::to_string(i) + "  " + g.first_frames[i];
          out += "<pre class=\"frames\" title=\"top frames of the first run\">" + html_escape(frames) + "</pre>";
          if (const std::string hint = g.result == harness::outcome::hang ? harness::python_frames_hint(g.first_frames) : "";
              !hint.empty())
            out += "<p class=\"hint\">" + html_escape(hint) + ".</p>";
        }
        out += "</td></tr>\n";
      }
      out += "</tbody></table>\n";
      for (std::size_t k = 0; k < sigs.size() && k < signatures_listed; ++k)
        if (!sigs[k].first_ranks.empty()) out += html_rank_table(sigs[k]);
      if (sigs.size() > signatures_listed) {
        std::uint64_t runs = 0;
        for (std::size_t k = signatures_listed; k < sigs.size(); ++k) runs += sigs[k].count;
        out += "<p>" + detail::thousands(sigs.size() - signatures_listed) + " more signatures, of " + detail::thousands(runs) +
               (runs == 1 ? " run" : " runs") + ", are not listed (every run is in its results file).</p>\n";
      }
    }
    if (v.summary.points_never_reached && !v.summary.points_never_reached->empty()) {
      out += "<p>Fault points no run reached:";
      for (const auto& p : *v.summary.points_never_reached) out += " " + code(p);
      out += "</p>\n";
    }
    if (!v.repro.empty())
      out += "<p>Replay " + html_escape(v.repro_what) + ":</p>\n<pre><code>" + html_escape(v.repro) + "</code></pre>\n";
    out += "</details>\n";
  }

  out += triage_html(m);

  // plotly.js once, at the end so that the tables show while it loads; base64 holds no '<'.
  out += "<script type=\"application/octet-stream\" id=\"plotly-js\" data-encoding=\"gzip+base64\">" +
         detail::base64(detail::gzip(o.plotly_js)) + "</script>\n";
  out += "<script>" + std::string(driver) + "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace faultline::reports
