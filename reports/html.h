// A self-contained HTML report of results: one file, no network, plots drawn by plotly.js
// (embedded once, gzipped in base64, unpacked by the browser) from figures given as plotly JSON
// specs.
//
//   auto js = reports::load_plotly_js(reports::plotly_js_path(""));
//   if (!js) return js.error();                   // says where it looked and what to install
//   std::string page = reports::to_html(model, {*js, "out"});
//
// The page: whether every variant met its expectation, the inputs and their notes, four plots,
// a table of the variants, and for each variant with failure signatures its signatures (outcome,
// phase, count, first run, a link to its log and to its stacks with their top frames; the 20
// most frequent) and repro command line (open for the variants that did not meet their
// expectation). Whether a variant met its expectation is a coloured PASS or FAIL (class "mark"),
// text that every font draws. The plots, each in an element whose id is in `plot_ids`:
//   plot-rate       failure rate per variant with its 95% interval (a detection check: its
//                   detection rate), as points with error bars
//   plot-outcomes   the outcome mix per variant, as stacked shares of its runs
//   plot-durations  run durations per variant (min, quartiles, max; log axis when they span
//                   more than a decade), as box plots
//   plot-timeline   the soak timeline: runs started per interval, stacked by outcome, and the
//                   share that failed, over the time the runs covered
// Each figure is a <script type="application/json"> holding {"data": [...], "layout": {...}}
// that a small script hands to Plotly.newPlot once plotly.js is unpacked (the body's
// data-plots attribute then says "drawn", or "failed" when it could not be unpacked); every
// axis makes room for its labels (automargin). The figures hold aggregates only (per variant,
// per timeline interval; numbers to three decimals), so the page grows with the variants and
// their signatures, not with the runs: about 1.6 MB for 20 variants, of which plotly.js
// minified is 1.5 MB. Recorded text is escaped for HTML, and for JSON inside a script element
// (no "</" can end it early).
//
// Thread safety: pure functions (plotly_js_path reads the environment).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "reports/report_model.h"

namespace faultline::reports {

/// The ids of the plots' elements, in page order.
inline constexpr const char* plot_ids[] = {"plot-rate", "plot-outcomes", "plot-durations", "plot-timeline"};

/// How to write the page.
struct html_options {
  std::string plotly_js;           ///< the plotly.js source (load_plotly_js), embedded gzipped in base64
  std::filesystem::path html_dir;  ///< the directory the page will be written to: log links are relative to it
  std::string title = "faultline report";
};

/// Where plotly.js is read from: `explicit_path` when not empty, else $FAULTLINE_PLOTLY_JS when
/// set, else the copy the build minified (where esbuild was found), else the file found when
/// faultline was configured (empty when none was). The minified copy is in the build tree: when
/// it is gone, the file it was made from.
std::filesystem::path plotly_js_path(const std::string& explicit_path);

/// Reads plotly.js from `path`. Errors: not_found (an empty path: none was found at configure
/// time; or no such file), saying what to install or set; corrupt when the file is not plotly.js.
core::result<std::string> load_plotly_js(const std::filesystem::path& path);

/// `text` escaped for HTML text and double-quoted attribute values (after detail::printable).
std::string html_escape(std::string_view text);

/// The figures, as plotly JSON specs {"data": [...], "layout": {...}}.
nlohmann::json rate_figure(const report_model& m);
nlohmann::json outcome_figure(const report_model& m);
nlohmann::json duration_figure(const report_model& m);
nlohmann::json timeline_figure(const report_model& m);

/// The page.
std::string to_html(const report_model& m, const html_options& o);

}  // namespace faultline::reports
