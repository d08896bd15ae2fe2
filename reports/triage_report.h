// The report sections of `faultline shrink` and `faultline bisect` (harness/results/
// triage_records.h): each shrink's steps, from the original spec to the minimal one, and a
// bisect's table, commit by commit, with the first bad commit or what could not be decided.
// load_report finds them in the folders it is given (OUT/shrink/RUN/shrink.json, OUT/bisect.json);
// to_markdown and to_html append these sections when there are any.
//
//   std::string md = reports::triage_markdown(model);   // "" when the model holds none
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "reports/report_model.h"

namespace faultline::reports {

/// "### Shrinks" and "### Bisect" in Markdown; "" when `m` has neither.
std::string triage_markdown(const report_model& m);

/// The same as HTML sections (<h2>); "" when `m` has neither.
std::string triage_html(const report_model& m);

}  // namespace faultline::reports
