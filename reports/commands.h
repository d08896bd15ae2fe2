// The `faultline report` and `faultline gate` subcommands, minus argument parsing (harness/cli.cc
// declares their options with CLI11 and calls these), so that tests drive them in-process:
//
//   std::ostringstream out, err;
//   reports::report_options o;
//   o.inputs = {"out/run", "out/verify"};
//   o.html = "out/report.html";
//   int status = reports::report_command(o, out, err);   // 0: written
//
// report: reads and merges the results (report_model.h), writes each report asked for
// (atomically: a reader never sees half a file; missing parent directories are created), and
// prints where each one is. Without any output option it prints the Markdown summary to
// stdout. When plotly.js cannot be read, the HTML report is not written, the error says where it
// looked and what to install, and the other reports are still written. Notes about the inputs
// (torn lines, runs read twice, missing shards) go to `err`. Exit status: 0 when every report
// asked for was written, whatever the runs' outcomes (judging them is the gate's job); 2 for bad
// input (missing directory, no results file, a malformed line) or a report that could not be
// written.
//
// gate: with `baseline`, compares the current results with it (gate.h) and prints every
// finding, regressions first; exit status 0 when it passes, 1 when it fails. With
// `write_baseline`, writes the baseline of the current results instead (exit status 0). Exit
// status 2 for bad usage or bad input: a baseline that is missing, not JSON, truncated, of
// another version or missing fields is one line saying so.
//
// Thread safety: one call at a time (they write files and read the environment).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "reports/gate.h"

namespace faultline::reports {

/// Exit statuses (the same as the rest of the `faultline` command).
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;
inline constexpr int exit_usage = 2;

/// `faultline report DIR... [--junit F] [--html F] [--markdown F]`.
struct report_options {
  std::vector<std::string> inputs;  ///< results files, campaign directories, directories of shard outputs
  std::string junit;                ///< JUnit XML file ("" = none)
  std::string html;                 ///< HTML file ("" = none)
  std::string markdown;             ///< Markdown file ("" = none, "-" = stdout)
  std::string plotly_js;            ///< plotly.js to embed ("" = FAULTLINE_PLOTLY_JS, else the configured one)
  std::string title = "faultline report";
};

/// Runs `faultline report`; returns its exit status.
int report_command(const report_options& o, std::ostream& out, std::ostream& err);

/// `faultline gate --baseline F --current DIR | --write-baseline F --current DIR`.
struct gate_options {
  std::vector<std::string> current;  ///< as report_options::inputs
  std::string baseline;              ///< the baseline to compare with
  std::string write_baseline;        ///< where to write the current results' baseline instead
  double alpha = default_alpha;      ///< significance level, in (0, 1)
};

/// Runs `faultline gate`; returns its exit status.
int gate_command(const gate_options& o, std::ostream& out, std::ostream& err);

/// The usage text of each subcommand (its --help footer).
extern const char* const report_help;
extern const char* const gate_help;

}  // namespace faultline::reports
