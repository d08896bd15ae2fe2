#include "reports/markdown.h"
#include "reports/triage_report.h"

#include <algorithm>

#include "harness/results/ranks.h"
#include "harness/results/stack_hints.h"
#include "reports/detail/text.h"

namespace faultline::reports {
namespace {

using harness::outcome;
using harness::phase;

constexpr std::size_t max_signatures = 10;
constexpr const char* ok_mark = "✅";
constexpr const char* fail_mark = "❌";

std::size_t longest_backtick_run(std::string_view s) {
  std::size_t best = 0, run = 0;
  for (char c : s) {
    run = c == '`' ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}

// An inline code span of `text` (one line). In a table cell, `|` must be escaped even inside
// code (GFM removes the backslash there).
std::string code_span(std::string_view text, bool in_table) {
  std::string body = detail::one_line(text);
  if (body.empty()) return "(empty)";
  if (in_table) {
    std::string escaped;
    for (char c : body) {
      if (c == '|') escaped += '\\';
      escaped += c;
    }
    body = std::move(escaped);
  }
  const std::string fence(longest_backtick_run(body) + 1, '`');
  // A span that starts or ends with a backtick, or with a space at both ends, needs a space
  // inside each fence (CommonMark strips exactly one from each side).
  const bool pad = body.front() == '`' || body.back() == '`' || (body.front() == ' ' && body.back() == ' ');
  return pad ? fence + " " + body + " " + fence : fence + body + fence;
}

// Plain recorded text (paths, notes) shown literally: every character Markdown could read as
// syntax is backslash-escaped, and & so that nothing reads as an entity.
std::string plain(std::string_view text) {
  std::string out;
  for (char c : detail::one_line(text)) {
    if (c == '&') {
      out += "&amp;";
      continue;
    }
    if (std::string_view("\\`*_[]<>|#~!").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string outcomes_cell(const harness::variant_summary& s) {
  std::string text;
  for (const auto& [o, n] : s.outcomes) {
    if (!n) continue;
    text += (text.empty() ? "" : ", ") + std::string(harness::to_string(o)) + " " + detail::thousands(n);
  }
  return text;
}

std::string rate_cell(const harness::rate_estimate& r) {
  return detail::percent(r.rate) + " (" + detail::percent(r.lower95) + "–" + detail::percent(r.upper95) + ")";
}

std::string fenced_block(std::string_view text, std::string_view info) {
  const std::string body = detail::printable(text);
  const std::string fence(std::max<std::size_t>(3, longest_backtick_run(body) + 1), '`');
  return fence + std::string(info) + "\n" + body + "\n" + fence + "\n";
}

// A distributed run's ranks (the first run of a signature): the state of each, and the pid its
// stacks are under in the run's stack dump.
void markdown_rank_table(std::string& out, const harness::signature_group& g) {
  out += "\nRanks of " + code_span(g.first_run, false) + ": " + plain(harness::ranks_verdict(g.first_ranks)) + "\n\n";
  out += "| rank | pid | state | collectives | last collective | in call | fault | signal |\n|--:|--:|---|--:|---|---|---|---|\n";
  for (const auto& k : g.first_ranks) {
    std::string fault = k.fault.empty() ? "" : k.fault + " by nccl/" + k.fault_api + " #" + std::to_string(k.fault_call);
    out += "| " + (k.rank >= 0 ? std::to_string(k.rank) : std::string("?")) + " | " + (k.pid ? std::to_string(k.pid) : std::string()) +
           " | " + std::string(harness::to_string(k.state)) + " | " + std::to_string(k.collectives) + " | " + plain(k.last_collective) +
           " | " + plain(k.in_call) + " | " + plain(fault) + " | " + (k.signal ? harness::signal_name(*k.signal) : std::string()) + " |\n";
  }
}

void variant_section(std::string& out, const variant_report& v) {
  out += "\n### " + std::string(v.ok ? ok_mark : fail_mark) + " " + code_span(v.label, false) + ": " + plain(v.verdict) + "\n\n";
  if (!v.faults.empty()) out += "Faults: " + code_span(v.faults, false) + "\n\n";
  if (!v.summary.signatures.empty()) {
    out += "| runs | outcome | signature | first run | log | stacks |\n|--:|---|---|---|---|---|\n";
    std::size_t shown = 0;
    for (const auto& g : v.summary.signatures) {
      if (shown++ == max_signatures) break;
      out += "| " + detail::thousands(g.count) + " | " + detail::outcome_and_phase(g.result, g.when) + " | " +
             (g.signature.empty() ? std::string("(none)") : code_span(g.signature, true)) + " | " + code_span(g.first_run, true) + " | " +
             (g.first_log.empty() ? std::string("(not kept)") : code_span(g.first_log, true)) + " | " +
             (g.first_stacks.empty() ? std::string("(none)") : code_span(g.first_stacks, true)) + " |\n";
    }
    // The stack behind each signature, where a person looks first.
    shown = 0;
    for (const auto& g : v.summary.signatures) {
      if (shown++ == max_signatures) break;
      if (g.first_frames.empty()) continue;
      std::string frames;
      for (std::size_t i = 0; i < g.first_frames.size(); ++i)
        frames += (i ? "\n#" : "#") + std::to_string(i) + "  " + g.first_frames[i];
      out += "\nTop frames of " + code_span(g.first_run, false) + " (" +
             (g.signature.empty() ? std::string("no signature") : code_span(g.signature, false)) + "):\n\n" + fenced_block(frames, "");
      if (const std::string hint = g.result == harness::outcome::hang ? harness::python_frames_hint(g.first_frames) : "";
          !hint.empty())
        out += "\n" + hint + ".\n";
    }
    shown = 0;
    for (const auto& g : v.summary.signatures)
      if (shown++ < max_signatures && !g.first_ranks.empty()) markdown_rank_table(out, g);
    if (v.summary.signatures.size() > max_signatures)
      out += "\n…and " + detail::thousands(v.summary.signatures.size() - max_signatures) + " more signatures (see the HTML report).\n";
  }
  if (v.summary.points_never_reached && !v.summary.points_never_reached->empty()) {
    out += "\nFault points no run reached:";
    for (const auto& p : *v.summary.points_never_reached) out += " " + code_span(p, false);
    out += "\n";
  }
  if (!v.repro.empty()) {
    out += "\nReplay " + v.repro_what + ":\n\n";
    out += fenced_block(v.repro, "sh");
  }
}

}  // namespace

std::string markdown_code(std::string_view text) { return code_span(text, true); }

std::string to_markdown(const report_model& m) {
  std::string out;
  const std::uint64_t failed = m.failed_variants();
  const std::size_t n = m.variants.size();
  if (failed == 0) {
    out += "## faultline: " + std::string(ok_mark) + " " + (n == 1 ? "the variant met its expectation" : "all " + detail::thousands(n) + " variants met their expectation") + "\n\n";
  } else {
    out += "## faultline: " + std::string(fail_mark) + " " + detail::thousands(failed) + " of " + detail::thousands(n) +
           (n == 1 ? " variant did" : " variants did") + " not meet " + (n == 1 ? "its" : "their") + " expectation\n\n";
  }
  out += detail::thousands(m.runs) + (m.runs == 1 ? " run" : " runs") + " from " + detail::thousands(m.inputs.size()) +
         (m.inputs.size() == 1 ? " results file" : " results files") + ":";
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    if (i == 5) {
      out += " and " + detail::thousands(m.inputs.size() - 5) + " more";
      break;
    }
    out += (i ? ", " : " ") + code_span(m.inputs[i].results.string(), false);
  }
  if (m.time.bucket_ms)
    out += "; runs started " + detail::iso_utc_ms(m.time.first_ms) + " – " + detail::iso_utc_ms(m.time.last_ms);
  out += ".\n\n";

  out += "| | variant | runs | failed | rate (95% CI) | outcomes | most frequent signature |\n";
  out += "|:-:|---|--:|--:|---|---|---|\n";
  for (const auto& v : m.variants) {
    const auto& s = v.summary;
    std::string failed_cell = v.expect == expectation::detection ? detail::thousands(v.detections) + " detected" : detail::thousands(s.failures);
    std::string top;
    if (!s.signatures.empty()) {
      const auto& g = s.signatures.front();
      top = detail::outcome_and_phase(g.result, g.when) + " " + (g.signature.empty() ? std::string("(none)") : code_span(g.signature, true));
    }
    out += "| " + std::string(v.ok ? ok_mark : fail_mark) + " | " + code_span(v.label, true) + " | " + detail::thousands(s.runs) + " | " +
           failed_cell + " | " + rate_cell(v.rate) + " | " + outcomes_cell(s) + " | " + top + " |\n";
  }
  const bool any_detection =
      std::any_of(m.variants.begin(), m.variants.end(), [](const auto& v) { return v.expect == expectation::detection; });
  if (any_detection)
    out += "\nA variant that plants a bug point is a detection check: its rate is the share of runs that detected the bug.\n";

  for (const auto& v : m.variants)
    if (!v.ok) variant_section(out, v);
  out += triage_markdown(m);

  if (!m.notes.empty()) {
    out += "\n### Notes\n\n";
    for (const auto& note : m.notes) out += "- " + plain(note) + "\n";
  }
  return out;
}

}  // namespace faultline::reports
