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
// Line format (fields always present, null where not applicable, except "replay",
// "points_reached", "frames", "late_cuda" and "ranks", which are left out when empty, and "kind", which
// files written before it was recorded lack):
//   {"run_id","run","name","seed","faults","injected","outcome","phase","exit_code",
//    "signal":{"name","number"},"duration_ms","signature","log","stacks","frames","leaked_pids",
//    "leaked_shm","timestamp","command","kind","replay","points_reached","late_cuda","ranks"}
// "stacks" is a hang's stack dump (runs/RUN/stacks.txt) or a crash's (runs/RUN/crash-stacks.txt);
// "frames" the top frames of the stack its signature was made from ("f  (module)", top first).
// Paths ("log", "stacks") are relative to the directory that holds the results file, so an output
// directory can be moved or archived whole. They are null for a run whose files were not kept
// (a passing run beyond the first few, see campaign_options::keep).
//
// Large files are read line by line (`scan_results`), so that a soak of a million runs can be
// resumed or summarised in constant memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace faultline::harness {

/// How a run ended (DESIGN.md §9.1).
enum class outcome { pass, fail, crash, hang, leak, error };

/// Whether a failure happened during the work or at process exit.
enum class phase { none, run, exit };

/// Stable lower-case names ("crash", "exit"; phase::none is "").
std::string_view to_string(outcome o) noexcept;
std::string_view to_string(phase p) noexcept;
/// Inverse of to_string; nullopt for an unknown name.
std::optional<outcome> outcome_from_string(std::string_view s) noexcept;
std::optional<phase> phase_from_string(std::string_view s) noexcept;

/// What a variant is (DESIGN.md §10.4): a scenario of the catalog, run as the scenario binary's
/// `run NAME`, or a user's command.
enum class variant_kind { scenario, command };

/// "scenario", "command"; inverse of to_string (nullopt for another name).
std::string_view to_string(variant_kind k) noexcept;
std::optional<variant_kind> variant_kind_from_string(std::string_view s) noexcept;

/// Every outcome, in report order.
inline constexpr outcome all_outcomes[] = {outcome::pass, outcome::fail, outcome::crash,
                                           outcome::hang, outcome::leak, outcome::error};

/// One run, as written to results.jsonl.
/// One CUDA API a run's processes called after the runtime's teardown (late-cuda.PID files).
struct late_cuda_calls_record {
  std::string api;
  std::uint64_t calls = 0;
  std::string signature;  ///< "late-cuda: API ← callers", of its first call with frames
};

/// What a rank of a distributed run was doing when the run ended (harness/run/nccl_ranks.h
/// judges it; DESIGN.md §9.5).
enum class rank_state {
  in_collective,  ///< alive, and it issued the run's first incomplete collective: waiting in it
  outside,        ///< alive, and it never issued that collective (behind, stopped, stuck in an init)
  dead,           ///< its process died while the others went on (by a signal, or gone)
  exited,         ///< its process ended with the run
  missing,        ///< a rank of nranks that left no state (no NCCL call here, or on another machine)
};

/// "in-collective", "outside", "dead", "exited", "missing" and back (nullopt for another name).
std::string_view to_string(rank_state s) noexcept;
std::optional<rank_state> rank_state_from_string(std::string_view s) noexcept;

/// One rank of a distributed run, from its process's nccl.PID (faults/preload/nccl_state.h).
/// A run_record has them only when some process of the run made an NCCL call under the agent.
struct nccl_rank_record {
  int rank = -1;                  ///< -1: the process never said which
  int nranks = -1;                ///< -1: unknown
  int pid = 0;                    ///< as the run's stacks.txt names it (0 for a missing rank)
  rank_state state = rank_state::outside;
  std::uint64_t collectives = 0;  ///< collectives it issued: its sequence number
  std::string last_collective;    ///< "ncclAllReduce"; "" before the first
  std::string in_call;            ///< the NCCL call it was inside; "" none
  std::string fault;              ///< what a point did: "stopped", "killed", "aborted", "failed", "delayed"; "" none
  std::string fault_api;          ///< before which call ("ncclAllReduce")
  std::uint64_t fault_call = 0;   ///< that API's call number, 1-based
  int fault_result = 0;           ///< the ncclResult_t a `fail` answered
  std::string fault_item;         ///< the spec item's point that acted ("nccl/ncclCommInitRank*"); "" unknown
  std::uint64_t fault_delay_ms = 0;  ///< a `delay`'s duration
  bool fault_active = false;      ///< still in the point's action when the run ended (asleep in its delay)
  std::optional<int> signal;      ///< the signal it died by, or that stopped it
  std::optional<int> exit_code;   ///< what it passed to exit(), when it called it
  /// Its collectives known complete on its stream (events after each), nullopt when unknown.
  std::optional<std::uint64_t> completed;
  /// The run's first collective that some rank never issued, or that no rank completed (the same
  /// in every rank's record; 0: none, every rank issued and completed the same): its number on
  /// its communicator, as PyTorch's flight recorder numbers them.
  std::uint64_t front = 0;
  /// What this rank issued as collective #front: "ncclBroadcast(count 1024, float32, root 0)";
  /// "" when it did not issue it (or its record of it was overwritten, 256 collectives later).
  std::string front_call;
  /// The ranks issued different collectives as #front (the same in every rank's record).
  bool desync = false;
};

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
  std::string log;                 ///< the run's stdout+stderr ("logs/RUN.log"; "" when not kept)
  /// The stack dump: a hang's ("runs/RUN/stacks.txt"), a crash's ("runs/RUN/crash-stacks.txt");
  /// "" when none was taken or kept.
  std::string stacks;
  /// The top frames of the crashing thread, or of a hung tree's blocked thread
  /// (classification::top_frames); empty for other outcomes or without a stack.
  std::vector<std::string> frames;
  std::vector<int> leaked_pids;    ///< processes left behind (killed by the harness)
  std::vector<std::string> leaked_shm;  ///< /dev/shm entries left behind (removed)
  std::string timestamp;           ///< start time, ISO 8601 UTC with milliseconds
  std::vector<std::string> command;     ///< argv of the run's process
  /// What its variant is ("kind" in JSON), set by the campaign from variant::kind. Records written
  /// before the field existed have none (nullopt; identity_of tells them apart by their command).
  std::optional<variant_kind> kind;
  /// The options of the faultline command line that changed what the run did, beyond its seed
  /// and faults, as a replay line gives them again (["--timeout", "30s", "--env", "K=V",
  /// "--no-preload"]): every repro line, the command's and the reports', adds them.
  std::vector<std::string> replay;
  /// Fault-spec point patterns that some process of the run reached (its points.PID files),
  /// sorted, each once. Empty when the run had no faults or reached none of them.
  std::vector<std::string> points_reached;
  /// Each API the run's processes called after the CUDA runtime's teardown, once, with its count
  /// (--late-cuda; by API name). Empty when there were none or nothing watched.
  std::vector<late_cuda_calls_record> late_cuda;
  /// Every rank of a distributed run (its processes' nccl.PID files), judged: which were in the
  /// collective, which outside it, which dead ("ranks" in JSON, left out when empty).
  std::vector<nccl_rank_record> ranks;
};

/// What tells one variant from another in reports and the gate (DESIGN.md §10.4), with its fault
/// spec: a scenario by its variant name ("exit/a", verify's "exit/a@bug/x"; the path of the
/// binary that ran it is not part of it, so a baseline from one machine matches runs on
/// another); a command by its whole argv as given, script and arguments included (`python3 a.py`
/// and `python3 b.py` are two variants, `./v1/t` and `./v2/t` too).
struct variant_identity {
  variant_kind kind = variant_kind::scenario;
  std::vector<std::string> what;  ///< {name} for a scenario; the argv for a command
  auto operator<=>(const variant_identity&) const = default;
};

/// The identity of the variant `r` is a run of. A record without `kind` (written before it was
/// recorded) is a scenario's when it has no command or its command is `BIN run S` and its name is
/// S or S@POINT, as the scenario binary's runs are recorded; any other is a command's.
variant_identity identity_of(const run_record& r);

/// "SIGSEGV" for 11; "SIGRTMIN+7" for real-time signals; "SIG<n>" when unknown.
std::string signal_name(int sig);

/// JSON conversion (nlohmann ADL hooks). A rank is {"rank","nranks","pid","state","collectives",
/// "last_collective","in_call","fault":{"action","api","call","result"[,"item","delay_ms","active"]},
/// "signal":{"name","number"},"exit_code","completed","front":{"seq","desync"[,"call"]}}, each of
/// "last_collective" to "front" left out when empty or unknown.
void to_json(nlohmann::json& j, const nccl_rank_record& r);
void from_json(const nlohmann::json& j, nccl_rank_record& r);
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
  std::string path_;
};

/// What read_results found.
struct results_file {
  std::vector<run_record> records;
  bool truncated_tail = false;  ///< the last line was incomplete and was skipped
};

/// What scan_results went through.
struct results_scan {
  std::uint64_t records = 0;        ///< complete records handed to the callback
  std::uint64_t lines = 0;          ///< lines read, the torn one included
  bool truncated_tail = false;      ///< the last line was incomplete and was skipped
  std::uint64_t valid_bytes = 0;    ///< length of the file without its torn last line
  std::uint64_t torn_bytes = 0;     ///< length of that torn line (0 when none)
  bool ends_with_newline = true;    ///< the first valid_bytes end with '\n' (or are empty)
};

/// Called for each record of a results file with its 1-based line number. A non-ok status
/// stops the scan and is returned by scan_results.
using record_visitor = std::function<core::status(run_record&& record, std::uint64_t line)>;

/// Reads a results file one line at a time, handing each record to `visit`; memory stays flat
/// in the size of the file. A last line that is incomplete (no newline and not valid JSON, as
/// left by a writer killed mid-line) is skipped and reported in `truncated_tail`; a malformed
/// line anywhere else is an error: errc::corrupt, "PATH line N is malformed: ...". A missing
/// file is errc::not_found; other read failures are io_error.
core::result<results_scan> scan_results(const std::filesystem::path& path, const record_visitor& visit);

/// Reads every record of a results file into memory (for small files and tests; use
/// scan_results for a soak's). Same rules as scan_results.
core::result<results_file> read_results(const std::filesystem::path& path);

/// Parses results text (the file's content); same rules as scan_results, with errors naming
/// "results line N".
core::result<results_file> parse_results(std::string_view text);

/// Prepares a results file for appending after a crash of its writer: cuts off a torn last line
/// (see scan_results) and ends the file with a newline, so that the next record starts a line of
/// its own. Returns the scan (truncated_tail / torn_bytes say what was cut). `visit` sees every
/// complete record first; its error, or a malformed line, leaves the file untouched.
/// Errors: as scan_results; io_error when the file cannot be truncated or written.
core::result<results_scan> recover_results(const std::filesystem::path& path, const record_visitor& visit);

}  // namespace faultline::harness
