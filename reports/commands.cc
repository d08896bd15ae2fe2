#include "reports/commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/file_io.h"
#include "reports/detail/text.h"
#include "reports/html.h"
#include "reports/junit.h"
#include "reports/markdown.h"

namespace faultline::reports {

const char* const report_help = R"(Reads the results of one or more campaigns and writes reports of them:
  --junit F     JUnit XML (<testsuites> root; one testsuite and test case per variant, its runs, failure
                rate and 95% bounds as properties; a failure carries outcome, phase, signatures and repro)
  --markdown F  a Markdown summary for a CI step summary ("-": stdout)
  --html F      a self-contained HTML report with plots (failure rate with its interval, outcome mix,
                durations, timeline), plotly.js embedded
With none of them, the Markdown summary is printed.

DIR is a campaign's output directory (--out), a results.jsonl, or a directory holding the outputs of
several shards (searched 4 levels down). Shards are merged and every run is counted once: a run read
twice (the same shard given twice) is counted once, and a note says so; a shard missing from a sharded
campaign is noted. A torn last line is skipped, as --resume does; a malformed line is an error.

A variant is what was run and its fault spec: a scenario by its name, a command by its whole command line
(`python3 a.py` and `python3 b.py` are two rows; a row is named by its program, with more of its path or
its arguments where two would share a name).

A variant whose faults plant a bug point (faultline verify's) is a detection check: it meets its
expectation when the bug was detected and every run could be performed; any other variant when no run
failed.

plotly.js comes from --plotly-js, else $FAULTLINE_PLOTLY_JS, else the file found at configure time
(python3-plotly's, minified by the build where esbuild was found). The page carries it gzipped. Without it
the HTML report is not written (the others are) and the exit status is 2.

Exit status: 0 when every report was written (whatever the runs' outcomes: see faultline gate), 2 for
bad input or a report that could not be written.)";

const char* const gate_help = R"(Compares the current results with a baseline and fails only on evidence of a regression:
  - a variant's failure rate (a detection check's rate of runs that missed the bug) is greater, by
    Fisher's exact test, one-sided, at significance level --alpha (default 0.01); the finding names
    the test, the counts, the rates and the p-value;
  - an outcome class other than pass, or a failure signature, that the baseline never saw (for a
    detection check these are only noted); a crash named by its signal alone ("SIGABRT": its stacks
    were lost) is only noted when the baseline holds a crash of that signal.
Improvements (a significantly lower rate, outcomes and signatures no longer seen) are printed too, and
changes within chance are noted. A variant not in the baseline is held to an empty one; a baseline
variant missing now is noted. Variants are matched by what was run (a scenario's name, a command's whole
command line) and fault spec, and named as faultline report names them, with the spec
("exit/a [exit/end=delay(5ms)]", "python3 a.py").

  faultline gate --write-baseline baseline.json --current out/run     # from a good run
  faultline gate --baseline baseline.json --current out/run           # later: exit 1 on a regression

--current takes what faultline report takes (shards merged). Exit status: 0 passed (or baseline
written), 1 a regression, 2 bad usage or input (a baseline that is missing, not JSON, truncated, of
another version or missing fields is one line saying which).)";

namespace {

namespace fs = std::filesystem;

// Writes `content` to `path` through a temporary file beside it, so that a reader never sees a
// half-written report; creates missing parent directories.
core::status write_file(const fs::path& path, const std::string& content) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return core::status(core::errc::invalid_argument, path.string() + " is a directory");
  const fs::path parent = path.parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return core::status(core::errc::io_error, "create " + parent.string() + ": " + ec.message());
  }
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return core::io::sys_error(errno, "open " + tmp.string());
  auto s = core::io::write_all(fd, content, "write " + tmp.string());
  if (::close(fd) != 0 && s) s = core::io::sys_error(errno, "close " + tmp.string());
  if (s && ::rename(tmp.c_str(), path.c_str()) != 0) s = core::io::sys_error(errno, "rename " + tmp.string() + " to " + path.string());
  if (!s) ::unlink(tmp.c_str());
  return s;
}

std::vector<fs::path> as_paths(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

std::string now_iso() {
  const auto now = std::chrono::system_clock::now();
  return detail::iso_utc_ms(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count());
}

void print_notes(const char* who, const report_model& m, std::ostream& err) {
  for (const auto& note : m.notes) err << "faultline " << who << ": note: " << detail::one_line(note) << "\n";
}

std::string files_of(const report_model& m) {
  std::string s;
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    if (i == 4) return s + ", ... (" + std::to_string(m.inputs.size()) + " files)";
    s += (i ? ", " : "") + m.inputs[i].results.string();
  }
  return s;
}

std::string counts_of(const report_model& m) {
  return detail::thousands(m.runs) + (m.runs == 1 ? " run" : " runs") + " of " + detail::thousands(m.variants.size()) +
         (m.variants.size() == 1 ? " variant" : " variants");
}

}  // namespace

int report_command(const report_options& o, std::ostream& out, std::ostream& err) {
  if (o.inputs.empty()) {
    err << "faultline report: error: name at least one results directory or file\n";
    return exit_usage;
  }
  auto m = load_report(as_paths(o.inputs));
  if (!m) {
    err << "faultline report: error: " << detail::one_line(m.error().message()) << "\n";
    return exit_usage;
  }
  print_notes("report", *m, err);

  const bool none = o.junit.empty() && o.html.empty() && o.markdown.empty();
  // Where the "wrote" lines go: stdout, unless the Markdown goes there.
  std::ostream& where = (none || o.markdown == "-") ? err : out;
  bool all_written = true;
  auto write = [&](const char* what, const std::string& path, const std::string& content) {
    if (auto s = write_file(path, content); !s) {
      err << "faultline report: error: cannot write the " << what << " report: " << detail::one_line(s.message()) << "\n";
      all_written = false;
      return;
    }
    where << "  " << what << (std::string(what).size() < 8 ? std::string(8 - std::string(what).size(), ' ') : "") << " " << path << "\n";
  };

  where << "faultline report: " << counts_of(*m) << " from " << files_of(*m) << "; "
        << (m->ok() ? std::string("every variant met its expectation")
                    : detail::thousands(m->failed_variants()) + " did not meet " + (m->failed_variants() == 1 ? "its" : "their") + " expectation")
        << "\n";
  if (!o.junit.empty()) write("JUnit", o.junit, to_junit(*m));
  if (none || o.markdown == "-") {
    out << to_markdown(*m);
  } else if (!o.markdown.empty()) {
    write("Markdown", o.markdown, to_markdown(*m));
  }
  if (!o.html.empty()) {
    const fs::path js_path = plotly_js_path(o.plotly_js);
    auto js = load_plotly_js(js_path);
    if (!js) {
      err << "faultline report: error: cannot write the HTML report: " << detail::one_line(js.error().message()) << "\n";
      all_written = false;
    } else {
      html_options ho;
      ho.plotly_js = std::move(*js);
      ho.html_dir = fs::path(o.html).parent_path();
      ho.title = o.title;
      write("HTML", o.html, to_html(*m, ho));
    }
  }
  out.flush();
  return all_written ? exit_ok : exit_usage;
}

int gate_command(const gate_options& o, std::ostream& out, std::ostream& err) {
  auto usage = [&](const std::string& what) {
    err << "faultline gate: error: " << what << "\nRun 'faultline gate --help' for usage.\n";
    return exit_usage;
  };
  if (o.baseline.empty() == o.write_baseline.empty())
    return usage(o.baseline.empty() ? "give --baseline FILE (to compare) or --write-baseline FILE (to write one)"
                                    : "give --baseline or --write-baseline, not both");
  if (o.current.empty()) return usage("give --current DIR: the results to judge");
  if (!(o.alpha > 0 && o.alpha < 1)) return usage("--alpha must be between 0 and 1 (exclusive), e.g. 0.01");

  // The baseline is read first: a bad one is the error to report, whatever the current runs.
  std::optional<baseline> base;
  if (!o.baseline.empty()) {
    auto b = read_baseline(o.baseline);
    if (!b) {
      err << "faultline gate: error: " << detail::one_line(b.error().message()) << "\n";
      return exit_usage;
    }
    base = std::move(*b);
  }
  auto m = load_report(as_paths(o.current));
  if (!m) {
    err << "faultline gate: error: " << detail::one_line(m.error().message()) << "\n";
    return exit_usage;
  }
  print_notes("gate", *m, err);

  if (!base) {
    const baseline b = make_baseline(*m, now_iso());
    if (auto s = write_file(o.write_baseline, to_json(b).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"); !s) {
      err << "faultline gate: error: cannot write the baseline: " << detail::one_line(s.message()) << "\n";
      return exit_usage;
    }
    out << "gate: wrote baseline " << o.write_baseline << ": " << counts_of(*m) << " from " << files_of(*m) << "\n";
    return exit_ok;
  }

  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%g", o.alpha);
  out << "gate: " << counts_of(*m) << " (" << files_of(*m) << ") against baseline " << o.baseline << " ("
      << detail::counted(base->runs, "run") << " of " << detail::counted(base->variants.size(), "variant") << ", written "
      << detail::one_line(base->created) << "); Fisher's exact test, one-sided, alpha " << alpha << " per variant\n";
  const gate_result g = compare(*base, *m, o.alpha);
  for (const auto& f : g.findings) out << format(f) << "\n";
  if (g.passed) {
    out << "gate: passed: no significant regression and no new outcome class or signature in " << g.compared << " compared "
        << (g.compared == 1 ? "variant" : "variants");
    if (g.improved_variants) out << " (" << g.improved_variants << " improved)";
    out << "\n";
  } else {
    std::uint64_t failing = 0;
    for (const auto& f : g.findings) failing += f.fails ? 1 : 0;
    out << "gate: FAILED: " << g.failing_variants << (g.failing_variants == 1 ? " variant" : " variants") << " regressed (" << failing
        << (failing == 1 ? " finding" : " findings") << " above)";
    if (g.improved_variants) out << "; " << g.improved_variants << " improved";
    out << "\n";
  }
  out.flush();
  return g.passed ? exit_ok : exit_failed;
}

}  // namespace faultline::reports
