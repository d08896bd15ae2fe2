// A Markdown summary of results, fit for a CI step summary (GitHub's $GITHUB_STEP_SUMMARY, a
// GitLab job's Markdown artifact) or a pull-request comment.
//
//   std::string md = reports::to_markdown(model);
//
// It opens with one line saying whether every variant met its expectation, then a table with a
// row per variant (status, variant, runs, failures or detections, rate and 95% interval,
// outcomes, most frequent signature), then for every variant that did not meet its expectation
// a section with its signatures (outcome, phase, count, first run and log) and the command line
// that replays it, then the notes about the inputs (torn lines, runs read twice, missing shards).
//
// Recorded text is escaped for where it lands: table cells stay on one line with `|` escaped,
// code spans are fenced with more backticks than they contain, and control characters or bytes
// that are not UTF-8 become visible escapes (detail::printable). Long lists are cut (a section
// shows at most 10 signatures, and says how many more there are) so that a suite of thousands of
// signatures still fits the size limits CI systems put on summaries.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "reports/report_model.h"

namespace faultline::reports {

/// `text` as an inline code span that shows it literally, inside a table cell: on one line, with
/// a backtick fence longer than any run of backticks in it and `|` escaped.
std::string markdown_code(std::string_view text);

/// The Markdown summary of `m` (ends with a newline).
std::string to_markdown(const report_model& m);

}  // namespace faultline::reports
