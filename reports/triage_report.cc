#include "reports/triage_report.h"

#include "reports/detail/text.h"
#include "reports/html.h"
#include "reports/markdown.h"

namespace faultline::reports {
namespace {

std::string rate_of(std::uint64_t failures, std::uint64_t runs) {
  return runs ? detail::percent(static_cast<double>(failures) / static_cast<double>(runs)) : "-";
}

std::string minimal_line(const harness::shrink_record& s) {
  if (!s.reproduced) return "the failure did not reproduce in " + detail::counted(s.original_runs, "run");
  std::string rate = s.confirm_runs ? detail::percent(s.rate) + " (95% CI " + detail::percent(s.rate_lower95) + " – " +
                                          detail::percent(s.rate_upper95) + ") in " + detail::counted(s.confirm_runs, "run")
                                    : "not measured (" + s.stopped + ")";
  return "reproduces at " + rate + "; " + detail::counted(s.runs_spent, "run") + " spent" +
         (s.stopped == "done" ? "" : "; stopped: " + s.stopped);
}

// A p-value cell: a step's only (the endpoints are measured, not judged).
std::string p_cell(double p, const harness::bisect_step_record& s) {
  return s.role != "step" || s.verdict == "skip" ? "-" : detail::p_value(p);
}

std::string bisect_answer(const harness::bisect_record& b) {
  if (!b.problem.empty()) return "cannot bisect: " + b.problem;
  if (b.first_bad) return "first bad commit: " + *b.first_bad;
  std::string text = std::string("could not decide") + (b.interrupted ? " (interrupted)" : "") + ": the first bad commit is one of";
  for (const auto& c : b.undecided_range) text += " " + c.substr(0, 12);
  return text;
}

void shrink_markdown(const harness::shrink_record& s, std::string& out) {
  out += "\n#### " + markdown_code(s.run_id) + ": " + s.outcome + (s.phase.empty() ? "" : "/" + s.phase) + " " +
         markdown_code(s.signature.empty() ? "(none)" : s.signature) + "\n\n";
  out += "Original " + markdown_code(s.original) + " (the failure in " + std::to_string(s.original_hits) + " of " +
         detail::counted(s.original_runs, "run") + "); minimal " + markdown_code(s.minimal.empty() ? "(none)" : s.minimal) + ": " +
         minimal_line(s) + ".\n\n";
  if (s.steps.empty()) return;
  out += "| # | change | spec | kept | failure in |\n|--:|---|---|:-:|---|\n";
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const auto& st = s.steps[i];
    out += "| " + std::to_string(i + 1) + " | " + markdown_code(st.change) + " | " + markdown_code(st.spec.empty() ? "(none)" : st.spec) +
           " | " + (st.reproduced ? "yes" : "no") + " | " + std::to_string(st.hits) + " of " + std::to_string(st.runs) + " |\n";
  }
}

void bisect_markdown(const harness::bisect_record& b, std::string& out) {
  out += "\n### Bisect\n\n" + markdown_code(b.good) + " (good) to " + markdown_code(b.bad) + " (bad), " +
         detail::counted(b.commits, "commit") + ", at most " + detail::counted(b.runs, "run") + " a commit, alpha " + detail::p_value(b.alpha) +
         (b.signature ? ", failures signed " + markdown_code(*b.signature) : std::string()) + ".\n\n";
  out += "| commit | role | verdict | runs | failures | rate | p(like bad) | p(like good) | subject |\n";
  out += "|---|---|---|--:|--:|--:|--:|--:|---|\n";
  for (const auto& s : b.steps)
    out += "| " + markdown_code(s.commit.substr(0, 12)) + " | " + s.role + " | " + s.verdict + " | " + std::to_string(s.runs) + " | " +
           std::to_string(s.failures) + " | " + rate_of(s.failures, s.runs) + " | " + p_cell(s.p_like_bad, s) + " | " +
           p_cell(s.p_like_good, s) + " | " + markdown_code(s.subject) + " |\n";
  out += "\n**" + bisect_answer(b) + "**\n";
}

}  // namespace

std::string triage_markdown(const report_model& m) {
  std::string out;
  if (!m.shrinks.empty()) {
    out += "\n### Shrinks\n";
    for (const auto& s : m.shrinks) shrink_markdown(s, out);
  }
  for (const auto& b : m.bisects) bisect_markdown(b, out);
  return out;
}

std::string triage_html(const report_model& m) {
  std::string out;
  auto code = [](const std::string& t) { return "<code>" + html_escape(t) + "</code>"; };
  if (!m.shrinks.empty()) out += "<h2>Shrinks</h2>\n";
  for (const auto& s : m.shrinks) {
    out += "<h3>" + code(s.run_id) + " " + html_escape(s.outcome + (s.phase.empty() ? "" : "/" + s.phase)) + " " + code(s.signature) + "</h3>\n";
    out += "<p>Original " + code(s.original) + ", minimal " + code(s.minimal.empty() ? "(none)" : s.minimal) + ": " +
           html_escape(minimal_line(s)) + ".</p>\n";
    out += "<table>\n<thead><tr><th>#</th><th>change</th><th>spec</th><th>kept</th><th>failure in</th></tr></thead>\n<tbody>\n";
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      const auto& st = s.steps[i];
      out += "<tr><td class=\"num\">" + std::to_string(i + 1) + "</td><td>" + html_escape(st.change) + "</td><td>" + code(st.spec) +
             "</td><td>" + (st.reproduced ? "yes" : "no") + "</td><td>" + std::to_string(st.hits) + " of " + std::to_string(st.runs) + "</td></tr>\n";
    }
    out += "</tbody></table>\n";
  }
  for (const auto& b : m.bisects) {
    out += "<h2>Bisect</h2>\n<p>" + code(b.good) + " (good) to " + code(b.bad) + " (bad), alpha " + html_escape(detail::p_value(b.alpha)) + ".</p>\n";
    out += "<table>\n<thead><tr><th>commit</th><th>role</th><th>verdict</th><th>runs</th><th>failures</th><th>rate</th>"
           "<th>p(like bad)</th><th>p(like good)</th><th>subject</th></tr></thead>\n<tbody>\n";
    for (const auto& s : b.steps)
      out += "<tr><td>" + code(s.commit.substr(0, 12)) + "</td><td>" + s.role + "</td><td>" + s.verdict + "</td><td class=\"num\">" +
             std::to_string(s.runs) + "</td><td class=\"num\">" + std::to_string(s.failures) + "</td><td class=\"num\">" +
             rate_of(s.failures, s.runs) + "</td><td class=\"num\">" + p_cell(s.p_like_bad, s) + "</td><td class=\"num\">" +
             p_cell(s.p_like_good, s) + "</td><td>" + html_escape(s.subject) + "</td></tr>\n";
    out += "</tbody></table>\n<p><strong>" + html_escape(bisect_answer(b)) + "</strong></p>\n";
  }
  return out;
}

}  // namespace faultline::reports
