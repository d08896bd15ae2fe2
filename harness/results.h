// One result record per run, and the results file they are appended to (OUT/results.jsonl).
//
// Every run the harness performs becomes one JSON object on one line, written with a single
// write(2) as soon as the run is classified, so a soak that is killed part-way keeps every
// finished run and at worst one torn last line — which `read_results` tolerates. Reports, the
// baseline gate and resumed soaks read the file back through `read_results`.
//
//   harness::results_writer w;
//   if (auto s = w.open("out/results.jsonl"); !s) return s;
//   w.append(record);                                  // thread-safe, one line per call
//   auto all = harness::read_results("out/results.jsonl");
//
// Line format (fields always present; null where not applicable):
//   {"run_id","run","name","seed","faults","injected","outcome","phase","exit_code",
//    "signal":{"name","number"},"duration_ms","signature","log","stacks","leaked_pids",
//    "leaked_shm","timestamp","command"}
// Paths ("log", "stacks") are relative to the directory that holds the results file, so an output
// directory can be moved or archived whole.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace faultline::harness {

/// How a run ended (DESIGN §5).
enum class outcome { pass, fail, crash, hang, leak, error };

/// Whether a failure happened during the work or at process exit.
enum class phase { none, run, exit };

/// Stable lower-case names ("crash", "exit"; phase::none is "").
std::string_view to_string(outcome o) noexcept;
std::string_view to_string(phase p) noexcept;
/// Inverse of to_string; nullopt for an unknown name.
std::optional<outcome> outcome_from_string(std::string_view s) noexcept;
std::optional<phase> phase_from_string(std::string_view s) noexcept;

/// Every outcome, in report order.
inline constexpr outcome all_outcomes[] = {outcome::pass, outcome::fail, outcome::crash,
                                           outcome::hang, outcome::leak, outcome::error};

/// One run, as written to results.jsonl.
struct run_record {
  std::string run_id;              ///< unique within an output directory: "<name>.s<seed>"
  std::uint64_t run = 0;           ///< global run number within the invocation (sharding)
  std::string name;                ///< scenario, variant or command name
  std::uint64_t seed = 0;          ///< FAULTLINE_SEED given to the run
  std::string faults;              ///< FAULTLINE_FAULTS given to the run ("" when none)
  bool injected = false;           ///< a fault spec was active
  outcome result = outcome::pass;  ///< "outcome" in JSON
  phase when = phase::none;        ///< "phase" in JSON (null for pass and error)
  std::optional<int> exit_code;    ///< when the run's process exited
  std::optional<int> signal;       ///< when it was killed by a signal (or crashed with one)
  std::int64_t duration_ms = 0;
  std::string signature;           ///< crash/hang/fail grouping key ("" for pass)
  std::string log;                 ///< the run's stdout+stderr ("logs/RUN.log")
  std::string stacks;              ///< the stack dump ("runs/RUN/stacks.txt"; "" when none was taken)
  std::vector<int> leaked_pids;    ///< processes left behind (killed by the harness)
  std::vector<std::string> leaked_shm;  ///< /dev/shm entries left behind (removed)
  std::string timestamp;           ///< start time, ISO 8601 UTC with milliseconds
  std::vector<std::string> command;     ///< argv of the run's process
};

/// "SIGSEGV" for 11; "SIGRTMIN+7" for real-time signals; "SIG<n>" when unknown.
std::string signal_name(int sig);

/// JSON conversion (nlohmann ADL hooks).
void to_json(nlohmann::json& j, const run_record& r);
void from_json(const nlohmann::json& j, run_record& r);

/// Appends records to a results file, one line each, from any thread.
class results_writer {
 public:
  results_writer() = default;
  results_writer(const results_writer&) = delete;
  results_writer& operator=(const results_writer&) = delete;
  ~results_writer();

  /// Opens (creating, appending) `path`. Errors: io_error when it cannot be opened.
  core::status open(const std::filesystem::path& path);
  /// Writes `r` as one line with a single write(2). Thread-safe. Errors: io_error.
  core::status append(const run_record& r);

 private:
  std::mutex mu_;
  int fd_ = -1;
};

/// What read_results found.
struct results_file {
  std::vector<run_record> records;
  bool truncated_tail = false;  ///< the last line was incomplete and was skipped
};

/// Reads every record of a results file. A last line that is incomplete (no newline and not
/// valid JSON, as left by a killed writer) is skipped and reported in `truncated_tail`; a
/// malformed line anywhere else is an error (errc::corrupt naming the line). A missing file is
/// errc::not_found.
core::result<results_file> read_results(const std::filesystem::path& path);

/// Parses results text (the file's content); same rules as read_results.
core::result<results_file> parse_results(std::string_view text);

}  // namespace faultline::harness
