// What every report is made from: the runs of one or more results files (shards merged, each run
// counted once), summarised per variant with what each variant was expected to do.
//
//   auto m = reports::load_report({"out/run", "out/verify"});
//   if (!m) return m.error();                 // missing directory, no results file, a bad line
//   for (const auto& n : m->notes) std::cerr << n << "\n";   // torn tails, duplicates, missing shards
//   for (const auto& v : m->variants) use(v.summary.rate, v.ok, v.repro);
//
// Inputs. Each path is a results file, a directory holding `results.jsonl` (a campaign's --out),
// or a directory of such directories (the outputs of several shards, found up to four levels
// down; a campaign's own logs/ and runs/ are not searched). Files are read line by line with
// harness::scan_results: a torn last line (a writer killed mid-line) is skipped with a note, as
// `--resume` does; a malformed line anywhere else is an error naming the file and line.
//
// Merging. A run is identified by its campaign and its run number: the campaign is the options
// in the `campaign.json` beside its results file less the shard (so the shards of one campaign
// are one campaign, and `faultline run` and `faultline verify` outputs are two), or, for a
// results file without one, the run's start time. The same run read twice (the same shard given
// twice, or a directory named twice) is counted once, and a note says from which files and how
// many; one recorded twice with another outcome keeps the first reading and says so. When the
// shards of a campaign are read, a shard index missing from them is noted.
//
// Variants. Runs are grouped by their variant's identity (harness::identity_of: a scenario's
// name, or a command's whole command line as given, script and arguments included) and fault
// spec: one name run with two specs is two variants, labelled "name [faults]" (injected and real
// failures are never one count), and `python3 a.py` and `python3 b.py` are two variants. A row
// is named by display_names: a scenario by its name, a command by its program's name, made
// longer where two commands would share it. A variant
// whose fault spec plants a bug point (a `bug/...` point with an action other than off, as
// `faultline verify` does) is a detection check: its failures are the expected detections, and
// it meets its expectation when at least one run detected the bug and every run could be
// performed; the rate `verify` requires is the catalog's and is not recorded in results. Every
// other variant meets its expectation when no run failed.
//
// A soak's runs of scenarios (a results file with soak.json beside it) have a fault spec each,
// drawn from their scenario's fault space: they are grouped by scenario, with soak_faults_label as
// the variant's fault spec; each failure's repro still carries its run's own spec. A soak of a
// command gives every run the command's one spec: its runs are grouped as an `exec` campaign's,
// and match one in the gate.
//
// Memory grows with the runs by a few tens of bytes each (identity, duration, start time), not
// with their records. Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "harness/results/results.h"
#include "harness/results/shard.h"
#include "harness/results/summary.h"
#include "harness/results/triage_records.h"

namespace faultline::reports {

/// What a variant's runs are expected to do.
enum class expectation {
  no_failure,  ///< every run passes (a scenario, a command, a scenario under injected faults)
  detection,   ///< a planted bug point: runs fail, that is, detect it
};

/// "no-failure", "detection".
std::string_view to_string(expectation e) noexcept;
/// Inverse of to_string.
std::optional<expectation> expectation_from_string(std::string_view s) noexcept;

/// Whether the fault spec `faults` plants a bug point: names a `bug/...` point with a term whose
/// action is not `off`. Read from the spec's text alone (any `bug/` name counts, whether or not
/// this build's catalog has it), so that results of other builds are judged alike.
bool plants_bug_point(std::string_view faults);

/// The fault spec a soak's scenario variants are reported under.
inline constexpr std::string_view soak_faults_label = "(soak: drawn per run from the fault space)";

/// The spread of a variant's run durations, in milliseconds (all 0 without runs).
struct duration_stats {
  std::uint64_t count = 0;
  std::int64_t min_ms = 0, q1_ms = 0, median_ms = 0, q3_ms = 0, p99_ms = 0, max_ms = 0;
  double mean_ms = 0;
  std::int64_t total_ms = 0;
};

/// One variant's runs, summarised for the reports.
struct variant_report {
  std::string name;    ///< as recorded ("exit/static-pool", "exit/static-pool@bug/alloc/no-drain", "python3")
  harness::variant_identity id;  ///< what was run (with `faults`, what tells it from other variants)
  std::string faults;  ///< its fault spec ("" = none)
  /// How reports name it: its display name (display_names), or "display [faults]" where that
  /// identity has several specs.
  std::string label;
  expectation expect = expectation::no_failure;
  /// Counts, rate and interval, signatures (their first log: a path under the results file's
  /// directory, as read), first failure and pass. summary.name is `label`.
  harness::variant_summary summary;
  /// The rate the reports plot: the failure rate (no_failure) or the detection rate (detection),
  /// with its 95% interval (harness::failure_rate).
  harness::rate_estimate rate;
  std::uint64_t errors = 0;      ///< runs the harness could not perform
  std::uint64_t detections = 0;  ///< detection: runs that failed other than by error
  /// The runs that count against the variant: failures (no_failure) or runs that did not
  /// detect the bug, errors included (detection).
  std::uint64_t bad = 0;
  bool ok = true;                ///< met its expectation
  std::string verdict;           ///< one line: "3 of 100 runs failed (3.0%, 95% CI 1.0%-8.5%)"
  /// A command line that replays the run that matters most: the first failure (no_failure), or
  /// the first run that missed the bug, else the first run (detection). "" when there is none.
  std::string repro;
  /// What `repro` replays: "the first failure", "a run that missed the bug", "the first run".
  std::string repro_what;
  duration_stats durations;
  std::vector<std::string> sources;  ///< the results files its runs came from, in input order
};

/// One results file that was read.
struct input_report {
  std::filesystem::path results;              ///< the file
  std::uint64_t records = 0;                  ///< complete records in it
  std::uint64_t counted = 0;                  ///< of those, runs not already read from an earlier file
  std::uint64_t duplicates = 0;               ///< records - counted
  bool torn_tail = false;                     ///< its last line was torn and skipped
  std::optional<harness::shard> shard;        ///< from its campaign.json
};

/// Runs per time interval, for the soak timeline.
struct timeline_bucket {
  std::int64_t start_ms = 0;                       ///< milliseconds since the epoch
  std::map<harness::outcome, std::uint64_t> runs;  ///< runs started in the bucket, by outcome
};

/// When the runs happened.
struct timeline {
  std::int64_t bucket_ms = 0;               ///< width of a bucket (0: no run had a start time)
  std::vector<timeline_bucket> buckets;     ///< consecutive, from the first run's bucket
  std::int64_t first_ms = 0, last_ms = 0;   ///< first and last start times
};

/// Everything the writers need.
struct report_model {
  std::vector<input_report> inputs;
  /// In the order the campaigns ran them: by first input file, then by run number.
  std::vector<variant_report> variants;
  /// What a reader should know about the inputs, one line each (torn tails, runs read twice,
  /// missing shards, records without a start time).
  std::vector<std::string> notes;
  std::uint64_t runs = 0;        ///< runs counted, each once
  std::uint64_t duplicates = 0;  ///< records not counted because their run was already read
  timeline time;
  /// What `faultline shrink` and `faultline bisect` left in the folders given (triage_report.h).
  std::vector<harness::shrink_record> shrinks;
  std::vector<harness::bisect_record> bisects;

  /// True when every variant met its expectation.
  [[nodiscard]] bool ok() const;
  /// Variants that did not.
  [[nodiscard]] std::uint64_t failed_variants() const;
};

/// The results files that `paths` name (see the header: a file, a campaign's directory, or a
/// directory of them), in the order given (those found under one directory sorted by path).
/// Errors: not_found naming a path that does not exist or a directory that holds no results
/// file; io_error when a directory cannot be listed.
core::result<std::vector<std::filesystem::path>> find_results(const std::vector<std::filesystem::path>& paths);

/// Reads and merges the results files that `paths` name. Errors: as find_results; corrupt
/// naming the file and line of a malformed record; invalid_argument when no path is given or
/// the files hold no run at all.
core::result<report_model> load_report(const std::vector<std::filesystem::path>& paths);

/// The names rows are given, one per identity in `ids` (distinct, in that order; `names[i]` is the
/// name recorded with ids[i]'s runs): a scenario's name; a command's recorded name (its program's
/// file name), made longer only where two would share one — first by its program's path, from
/// the right (`v1/exit_race`, `v2/exit_race`), then by its arguments (`python3 a.py`), at last
/// the whole command line. No two identities get the same name.
std::vector<std::string> display_names(const std::vector<harness::variant_identity>& ids, const std::vector<std::string>& names);

/// The command line that replays `r` alone: `faultline run SCENARIO` for a scenario (its command
/// is the scenario binary's `run`), `faultline exec -- CMD` otherwise, with its seed and faults
/// and the options it recorded as changing what it did (`replay`: --timeout, --env, ...).
std::string repro_command(const harness::run_record& r);

}  // namespace faultline::reports
