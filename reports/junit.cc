#include "reports/junit.h"

#include <cstdio>

#include "harness/results/ranks.h"
#include "reports/detail/text.h"

namespace faultline::reports {
namespace {

using harness::outcome;
using harness::phase;

std::string escape(std::string_view text, bool attribute) {
  const std::string p = detail::printable(text);
  std::string out;
  out.reserve(p.size() + p.size() / 8);
  for (char c : p) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\r': out += "&#13;"; break;
      case '"': out += attribute ? "&quot;" : "\""; break;
      case '\'': out += attribute ? "&apos;" : "'"; break;
      case '\n': out += attribute ? "&#10;" : "\n"; break;
      case '\t': out += attribute ? "&#9;" : "\t"; break;
      default: out += c;
    }
  }
  return out;
}

std::string seconds(std::int64_t ms) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ms < 0 ? 0 : ms) / 1000.0);
  return buf;
}

std::string classname(const std::string& name) {
  auto slash = name.find('/');
  return slash == std::string::npos || slash == 0 ? "faultline" : "faultline." + name.substr(0, slash);
}

void property(std::string& out, std::string_view name, std::string_view value) {
  out += "      <property name=\"" + xml_attribute(name) + "\" value=\"" + xml_attribute(value) + "\"/>\n";
}

std::string outcome_counts(const harness::variant_summary& s) {
  std::string text;
  for (const auto& [o, n] : s.outcomes) {
    if (!n) continue;
    text += (text.empty() ? "" : ", ") + std::string(harness::to_string(o)) + " " + std::to_string(n);
  }
  return text;
}

// A distributed run's ranks, one line each, with the pid whose stacks the run's stack dump holds.
std::string junit_rank_table(const std::vector<harness::nccl_rank_record>& ranks) {
  if (ranks.empty()) return "";
  std::string text = "     ranks of the first run:\n";
  for (const auto& k : ranks)
    text += "       " + std::string(k.rank >= 0 ? "rank " : "") + harness::rank_label(k) +
            (k.pid && k.rank >= 0 ? "  pid " + std::to_string(k.pid) : "") + "  " + std::string(harness::to_string(k.state)) +
            "  " + harness::rank_detail(k) + "\n";
  return text;
}

// The body of a <failure> or <error>: everything a person needs to start on it.
std::string details(const variant_report& v) {
  std::string text = v.verdict + "\noutcomes: " + outcome_counts(v.summary) + "\n";
  if (!v.faults.empty()) text += "faults: " + v.faults + "\n";
  if (!v.summary.signatures.empty()) {
    text += "signatures:\n";
    for (const auto& g : v.summary.signatures) {
      text += "  " + std::to_string(g.count) + "x " + detail::outcome_and_phase(g.result, g.when) + "  " +
              (g.signature.empty() ? "(no signature)" : g.signature) + "\n";
      text += "     first run " + g.first_run + (g.first_log.empty() ? "" : ", log " + g.first_log) +
              (g.first_stacks.empty() ? "" : ", stacks " + g.first_stacks) + "\n";
      for (std::size_t i = 0; i < g.first_frames.size(); ++i)
        text += "       #" + std::to_string(i) + "  " + g.first_frames[i] + "\n";
      text += junit_rank_table(g.first_ranks);
    }
  }
  if (v.summary.points_never_reached && !v.summary.points_never_reached->empty()) {
    text += "fault points never reached:";
    for (const auto& p : *v.summary.points_never_reached) text += " " + p;
    text += "\n";
  }
  if (!v.repro.empty()) text += "repro: " + v.repro + "\n";
  return text;
}

}  // namespace

std::string xml_text(std::string_view text) { return escape(text, false); }

std::string xml_attribute(std::string_view text) { return escape(text, true); }

std::string to_junit(const report_model& m) {
  std::uint64_t failures = 0, errors = 0;
  std::int64_t total_ms = 0;
  std::string suites;
  for (const auto& v : m.variants) {
    const auto& s = v.summary;
    // Which element, if any, says what went wrong.
    enum class problem { none, failure, error } kind = problem::none;
    if (v.expect == expectation::no_failure) {
      if (s.failures > v.errors) kind = problem::failure;
      else if (v.errors) kind = problem::error;
    } else {
      if (v.errors) kind = problem::error;
      else if (v.detections == 0) kind = problem::failure;
    }
    const char* element = kind == problem::failure ? "failure" : "error";
    std::string type = kind == problem::error ? "error" : "undetected";
    std::string message = v.verdict;
    if (kind == problem::failure && v.expect == expectation::no_failure) {
      for (const auto& g : s.signatures) {
        if (g.result == outcome::error) continue;  // the most frequent failure that is not an error
        type = std::string(harness::to_string(g.result));
        message += "; most frequent: " + std::to_string(g.count) + "x " + detail::outcome_and_phase(g.result, g.when) + " " +
                   (g.signature.empty() ? "(no signature)" : g.signature);
        if (!g.first_ranks.empty()) message += "; " + harness::ranks_verdict(g.first_ranks);
        break;
      }
    }
    message = detail::one_line(message);
    if (kind == problem::failure) ++failures;
    if (kind == problem::error) ++errors;
    total_ms += v.durations.total_ms;

    std::string out;
    out += "  <testsuite name=\"" + xml_attribute(v.label) + "\" tests=\"1\" failures=\"" +
           (kind == problem::failure ? "1" : "0") + "\" errors=\"" +
           (kind == problem::error ? "1" : "0") + "\" skipped=\"0\" time=\"" + seconds(v.durations.total_ms) + "\">\n";
    out += "    <properties>\n";
    property(out, "expectation", to_string(v.expect));
    property(out, "faults", v.faults);
    property(out, "runs", std::to_string(s.runs));
    property(out, "failures", std::to_string(s.failures));
    property(out, "failure_rate", detail::number(s.rate.rate));
    property(out, "failure_rate_lower95", detail::number(s.rate.lower95));
    property(out, "failure_rate_upper95", detail::number(s.rate.upper95));
    if (v.expect == expectation::detection) {
      property(out, "detections", std::to_string(v.detections));
      property(out, "detection_rate", detail::number(v.rate.rate));
      property(out, "detection_rate_lower95", detail::number(v.rate.lower95));
      property(out, "detection_rate_upper95", detail::number(v.rate.upper95));
    }
    for (const auto& [o, n] : s.outcomes) property(out, "outcome." + std::string(harness::to_string(o)), std::to_string(n));
    property(out, "signatures", std::to_string(s.signatures.size()));
    property(out, "duration_median_ms", std::to_string(v.durations.median_ms));
    property(out, "duration_p99_ms", std::to_string(v.durations.p99_ms));
    property(out, "duration_max_ms", std::to_string(v.durations.max_ms));
    if (!v.repro.empty()) property(out, "repro", v.repro);
    out += "    </properties>\n";
    out += "    <testcase name=\"" + xml_attribute(v.label) + "\" classname=\"" + xml_attribute(classname(v.name)) + "\" time=\"" +
           seconds(v.durations.total_ms) + "\"";
    if (kind == problem::none) {
      out += "/>\n";
    } else {
      out += ">\n      <" + std::string(element) + " type=\"" + xml_attribute(type) + "\" message=\"" + xml_attribute(message) +
             "\">" + xml_text(details(v)) + "</" + element + ">\n    </testcase>\n";
    }
    out += "  </testsuite>\n";
    suites += out;
  }
  std::string doc = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  doc += "<testsuites name=\"faultline\" tests=\"" + std::to_string(m.variants.size()) + "\" failures=\"" + std::to_string(failures) +
         "\" errors=\"" + std::to_string(errors) + "\" time=\"" + seconds(total_ms) + "\">\n";
  doc += suites;
  doc += "</testsuites>\n";
  return doc;
}

}  // namespace faultline::reports
