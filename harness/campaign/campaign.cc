#include "harness/campaign/campaign.h"

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <fstream>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/campaign/detail/scheduler.h"
#include "harness/campaign/progress.h"
#include "harness/campaign/state_file.h"
#include "harness/detail/sys.h"
#include "harness/run/classify.h"
#include "harness/run/process.h"
#include "harness/run/process_tree.h"
#include "harness/run/runner.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

run_record to_record(const run_report& rep, const variant& v, const std::string& faults, std::uint64_t run, std::uint64_t seed,
                     const std::string& run_id, const std::vector<std::string>& argv, bool keep_files) {
  run_record r;
  r.run_id = run_id;
  r.run = run;
  r.name = v.name;
  r.seed = seed;
  r.faults = faults;
  r.injected = !faults.empty();
  r.result = rep.verdict.result;
  r.when = rep.verdict.when;
  r.exit_code = rep.verdict.exit_code;
  r.signal = rep.verdict.signal;
  r.duration_ms = rep.duration.count();
  r.signature = rep.verdict.signature;
  if (keep_files) {
    r.log = "logs/" + run_id + ".log";
    // A crash's stacks are the crashing process's; a hang's, every process's at the timeout.
    const fs::path& stacks = rep.verdict.result == outcome::crash && !rep.evidence.crash_stacks_path.empty()
                                 ? rep.evidence.crash_stacks_path
                                 : !rep.evidence.stacks_path.empty() ? rep.evidence.stacks_path : rep.evidence.crash_stacks_path;
    r.stacks = stacks.empty() ? "" : "runs/" + run_id + "/" + stacks.filename().string();
  }
  r.frames = rep.verdict.top_frames;
  r.ranks = rep.verdict.ranks;
  r.leaked_pids = rep.evidence.leaked_pids;
  r.leaked_shm = rep.evidence.leaked_shm;
  r.timestamp = detail::iso_utc(rep.started);
  r.command = argv;
  r.kind = v.kind;
  r.replay = v.replay;
  return r;
}

// Removes a run's log (its directory was the thread's working directory, which the next run
// clears). Returns the error unless the log was already gone.
std::error_code prune_run(const fs::path& out_dir, const std::string& run_id) {
  std::error_code ec;
  fs::remove(out_dir / "logs" / (run_id + ".log"), ec);
  if (ec == std::errc::no_such_file_or_directory) ec.clear();
  return ec;
}

// Processes no run could claim (an orphan that cleared its environment while several runs were
// in flight) are killed at the end, with their subtrees: the harness leaves nothing behind.
std::vector<int> kill_strays(std::chrono::milliseconds grace) {
  std::vector<int> killed;
  for (pid_t pid : stray_children()) {
    process_tree t(pid, "");
    t.refresh();
    for (pid_t p : t.pids()) killed.push_back(p);
    t.terminate(grace);
    t.reap();
  }
  reap_strays();
  return killed;
}

campaign_manifest manifest_of(const campaign_options& o) {
  campaign_manifest m;
  m.repeat = o.repeat;
  m.seed = o.seed;
  m.part = o.part;
  for (const auto& v : o.variants) m.variants.push_back({v.name, v.faults});
  return m;
}

core::status write_manifest(const fs::path& out_dir, const campaign_manifest& m) {
  nlohmann::json variants = nlohmann::json::array();
  for (const auto& v : m.variants) variants.push_back({{"name", v.name}, {"faults", v.faults}});
  return write_state_file(out_dir / manifest_file,
                          {{"repeat", m.repeat}, {"seed", m.seed}, {"shard", m.part.to_string()}, {"variants", variants}});
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

std::string variant_list(const std::vector<summary_key>& vs) {
  std::string out;
  for (std::size_t i = 0; i < vs.size() && i < 6; ++i) out += (i ? ", " : "") + in_quotes(vs[i].name);
  if (vs.size() > 6) out += ", ... (" + std::to_string(vs.size()) + " variants)";
  return out.empty() ? "nothing" : out;
}

core::status refuse_resume(const fs::path& out_dir, const std::string& why) {
  return core::status(core::errc::invalid_argument,
                      "cannot resume " + out_dir.string() + ": " + why +
                          "; resume with the options the campaign was started with, or use another --out");
}

// Whether the campaign recorded in a directory numbered its runs as `now` does.
core::status check_manifest(const fs::path& out_dir, const campaign_manifest& was, const campaign_manifest& now) {
  bool same_names = was.variants.size() == now.variants.size();
  for (std::size_t i = 0; same_names && i < now.variants.size(); ++i) same_names = was.variants[i].name == now.variants[i].name;
  if (!same_names)
    return refuse_resume(out_dir, "it ran " + variant_list(was.variants) + ", this campaign runs " + variant_list(now.variants) +
                                      " (another variant list numbers the runs differently)");
  for (std::size_t i = 0; i < now.variants.size(); ++i)
    if (was.variants[i].faults != now.variants[i].faults)
      return refuse_resume(out_dir, "its runs of " + in_quotes(now.variants[i].name) + " had --faults " + in_quotes(was.variants[i].faults) +
                                        ", this campaign gives " + in_quotes(now.variants[i].faults));
  if (was.repeat != now.repeat)
    return refuse_resume(out_dir, "it was started with --repeat " + std::to_string(was.repeat) + ", this campaign has --repeat " +
                                      std::to_string(now.repeat));
  if (was.seed != now.seed)
    return refuse_resume(out_dir, "it was started with --seed " + std::to_string(was.seed) + ", this campaign has --seed " +
                                      std::to_string(now.seed));
  if (was.part.index != now.part.index || was.part.count != now.part.count)
    return refuse_resume(out_dir, "it was shard " + was.part.to_string() + ", this campaign is shard " + now.part.to_string());
  return {};
}

// The files a campaign or a soak writes into its output directory (soak.h names the soak's).
constexpr const char* soak_files[] = {"soak.json", "soak.json.tmp", "report.html", "report.md"};

// `was` may come without its runs counted: they are counted here when the refusal names them.
core::status choice_status(const fs::path& out_dir, recorded_campaign was, bool resume, bool replace) {
  if (was.bisect)
    return core::status(core::errc::already_exists, out_dir.string() + " holds " + was.describe(out_dir) +
                                                         ": give the campaign a folder of its own (--resume and --replace are for "
                                                         "campaigns and soaks)");
  if (resume && replace)
    return core::status(core::errc::invalid_argument, "--resume and --replace exclude each other: --resume continues the campaign in " +
                                                          out_dir.string() + ", --replace starts a new one there");
  if (resume && !was.any())
    return core::status(core::errc::invalid_argument, "--resume: " + out_dir.string() +
                                                          " holds no campaign or soak to continue (no results.jsonl, campaign.json or "
                                                          "soak.json); leave --resume out to start one there");
  if (!resume && !replace && was.any()) {
    if (!was.counted) {
      auto counted = find_recorded_campaign(out_dir);
      if (!counted) return counted.error();
      was.runs = counted->runs;
      was.names = std::move(counted->names);
      was.counted = true;
    }
    return core::status(core::errc::already_exists,
                        out_dir.string() + " holds " + was.describe() + "; --resume continues it, --replace starts a new one");
  }
  return {};
}

}  // namespace

std::string recorded_campaign::describe(const fs::path& out_dir) const {
  if (bisect) return "a bisect (" + (out_dir / bisect_file).string() + ")";
  std::string text = soak ? "a soak" : "a campaign";
  if (!counted) return text;
  if (runs == 0) return text + " (no run recorded)";
  text += " (" + std::to_string(runs) + (runs == 1 ? " run" : " runs") + " recorded: ";
  constexpr std::size_t shown = 5;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) text += (i ? ", " : "") + in_quotes(names[i]);
  if (names.size() > shown) text += ", ... (" + std::to_string(names.size()) + " names)";
  return text + ")";
}

core::result<recorded_campaign> find_recorded_campaign(const fs::path& out_dir, bool count_runs) {
  recorded_campaign r;
  std::error_code ec;
  r.manifest = fs::exists(out_dir / manifest_file, ec);
  r.soak = fs::exists(out_dir / soak_files[0], ec);
  r.bisect = fs::exists(out_dir / bisect_file, ec);
  const fs::path results = out_dir / "results.jsonl";
  r.results = fs::exists(results, ec);
  r.counted = count_runs || !r.results;
  if (!r.results || !count_runs) return r;
  // Line by line, tolerant: a torn or malformed line still counts as a run recorded (what it is
  // is resume's business); only the names of well-formed lines are collected.
  std::ifstream in(results, std::ios::binary);
  if (!in) return core::status(core::errc::io_error, "cannot read " + results.string());
  std::set<std::string> seen;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++r.runs;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("name") && j["name"].is_string()) {
      auto name = j["name"].get<std::string>();
      if (seen.size() < 1000 && seen.insert(name).second) r.names.push_back(std::move(name));
    }
  }
  if (in.bad()) return core::status(core::errc::io_error, "cannot read " + results.string());
  return r;
}

core::status check_out_dir_choice(const fs::path& out_dir, bool resume, bool replace) {
  auto was = find_recorded_campaign(out_dir, false);
  if (!was) return was.error();
  return choice_status(out_dir, *was, resume, replace);
}

core::status clear_recorded_campaign(const fs::path& out_dir) {
  std::vector<std::string> names = {"results.jsonl", manifest_file, std::string(manifest_file) + ".tmp", "logs", "runs"};
  names.insert(names.end(), std::begin(soak_files), std::end(soak_files));
  for (const auto& name : names) {
    std::error_code ec;
    fs::remove_all(out_dir / name, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
      return core::status(core::errc::io_error, "clear the earlier campaign in " + out_dir.string() + ": remove " + name + ": " +
                                                    ec.message());
  }
  return {};
}

std::string_view to_string(keep_policy k) noexcept {
  switch (k) {
    case keep_policy::failures: return "failures";
    case keep_policy::all: return "all";
    case keep_policy::none: return "none";
  }
  return "failures";
}

std::optional<keep_policy> keep_policy_from_string(std::string_view s) noexcept {
  for (keep_policy k : {keep_policy::failures, keep_policy::all, keep_policy::none})
    if (to_string(k) == s) return k;
  return std::nullopt;
}

std::string_view to_string(schedule_kind k) noexcept {
  switch (k) {
    case schedule_kind::cpu: return "cpu";
    case schedule_kind::declared: return "declared";
    case schedule_kind::slots: break;
  }
  return "slots";
}

unsigned declared_cpu_percent(const variant& v, unsigned jobs) {
  jobs = std::max(1u, jobs);
  const unsigned declared = v.cpu_percent != 0 ? v.cpu_percent : std::clamp(v.slots, 1u, jobs) * 100;
  return std::clamp(declared, 1u, jobs * 100);
}

unsigned declared_most_in_flight(const std::vector<variant>& variants, unsigned jobs) {
  jobs = std::max(1u, jobs);
  unsigned least = jobs * 100;
  for (const variant& v : variants) least = std::min(least, declared_cpu_percent(v, jobs));
  return std::max(1u, std::min({max_jobs, jobs * cpu_overcommit, jobs * 100 / least}));
}

std::optional<schedule_kind> schedule_kind_from_string(std::string_view s) noexcept {
  for (schedule_kind k : {schedule_kind::slots, schedule_kind::cpu, schedule_kind::declared})
    if (to_string(k) == s) return k;
  return std::nullopt;
}

std::string make_run_id(const std::string& name, std::uint64_t seed) {
  std::string id;
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (ok) id += c;
    else if (!id.empty() && id.back() != '-') id += '-';
  }
  while (!id.empty() && id.back() == '-') id.pop_back();
  if (id.empty()) id = "run";
  return id + ".s" + std::to_string(seed);
}

core::result<std::optional<campaign_manifest>> read_manifest(const fs::path& out_dir) {
  campaign_manifest m;
  auto found = read_state_file(out_dir / manifest_file, "campaign manifest", [&m](const nlohmann::json& j) {
    m.repeat = j.at("repeat").get<std::uint64_t>();
    m.seed = j.at("seed").get<std::uint64_t>();
    auto part = parse_shard(j.at("shard").get<std::string>());
    if (!part) throw nlohmann::json::other_error::create(501, part.error().message(), &j);
    m.part = *part;
    for (const auto& v : j.at("variants")) m.variants.push_back({v.at("name").get<std::string>(), v.at("faults").get<std::string>()});
  });
  if (!found) return found.error();
  if (!*found) return std::optional<campaign_manifest>();
  return std::optional<campaign_manifest>(std::move(m));
}

namespace {

using detail::campaign_tally;
using detail::run_numbering;
using detail::run_scheduler;

// What run_campaign refuses before it looks at out_dir.
core::status check_options(const campaign_options& o) {
  if (o.variants.empty()) return core::status(core::errc::invalid_argument, "nothing to run");
  if (o.jobs == 0) return core::status(core::errc::invalid_argument, "jobs must be at least 1");
  if (o.jobs > max_jobs)
    return core::status(core::errc::invalid_argument,
                        "jobs " + std::to_string(o.jobs) + ": at most " + std::to_string(max_jobs) + " runs at once");
  if (o.part.count == 0 || o.part.index >= o.part.count) return core::status(core::errc::invalid_argument, "bad shard " + o.part.to_string());
  return {};
}

// A run that died of SIGTERM, SIGINT or SIGHUP (or a shell's exit status for one, 128 + N) while
// the campaign is being cancelled was interrupted, not failed: a scheduler that ends a job
// (Slurm's scancel, a pod's termination, a CI cancel) signals every process of it at once, the
// runs among them. The harness's own signal may land a moment after its run's, so it is given
// half a second to.
bool ended_by_the_cancel(const run_report& rep, const std::atomic<bool>* cancel) {
  if (!cancel || !rep.evidence.wait_status) return false;
  const int st = *rep.evidence.wait_status;
  const int sig = WIFSIGNALED(st) ? WTERMSIG(st) : WIFEXITED(st) && WEXITSTATUS(st) > 128 ? WEXITSTATUS(st) - 128 : 0;
  if (sig != SIGTERM && sig != SIGINT && sig != SIGHUP) return false;
  for (int i = 0; i < 50 && !cancel->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return cancel->load();
}

// The /dev/shm/faultline* entries that were not there at the start (`before`, sorted), removed.
std::vector<std::string> sweep_new_shm(const std::vector<std::string>& before) {
  std::vector<std::string> fresh;
  for (const auto& name : faultline_shm_entries()) {
    if (!std::binary_search(before.begin(), before.end(), name)) fresh.push_back(name);
  }
  // Every run has ended, so a process that holds a new entry is not one of ours: a test or
  // campaign beside this one (two CI jobs on one machine, CTest's tests side by side). Its entry
  // is neither removed nor counted against these runs.
  return remove_shm_left_by_runs(fresh);
}

// A campaign's warnings: each kept for its result and given to `out` (campaign_options::warn),
// through the progress meter once there is one, so that they never mix with its line.
class warnings {
 public:
  explicit warnings(const std::function<void(const std::string&)>& out) : out_(out) {}

  void operator()(const std::string& text) {
    std::lock_guard lock(mu_);
    given_.push_back(text);
    if (!out_) return;
    if (meter_) meter_->interject([&] { out_(text); });
    else out_(text);
  }
  // Set before any worker starts.
  void through(progress_meter* meter) { meter_ = meter; }
  std::vector<std::string> given() {
    std::lock_guard lock(mu_);
    return given_;
  }

 private:
  std::mutex mu_;
  const std::function<void(const std::string&)>& out_;
  progress_meter* meter_ = nullptr;
  std::vector<std::string> given_;
};

// One call of run_campaign: open() takes out_dir and reads what a resume continues, perform()
// runs the rest on the worker threads (run_scheduler hands the runs out) and cleans up after them.
class campaign {
 public:
  explicit campaign(const campaign_options& o)
      : o_(o), numbering_(o), results_path_(o.out_dir / "results.jsonl"), warn_(o.warn), tally_(o) {}

  core::status open();
  core::result<campaign_result> perform();

 private:
  core::status hold_out_dir();
  core::status prepare_out_dir();
  core::status resume();
  core::status resume_run(const run_record& r, std::uint64_t line, bool has_manifest);
  unsigned run_workers(unsigned jobs);
  void worker(unsigned slot);
  bool perform_run(std::uint64_t k, const fs::path& slot_dir, run_cpu_use* use);
  run_request request_for(const variant& v, std::uint64_t seed, const std::string& faults, const std::string& id,
                          const fs::path& slot_dir) const;
  void record_run(std::uint64_t k, const run_record& rec, bool keep, const fs::path& slot_dir);
  core::result<campaign_result> result(unsigned threads, const std::vector<std::string>& shm_before);

  fs::path slot_dir(unsigned slot) const { return o_.out_dir / "runs" / (".slot-" + std::to_string(slot)); }

  const campaign_options& o_;
  const run_numbering numbering_;
  const fs::path results_path_;
  std::optional<out_dir_lock> own_lock_;  // null when the caller holds out_dir (o.out_lock)
  warnings warn_;
  campaign_tally tally_;                  // what a resume found; the scheduler takes it over
  results_writer writer_;
  std::optional<progress_meter> progress_;
  std::optional<run_scheduler> scheduler_;
  bool check_shm_ = false;                // with runs overlapping, a new entry has no single owner
  std::atomic<bool> prune_warned_{false};
};

core::status campaign::open() {
  if (auto s = hold_out_dir(); !s) return s;
  if (auto s = prepare_out_dir(); !s) return s;
  if (auto s = o_.resume ? resume() : write_manifest(o_.out_dir, manifest_of(o_)); !s) return s;
  return writer_.open(results_path_);
}

// Before anything in out_dir is read or cleared: one live campaign per directory.
core::status campaign::hold_out_dir() {
  if (o_.out_lock) {
    std::error_code ec;
    if (fs::equivalent(o_.out_lock->dir(), o_.out_dir, ec)) return {};
    return core::status(core::errc::invalid_argument,
                        "the lock held is of " + o_.out_lock->dir().string() + ", not of " + o_.out_dir.string());
  }
  auto lock = out_dir_lock::acquire(o_.out_dir);
  if (!lock) return lock.error();
  own_lock_.emplace(std::move(*lock));
  return {};
}

// An earlier campaign in out_dir is continued (resume) or replaced (replace) only when asked: a
// mistyped command must not cost a campaign. A soak's state alone is the soak's own, written just
// before it starts this campaign (run_soak checked the user's choice itself).
core::status campaign::prepare_out_dir() {
  auto was = find_recorded_campaign(o_.out_dir, false);
  if (!was) return was.error();
  was->soak = false;
  if (auto s = choice_status(o_.out_dir, *was, o_.resume, o_.replace); !s) return s;
  if (o_.replace && was->any()) {
    if (auto s = clear_recorded_campaign(o_.out_dir); !s) return s;
    if (o_.warn) o_.warn("replaced the earlier campaign in " + o_.out_dir.string() + " (--replace)");
  }
  std::error_code ec;
  fs::create_directories(o_.out_dir / "logs", ec);
  if (!ec) fs::create_directories(o_.out_dir / "runs", ec);
  if (ec) return core::status(core::errc::io_error, "create " + o_.out_dir.string() + ": " + ec.message());
  return {};
}

// The results already in OUT/results.jsonl count as performed runs, each once, once this campaign
// is known to have made them (its manifest, and every record's name, seed and fault spec).
core::status campaign::resume() {
  auto was = read_manifest(o_.out_dir);
  if (!was) return was.error();
  if (*was) {
    if (auto s = check_manifest(o_.out_dir, **was, manifest_of(o_)); !s) return s;
  }
  const bool has_manifest = was->has_value();
  auto scan = recover_results(results_path_, [&](run_record&& r, std::uint64_t line) { return resume_run(r, line, has_manifest); });
  if (!scan && scan.code() != core::errc::not_found) return scan.error();
  if (scan && scan->truncated_tail)
    warn_(results_path_.string() + ": the last line was torn (the harness was killed while writing it): dropped its " +
          std::to_string(scan->torn_bytes) + " bytes; that run is performed again");
  if (!has_manifest) return write_manifest(o_.out_dir, manifest_of(o_));
  return {};
}

core::status campaign::resume_run(const run_record& r, std::uint64_t line, bool has_manifest) {
  const std::string where = results_path_.string() + " line " + std::to_string(line);
  if (!has_manifest)
    return refuse_resume(o_.out_dir, "it has results but no " + std::string(manifest_file) + " to say which options made them");
  if (r.run >= numbering_.total() || !numbering_.owns(r.run))
    return refuse_resume(o_.out_dir, where + " records run " + std::to_string(r.run) + ", which is not a run of this campaign");
  const variant& v = numbering_.variant_of(r.run);
  const std::uint64_t seed = numbering_.seed_of(r.run);
  const std::string faults = numbering_.faults_of(r.run);
  if (r.name != v.name || r.seed != seed || r.faults != faults)
    return refuse_resume(o_.out_dir, where + " records run " + std::to_string(r.run) + " as " + in_quotes(r.name) + " seed " +
                                         std::to_string(r.seed) + " faults " + in_quotes(r.faults) + ", but run " +
                                         std::to_string(r.run) + " of this campaign is " + in_quotes(v.name) + " seed " +
                                         std::to_string(seed) + " faults " + in_quotes(faults));
  // Recorded as pruned, but the harness may have died before pruning it.
  if (tally_.add_resumed(r, numbering_.variant_index(r.run)) && r.result == outcome::pass && r.log.empty())
    prune_run(o_.out_dir, r.run_id);
  return {};
}

core::result<campaign_result> campaign::perform() {
  const std::uint64_t owned = owned_runs(numbering_.total(), o_.part);
  const std::uint64_t to_perform = owned - std::min(owned, tally_.resumed());
  progress_.emplace(o_.progress, o_.progress_tty, o_.deadline ? 0 : owned, o_.progress_interval, tally_.resumed());
  if (o_.progress_suffix) progress_->set_suffix(o_.progress_suffix);
  warn_.through(&*progress_);
  scheduler_.emplace(o_, numbering_, std::move(tally_), &*progress_);
  // No more threads than runs: a thread without a run to take only costs memory.
  const unsigned jobs = static_cast<unsigned>(
      std::max<std::uint64_t>(1, std::min<std::uint64_t>(scheduler_->most_in_flight(), scheduler_->stopped() ? 1 : to_perform)));
  check_shm_ = jobs == 1;
  const auto shm_before = faultline_shm_entries();
  const unsigned threads = run_workers(jobs);
  progress_->finish();
  return result(threads, shm_before);
}

// A thread that cannot be created (process or memory limits) lowers the parallelism; the runs
// still all happen, on the threads that did start (the caller's at least). Returns how many ran.
unsigned campaign::run_workers(unsigned jobs) {
  std::vector<std::thread> threads;
  unsigned started = 1;
  for (unsigned j = 1; j < jobs; ++j) {
    try {
      threads.emplace_back(&campaign::worker, this, j);
      ++started;
    } catch (const std::system_error& e) {
      warn_("could start only " + std::to_string(started) + " of " + std::to_string(jobs) + " runs at once (" + e.what() +
            "); going on with " + std::to_string(started));
      break;
    }
  }
  worker(0);
  for (auto& t : threads) t.join();
  std::error_code ec;
  for (unsigned j = 0; j < jobs; ++j) fs::remove_all(slot_dir(j), ec);
  return started;
}

// Each thread runs in a working directory of its own, reused from run to run and renamed to the
// run's name only when the run keeps its files: a directory created for every run costs more than
// a short run itself (measured: 2.3 ms to create a directory and a file in it on this ext4, 0.1 ms
// to create a file in a directory that exists). An interrupted run ends the thread.
void campaign::worker(unsigned slot) {
  const fs::path dir = slot_dir(slot);
  run_cpu_use use;  // what the scheduler measures this thread's runs by (schedule_kind::cpu)
  run_cpu_use* measured = o_.schedule == schedule_kind::cpu ? &use : nullptr;
  while (auto k = scheduler_->claim(measured))
    if (!perform_run(*k, dir, measured)) return;
}

// Performs run k and records it; false when it was interrupted (it is not recorded).
bool campaign::perform_run(std::uint64_t k, const fs::path& slot_dir, run_cpu_use* use) {
  const variant& v = numbering_.variant_of(k);
  const std::uint64_t seed = numbering_.seed_of(k);
  const std::string id = make_run_id(v.name, seed);
  const std::string faults = numbering_.faults_of(k);
  run_request rq = request_for(v, seed, faults, id, slot_dir);
  rq.cpu = use;
  // Decided once the run is classified, so that a passing run kept by no one has no log file.
  bool keep = true;
  rq.keep_log = [&](const run_report& r) {
    keep = r.interrupted || r.verdict.result != outcome::pass || scheduler_->keep_pass(k);
    return keep;
  };
  run_report rep = run_once(rq);
  if (!rep.interrupted) rep.interrupted = ended_by_the_cancel(rep, o_.cancel);
  if (rep.interrupted) {
    scheduler_->abandon(k);
    return false;
  }
  run_record rec = to_record(rep, v, faults, k, seed, id, v.argv, keep);
  rec.points_reached = read_points(rq.run_dir);  // before the directory is reused
  for (auto& l : late_cuda_by_api(rq.run_dir)) rec.late_cuda.push_back({l.api, l.calls, std::move(l.signature)});
  record_run(k, rec, keep, slot_dir);
  return true;
}

run_request campaign::request_for(const variant& v, std::uint64_t seed, const std::string& faults, const std::string& id,
                                  const fs::path& slot_dir) const {
  run_request rq;
  rq.argv = v.argv;
  rq.env = o_.env;
  for (const auto& kv : v.env) {
    auto eq = kv.find('=');
    set_env(rq.env, kv.substr(0, eq), eq == std::string::npos ? std::string() : kv.substr(eq + 1));
  }
  set_env(rq.env, "FAULTLINE_SEED", std::to_string(seed));
  set_env(rq.env, "FAULTLINE_FAULTS", faults.empty() ? std::nullopt : std::optional<std::string>(faults));
  rq.run_dir = slot_dir;
  rq.log_path = o_.out_dir / "logs" / (id + ".log");
  rq.timeout = v.timeout;
  rq.grace = o_.grace;
  rq.log_limit_bytes = o_.log_limit_bytes;
  rq.stacks = o_.stacks;
  rq.crash = o_.crash;
  rq.gtest_output = v.gtest_output;
  rq.in_run_dir = v.in_run_dir;
  rq.check_shm = check_shm_;
  rq.cancel = o_.cancel;
  return rq;
}

// Keeps run k's files (its working directory becomes runs/ID, which the record names) or prunes
// them once its line is written: a line is all that is left of a pruned run.
void campaign::record_run(std::uint64_t k, const run_record& rec, bool keep, const fs::path& slot_dir) {
  std::error_code keep_ec;
  if (keep) {
    const fs::path kept = o_.out_dir / "runs" / rec.run_id;
    fs::remove_all(kept, keep_ec);  // a resumed campaign's run that was in flight
    fs::rename(slot_dir, kept, keep_ec);
  }
  auto written = writer_.append(rec);
  if (keep_ec) warn_("cannot keep the files of run " + rec.run_id + ": " + keep_ec.message());
  if (!keep && written) {
    if (auto pe = prune_run(o_.out_dir, rec.run_id); pe && !prune_warned_.exchange(true))
      warn_("cannot remove the files of passing run " + rec.run_id + ": " + pe.message() + " (further failures not reported)");
  }
  if (written) scheduler_->record(k, rec);
  else scheduler_->writing_failed(k, written);
}

// What the campaign did, once its threads have ended: processes and /dev/shm entries no run
// claimed are cleaned up first. A record that could not be written makes it an error.
core::result<campaign_result> campaign::result(unsigned threads, const std::vector<std::string>& shm_before) {
  campaign_result r;
  r.jobs = threads;
  r.resumed = scheduler_->resumed();
  r.performed = scheduler_->performed();
  r.planned = o_.deadline ? 0 : owned_runs(numbering_.total(), o_.part);
  r.stopped_early = scheduler_->stopped_early();
  r.deadline_reached = scheduler_->deadline_reached();
  r.interrupted = o_.cancel && o_.cancel->load();
  r.stray_pids = kill_strays(o_.grace);
  if (!check_shm_ && o_.sweep_shm_at_end) r.stray_shm = sweep_new_shm(shm_before);
  r.summaries = scheduler_->summaries();
  r.warnings = warn_.given();
  if (auto error = scheduler_->write_error(); !error)
    return core::status(error.code(), error.message() + "; stopped: the " + std::to_string(r.resumed + r.performed) +
                                          " runs recorded before it are intact in " + results_path_.string() +
                                          ", and --resume performs the rest once it can be written");
  return r;
}

}  // namespace

core::result<campaign_result> run_campaign(const campaign_options& o) {
  if (auto s = check_options(o); !s) return s;
  campaign c(o);
  if (auto s = c.open(); !s) return s;
  return c.perform();
}

}  // namespace faultline::harness
