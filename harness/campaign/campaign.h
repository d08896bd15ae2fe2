// A campaign: many runs of one or more variants (a scenario, a scenario with a bug point
// planted, a user's command), spread over worker threads, each run isolated by run_once and
// recorded as one line of OUT/results.jsonl the moment it ends.
//
// Runs are numbered globally, round-robin over the variants (run k is repetition k / V of
// variant k % V), so a shard (`--shard i/n`) takes every n-th run and a campaign stopped early
// has tried every variant about equally. Repetition r of a variant gets seed S + r: the seed of
// a failure is all it takes to replay it.
//
//   harness::campaign_options o;
//   o.variants = {{.name = "exit/static-pool", .argv = {bin, "run", "exit/static-pool"}, .timeout = 20s}};
//   o.repeat = 100;
//   o.seed = 42;
//   o.out_dir = "out";
//   auto r = harness::run_campaign(o);   // r->summaries: one per variant
//
// Output directory (OUT = out_dir):
//   OUT/results.jsonl   one line per run (results.h), appended as each run ends
//   OUT/campaign.json   the options that fix the run numbering (repeat, seed, shard, variant
//                       names and fault specs), written when a campaign starts; what `resume`
//                       checks against
//   OUT/logs/RUN.log, OUT/runs/RUN/   a run's output and files, kept for every run that did
//                       not pass and, by default, the first keep_passes passes of each variant
//                       (`keep`); a pruned run's record has no "log" or "stacks"
//   OUT/.faultline.lock  held (out_lock.h) while the campaign runs: a second campaign in OUT is
//                       refused, naming the first one's pid
//
// An earlier campaign in OUT (its results.jsonl or campaign.json) is never replaced unasked: a new
// campaign there is an error naming it (find_recorded_campaign, check_out_dir_choice) unless
// `resume` continues it or `replace` clears it first; `resume` with nothing there is an error too.
//
// Memory does not grow with the number of runs: the summaries are accumulated as runs finish
// (summary.h) and no record is kept; a resumed campaign keeps one bit per recorded run.
//
// Resuming (`resume`): the results already in OUT/results.jsonl count as performed runs. A torn
// last line (the harness was killed while writing it) is cut off with a warning; a malformed
// line elsewhere, a record that this campaign would not have made (another name, seed or fault
// spec for its run number) or a campaign.json with other options is an error, and nothing runs.
// A run recorded twice counts once.
//
// Thread safety: run_campaign blocks; it may not be called twice at once in one process when
// `check_shm` attribution matters (it is then only done with one job).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "harness/campaign/out_lock.h"
#include "harness/results/results.h"
#include "harness/results/shard.h"
#include "harness/detail/defaults.h"
#include "harness/results/summary.h"
#include "harness/run/runner.h"
#include "harness/run/stacks.h"

namespace faultline::harness {

/// One thing to run repeatedly.
struct variant {
  std::string name;                      ///< recorded in results ("exit/static-pool", "my_test")
  std::vector<std::string> argv;         ///< the command
  /// What it is, recorded with each run: with `name` (a scenario) or `argv` (a command) and its
  /// fault spec, what tells it from other variants in reports and the gate (run_record::kind).
  variant_kind kind = variant_kind::command;
  std::string faults;                    ///< FAULTLINE_FAULTS for its runs ("" = none)
  std::chrono::milliseconds timeout{default_run_timeout};
  std::vector<std::string> env;          ///< extra "K=V" for its runs
  bool gtest_output = false;             ///< ask gtest programs for RUNDIR/gtest.xml
  bool in_run_dir = false;               ///< runs with RUNDIR as working directory (a scenario:
                                         ///< its core lands there, one per run, never shared)
  /// The share of `jobs` one run takes (a scenario's declared slots; exec's --slots): a run starts
  /// only while the slots of the runs in flight plus its own stay within jobs (at most jobs each).
  /// Runs still start in run-number order: a wide run waits for room rather than being overtaken.
  unsigned slots = 1;
  /// The CPU one run keeps busy, in percent of a CPU, with schedule_kind::declared (a catalog
  /// entry's declaration, as CTest's PROCESSORS: most of the catalog waits on its own timeouts,
  /// children and locks and declares little); 0: its slots x 100, as for a command, which says
  /// nothing of itself.
  unsigned cpu_percent = 0;
  /// Whether its slots are device contexts (a catalog entry on the sim device: not).
  bool slots_are_devices = true;
  /// The options of the command line that made it which change what its runs do (timeout, env,
  /// preload, crash capture), as a replay gives them again: recorded in each run's `replay`.
  std::vector<std::string> replay;
  /// What the checks before run 1 found worth saying about its spec without refusing it (a
  /// function named without DWARF, whose inlined copies cannot be seen), printed before run 1.
  std::vector<std::string> notes;
};

/// Which runs keep their log and run directory once recorded.
enum class keep_policy {
  failures,  ///< every run that did not pass, and the first keep_passes passes of each variant
  all,       ///< every run
  none,      ///< every run that did not pass; no pass
};

/// "failures", "all", "none".
std::string_view to_string(keep_policy k) noexcept;
/// Inverse of to_string; nullopt for anything else.
std::optional<keep_policy> keep_policy_from_string(std::string_view s) noexcept;

/// How runs share `jobs` (campaign_options::schedule).
enum class schedule_kind {
  /// A run takes its slots from its start to its record: never more than `jobs` slots in flight.
  /// What rates measured at a parallelism need (§8.2: compare rates only at equal parallelism).
  slots,
  /// A run takes its slots while it computes. Once it has been measured for cpu_lend_after, it
  /// counts what its cgroup measures it using (cpu_use.h: the CPUs of its last two sampling
  /// windows, at most its slots), so runs that wait (for a
  /// child, a lock, their own timeout) lend their slots to new runs; a run the harness is ending
  /// (its stacks, its cores) counts one; at most cpu_overcommit x jobs runs are in flight. A run without a cgroup of its own
  /// (no cgroup containment) is never measured and takes its slots throughout, as with `slots`.
  cpu,
  /// A run takes the CPU its variant declares (variant::cpu_percent; a command: its slots) of
  /// jobs x 100%, from its start to its record, so runs that declare that they wait share the
  /// machine with those that compute; at most cpu_overcommit x jobs runs are in flight. Its slots
  /// still count against jobs where they are device contexts (variant::slots_are_devices).
  /// Nothing is measured: the same options give the same schedule on any machine.
  declared,
};

/// "slots", "cpu", "declared".
std::string_view to_string(schedule_kind k) noexcept;
/// Inverse of to_string; nullopt for anything else.
std::optional<schedule_kind> schedule_kind_from_string(std::string_view s) noexcept;

/// schedule_kind::cpu: how long a run counts its whole slots before its measured use counts, how
/// often runs are measured while a run waits for room, and how many runs per job may be in flight.
/// (Measured on the 2-core VM, records/overhead/README.md: lending after 100 ms, sampling every
/// 25 ms and counting a run under 10% of a CPU as none failed 4 clean runs of 510 of the catalog,
/// accounting/ lock-wait bounds among them; these values failed none of 2,600.)
inline constexpr std::chrono::milliseconds cpu_lend_after{250};
inline constexpr std::chrono::milliseconds cpu_sample_period{50};
inline constexpr unsigned cpu_overcommit = 4;

/// schedule_kind::declared: the CPU one run of `v` takes, in percent: its cpu_percent, else its
/// slots (within 1..jobs) x 100; within 1..jobs x 100.
unsigned declared_cpu_percent(const variant& v, unsigned jobs);

/// schedule_kind::declared: the most runs of `variants` in flight at once within `jobs` CPUs: as
/// many as the smallest declaration lets fit (a command's 100%: jobs), at most cpu_overcommit x
/// jobs and max_jobs.
unsigned declared_most_in_flight(const std::vector<variant>& variants, unsigned jobs);

/// How to run the campaign.
struct campaign_options {
  std::vector<variant> variants;
  std::uint64_t repeat = default_repeat;  ///< runs per variant (before sharding)
  std::uint64_t seed = 0;                ///< repetition r runs with seed + r
  bool until_fail = false;               ///< start no new run after the first failure
  unsigned jobs = default_jobs;          ///< runs at once: 1..max_jobs, lowered to the runs to perform
  schedule_kind schedule = schedule_kind::slots;  ///< what a run in flight takes of `jobs`
  shard part;                            ///< which runs this process performs
  std::filesystem::path out_dir = default_campaign_out_dir;
  std::chrono::milliseconds grace{default_grace};
  std::uint64_t log_limit_bytes = default_log_limit_bytes;  ///< each run's log (output_capture.h)
  stack_options stacks;
  crash_capture crash = crash_capture::automatic;  ///< how crashes in the runs are captured
  std::vector<std::string> env;          ///< base environment of every run
  std::ostream* progress = nullptr;      ///< progress line (null: none)
  bool progress_tty = false;
  const std::atomic<bool>* cancel = nullptr;  ///< stop: kill runs in flight, start no more
  keep_policy keep = keep_policy::failures;   ///< whose files stay once the run is recorded
  std::uint64_t keep_passes = default_kept_passes;  ///< passes per variant kept by `failures`
  bool resume = false;                   ///< continue the campaign recorded in out_dir (it must hold one)
  bool replace = false;                  ///< clear the campaign recorded in out_dir first (without it or
                                         ///< `resume`, a campaign there is an error)
  /// Called (from the thread that noticed) with each warning as it happens; may be empty.
  std::function<void(const std::string&)> warn;
  /// The caller's hold of out_dir when it holds the directory beyond this call (run_soak, across
  /// its state and report writing); null: run_campaign holds it for the call. A second lock of
  /// the directory in one process would refuse itself.
  const out_dir_lock* out_lock = nullptr;

  // --- what a soak (harness/campaign/soak.h) adds to a campaign --------------------------------------
  /// Run k is variant (k / shard count) mod V with seed `seed + k`, instead of variant k mod V
  /// with seed `seed + k / V`: each shard then rotates through every variant whatever the shard
  /// count (with k mod V, 8 shards of 16 variants would each see only 2 of them).
  bool rotate_per_shard = false;
  /// The fault spec of run `run` (a variant `v`), instead of v.faults: a soak draws one per run.
  /// Must be a pure function of its arguments (resume checks recorded runs against it).
  std::function<std::string(std::uint64_t run, const variant& v)> faults_of;
  /// No run starts at or after this time (runs in flight finish). repeat still bounds the runs.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Called with no run in flight after every `checkpoint_runs` runs performed (0: never): the
  /// soak's leak checks and state updates. Runs wait while it runs. `recorded`: the runs in
  /// OUT/results.jsonl at that moment (those a resume found included, each once); `failures`: how
  /// many of them did not pass.
  std::uint64_t checkpoint_runs = 0;
  std::function<void(std::uint64_t recorded, std::uint64_t failures)> checkpoint;
  /// Extra text at the end of the progress line (the soak's budget), and how often the line is
  /// printed off a terminal.
  std::function<std::string()> progress_suffix;
  std::chrono::milliseconds progress_interval{5'000};
  /// Whether the end of the campaign removes the /dev/shm/faultline* entries that appeared while
  /// it ran (stray_shm); a soak checks them itself, more carefully (soak.h).
  bool sweep_shm_at_end = true;
};

/// What a campaign did.
struct campaign_result {
  std::vector<variant_summary> summaries;  ///< one per variant, in the order of `variants`
  std::uint64_t performed = 0;           ///< runs performed by this call
  std::uint64_t resumed = 0;             ///< runs found already recorded (resume), counted once
  std::uint64_t planned = 0;             ///< runs this campaign (its shard) is made of; 0 with a deadline
  unsigned jobs = 0;                     ///< worker threads: runs that could be in flight at once
  std::vector<std::string> warnings;     ///< every warning given through `warn`, in order
  bool interrupted = false;              ///< cancelled before the end
  bool stopped_early = false;            ///< --until-fail stopped it
  std::vector<int> stray_pids;           ///< unattributed processes killed at the end
  std::vector<std::string> stray_shm;    ///< /dev/shm/faultline* entries left (removed)
  bool deadline_reached = false;         ///< the deadline stopped it before `repeat` ran out

  /// Runs of `planned` neither recorded before nor performed now (what --resume would run).
  std::uint64_t not_performed() const { return planned - std::min(planned, resumed + performed); }
};

/// "exit-static-pool.s42": the variant name made file-safe, plus the seed.
std::string make_run_id(const std::string& name, std::uint64_t seed);

/// The options that fix which run is which: what OUT/campaign.json holds.
struct campaign_manifest {
  std::uint64_t repeat = 1;
  std::uint64_t seed = 0;
  shard part;
  std::vector<summary_key> variants;  ///< names and fault specs, in run-numbering order
};

/// The file name of the manifest in an output directory.
inline constexpr const char* manifest_file = "campaign.json";

/// The manifest of the campaign in `out_dir`; nullopt when it has none. Errors: corrupt when
/// the file is not a manifest, io_error when it cannot be read.
core::result<std::optional<campaign_manifest>> read_manifest(const std::filesystem::path& out_dir);

/// The file a bisect leaves in its output directory (harness/triage/bisect.h).
inline constexpr const char* bisect_file = "bisect.json";

/// What an output directory holds of an earlier campaign, soak or bisect.
struct recorded_campaign {
  bool results = false;             ///< OUT/results.jsonl exists
  bool manifest = false;            ///< OUT/campaign.json exists
  bool soak = false;                ///< OUT/soak.json exists (a soak's, soak.h)
  bool bisect = false;              ///< OUT/bisect.json exists (a bisect's, whose runs are under OUT/samples/)
  bool counted = false;             ///< `runs` and `names` were read (or there is no results.jsonl)
  std::uint64_t runs = 0;           ///< lines in results.jsonl
  std::vector<std::string> names;   ///< the distinct names of its runs, in the order first recorded

  /// A campaign (results or manifest), a soak (its state) or a bisect is there.
  bool any() const { return results || manifest || soak || bisect; }
  /// "a bisect (OUT/bisect.json)", "a campaign (7 runs recorded: 'true', 'exit/static-pool')",
  /// "a soak (no run recorded)"; runs not counted are not mentioned ("a campaign").
  std::string describe(const std::filesystem::path& out_dir = {}) const;
};

/// What `out_dir` holds of an earlier campaign, soak or bisect; reads only (a missing directory
/// holds nothing). Without `count_runs` only which files are there (runs and names stay empty,
/// `counted` false): results.jsonl is not read, which for a soak of a million runs is a pass over
/// every line. Errors: io_error when results.jsonl exists but cannot be read.
core::result<recorded_campaign> find_recorded_campaign(const std::filesystem::path& out_dir, bool count_runs = true);

/// Whether a campaign may start in `out_dir` with this choice: `resume` needs something there to
/// continue; without `resume` or `replace` a campaign (or soak) there is refused, naming it, so
/// that a mistyped command never replaces one; a bisect's folder is refused whatever the choice
/// (a campaign there would be read with the bisect's runs, and --replace does not clear a
/// bisect). Errors (all before anything is written): already_exists for a bisect there
/// ("OUT holds a bisect (OUT/bisect.json): give the campaign a folder of its own");
/// invalid_argument for `resume` with `replace`, or `resume` with nothing to continue;
/// already_exists for a campaign there and neither flag ("OUT holds a campaign (N runs
/// recorded: ...); --resume continues it, --replace starts a new one"); io_error as
/// find_recorded_campaign.
core::status check_out_dir_choice(const std::filesystem::path& out_dir, bool resume, bool replace);

/// Removes what a campaign or soak wrote into `out_dir` (results.jsonl, campaign.json, logs/,
/// runs/, soak.json, report.html, report.md); anything else there stays. Errors: io_error naming
/// what could not be removed.
core::status clear_recorded_campaign(const std::filesystem::path& out_dir);

/// Performs the campaign (resuming it with `o.resume`). A thread that cannot be started is a
/// warning, not an error: the campaign goes on with the threads it has (at least the caller's).
/// A record that cannot be written (a full disk) stops it: no new run starts, the runs in flight
/// finish unrecorded (a resume performs them again), and the error says how many are recorded.
/// Errors: busy when another campaign holds out_dir (the message names its pid), before anything
/// in it is touched; then, still before anything is written, check_out_dir_choice's errors, except
/// that a soak's state alone (soak.json) is no campaign here (run_soak writes it before it starts
/// its campaign); invalid_argument for an empty variant list, jobs outside 1..max_jobs, an
/// out_lock of another directory, or a resume into a directory whose campaign had other options
/// (the message names them); corrupt for a malformed results file or manifest; io_error when the
/// output directory, results file or manifest cannot be created or written.
core::result<campaign_result> run_campaign(const campaign_options& o);

}  // namespace faultline::harness
