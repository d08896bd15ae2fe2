#include "harness/campaign/campaign.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/campaign/progress.h"
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
  r.leaked_pids = rep.evidence.leaked_pids;
  r.leaked_shm = rep.evidence.leaked_shm;
  r.timestamp = detail::iso_utc(rep.started);
  r.command = argv;
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
  nlohmann::json j = {{"format", 1},
                      {"repeat", m.repeat},
                      {"seed", m.seed},
                      {"shard", m.part.to_string()},
                      {"variants", variants}};
  const fs::path path = out_dir / manifest_file;
  const fs::path tmp = out_dir / (std::string(manifest_file) + ".tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return detail::sys_error(errno, "open " + tmp.string());
  auto s = detail::write_all(fd, j.dump(2) + "\n", "write " + tmp.string());
  ::close(fd);
  if (!s) return s;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return detail::sys_error(errno, "rename " + tmp.string());
  return {};
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
  if (resume && replace)
    return core::status(core::errc::invalid_argument, "--resume and --replace exclude each other: --resume continues the campaign in " +
                                                          out_dir.string() + ", --replace starts a new one there");
  if (resume && !was.any())
    return core::status(core::errc::invalid_argument, "--resume: " + out_dir.string() +
                                                          " holds no campaign or soak to continue (no results.jsonl, campaign.json or "
                                                          "soak.json); leave --resume out to start one there");
  if (!resume && !replace && was.any()) {
    if (was.results && was.runs == 0) {
      auto counted = find_recorded_campaign(out_dir);
      if (!counted) return counted.error();
      was.runs = counted->runs;
      was.names = std::move(counted->names);
    }
    return core::status(core::errc::already_exists,
                        out_dir.string() + " holds " + was.describe() + "; --resume continues it, --replace starts a new one");
  }
  return {};
}

}  // namespace

std::string recorded_campaign::describe() const {
  std::string text = soak ? "a soak" : "a campaign";
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
  const fs::path results = out_dir / "results.jsonl";
  r.results = fs::exists(results, ec);
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
  const fs::path path = out_dir / manifest_file;
  auto text = detail::read_file(path, 16 << 20);
  if (!text) {
    if (text.code() == core::errc::not_found) return std::optional<campaign_manifest>();
    return text.error();
  }
  campaign_manifest m;
  try {
    auto j = nlohmann::json::parse(*text);
    if (j.at("format").get<int>() != 1) throw nlohmann::json::other_error::create(501, "unknown format " + j.at("format").dump(), &j);
    m.repeat = j.at("repeat").get<std::uint64_t>();
    m.seed = j.at("seed").get<std::uint64_t>();
    auto part = parse_shard(j.at("shard").get<std::string>());
    if (!part) throw nlohmann::json::other_error::create(501, part.error().message(), &j);
    m.part = *part;
    for (const auto& v : j.at("variants")) m.variants.push_back({v.at("name").get<std::string>(), v.at("faults").get<std::string>()});
  } catch (const nlohmann::json::exception& e) {
    return core::status(core::errc::corrupt, path.string() + " is not a faultline campaign manifest: " + e.what());
  }
  return std::optional<campaign_manifest>(std::move(m));
}

core::result<campaign_result> run_campaign(const campaign_options& o) {
  if (o.variants.empty()) return core::status(core::errc::invalid_argument, "nothing to run");
  if (o.jobs == 0) return core::status(core::errc::invalid_argument, "jobs must be at least 1");
  if (o.jobs > max_jobs)
    return core::status(core::errc::invalid_argument,
                        "jobs " + std::to_string(o.jobs) + ": at most " + std::to_string(max_jobs) + " runs at once");
  if (o.part.count == 0 || o.part.index >= o.part.count) return core::status(core::errc::invalid_argument, "bad shard " + o.part.to_string());
  std::error_code ec;
  // Before anything in out_dir is read or cleared: one live campaign per directory.
  std::optional<out_dir_lock> own_lock;
  if (!o.out_lock) {
    auto lock = out_dir_lock::acquire(o.out_dir);
    if (!lock) return lock.error();
    own_lock.emplace(std::move(*lock));
  } else if (!fs::equivalent(o.out_lock->dir(), o.out_dir, ec)) {
    return core::status(core::errc::invalid_argument,
                        "the lock held is of " + o.out_lock->dir().string() + ", not of " + o.out_dir.string());
  }
  {
    // An earlier campaign in out_dir is continued (resume) or replaced (replace) only when asked:
    // a mistyped command must not cost a campaign. A soak's state alone is the soak's own, written
    // just before it starts this campaign (run_soak checked the user's choice itself).
    auto was = find_recorded_campaign(o.out_dir, false);
    if (!was) return was.error();
    was->soak = false;
    if (auto s = choice_status(o.out_dir, *was, o.resume, o.replace); !s) return s;
    if (o.replace && was->any()) {
      if (auto s = clear_recorded_campaign(o.out_dir); !s) return s;
      if (o.warn) o.warn("replaced the earlier campaign in " + o.out_dir.string() + " (--replace)");
    }
  }
  fs::create_directories(o.out_dir / "logs", ec);
  if (!ec) fs::create_directories(o.out_dir / "runs", ec);
  if (ec) return core::status(core::errc::io_error, "create " + o.out_dir.string() + ": " + ec.message());

  const std::uint64_t nvariants = o.variants.size();
  const std::uint64_t total = o.repeat * nvariants;
  const fs::path results_path = o.out_dir / "results.jsonl";
  const campaign_manifest manifest = manifest_of(o);
  auto faults_of = [&o](std::uint64_t k, const variant& v) { return o.faults_of ? o.faults_of(k, v) : v.faults; };
  auto variant_index = [&o, nvariants](std::uint64_t k) -> std::size_t {
    return static_cast<std::size_t>((o.rotate_per_shard ? k / o.part.count : k) % nvariants);
  };
  auto seed_of = [&o, nvariants](std::uint64_t k) { return o.rotate_per_shard ? o.seed + k : o.seed + k / nvariants; };

  std::mutex mu;  // guards everything below that the workers share
  campaign_result result;
  std::vector<summary_key> keys;
  for (const auto& v : o.variants) keys.push_back({v.name, v.faults});
  summary_builder summary(std::move(keys));
  std::vector<std::uint64_t> passes_kept(nvariants, 0);
  // Recorded runs (resume), one bit per owned run number: run k is bit k / shard count.
  std::vector<bool> recorded;
  std::uint64_t failures = 0;

  // Warnings go out through the progress meter once there is one, so that they never mix with
  // its line; it is set before any worker starts.
  std::mutex warn_mu;
  progress_meter* meter = nullptr;
  auto warn = [&](const std::string& text) {
    std::lock_guard lock(warn_mu);
    result.warnings.push_back(text);
    if (!o.warn) return;
    if (meter) meter->interject([&] { o.warn(text); });
    else o.warn(text);
  };

  if (o.resume) {
    auto was = read_manifest(o.out_dir);
    if (!was) return was.error();
    if (*was) {
      if (auto s = check_manifest(o.out_dir, **was, manifest); !s) return s;
    }
    auto check = [&](run_record&& r, std::uint64_t line) -> core::status {
      const std::string where = results_path.string() + " line " + std::to_string(line);
      if (!*was)
        return refuse_resume(o.out_dir, "it has results but no " + std::string(manifest_file) + " to say which options made them");
      if (r.run >= total || !o.part.owns(r.run))
        return refuse_resume(o.out_dir, where + " records run " + std::to_string(r.run) + ", which is not a run of this campaign");
      const variant& v = o.variants[variant_index(r.run)];
      const std::uint64_t seed = seed_of(r.run);
      const std::string faults = faults_of(r.run, v);
      if (r.name != v.name || r.seed != seed || r.faults != faults)
        return refuse_resume(o.out_dir, where + " records run " + std::to_string(r.run) + " as " + in_quotes(r.name) + " seed " +
                                            std::to_string(r.seed) + " faults " + in_quotes(r.faults) + ", but run " +
                                            std::to_string(r.run) + " of this campaign is " + in_quotes(v.name) + " seed " +
                                            std::to_string(seed) + " faults " + in_quotes(faults));
      const std::uint64_t bit = r.run / o.part.count;
      if (bit >= recorded.size()) recorded.resize(bit + 1, false);
      if (recorded[bit]) return {};  // recorded twice (a results file put together by hand): counted once
      recorded[bit] = true;
      ++result.resumed;
      summary.add(r);
      if (r.result != outcome::pass) {
        ++failures;
      } else if (!r.log.empty()) {
        ++passes_kept[variant_index(r.run)];
      } else {
        // Recorded as pruned, but the harness may have died before pruning it.
        prune_run(o.out_dir, r.run_id);
      }
      return {};
    };
    auto scan = recover_results(results_path, check);
    if (!scan && scan.code() != core::errc::not_found) return scan.error();
    if (scan && scan->truncated_tail)
      warn(results_path.string() + ": the last line was torn (the harness was killed while writing it): dropped its " +
           std::to_string(scan->torn_bytes) + " bytes; that run is performed again");
    if (!*was) {
      if (auto s = write_manifest(o.out_dir, manifest); !s) return s;
    }
  } else {
    if (auto s = write_manifest(o.out_dir, manifest); !s) return s;
  }

  results_writer writer;
  if (auto s = writer.open(results_path); !s) return s;

  const std::uint64_t owned = owned_runs(total, o.part);
  const std::uint64_t to_perform = owned - std::min(owned, result.resumed);
  bool stop = o.until_fail && failures > 0;
  result.stopped_early = stop;
  // No more threads than runs: a thread without a run to take only costs memory.
  const unsigned jobs = static_cast<unsigned>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(o.jobs, stop ? 1 : to_perform)));
  const bool check_shm = jobs == 1;  // with runs overlapping, a new entry has no single owner
  const auto shm_before = faultline_shm_entries();

  std::uint64_t next = 0, done = 0;
  bool prune_warned = false;
  core::status write_error;
  const std::uint64_t passes_to_keep =
      o.keep == keep_policy::all ? ~std::uint64_t{0} : o.keep == keep_policy::none ? 0 : o.keep_passes;
  auto is_recorded = [&](std::uint64_t k) {
    const std::uint64_t bit = k / o.part.count;
    return bit < recorded.size() && recorded[bit];
  };
  progress_meter progress(o.progress, o.progress_tty, o.deadline ? 0 : to_perform, o.progress_interval);
  if (o.progress_suffix) progress.set_suffix(o.progress_suffix);
  meter = &progress;

  // Checkpoints: after every checkpoint_runs runs, no new run starts until the runs in flight
  // have ended; then the first thread to see none in flight runs the checkpoint.
  std::condition_variable idle;
  unsigned in_flight = 0;
  // Slots (variant::slots) held by the runs in flight; a run starts while its own fit in jobs.
  // The room is o.jobs even when fewer threads run (fewer runs than jobs).
  unsigned slots_in_use = 0;
  auto slots_of = [&](std::uint64_t k) { return std::clamp(o.variants[variant_index(k)].slots, 1u, o.jobs); };
  std::uint64_t since_checkpoint = 0;
  bool checkpointing = false;
  auto past_deadline = [&] { return o.deadline && std::chrono::steady_clock::now() >= *o.deadline; };

  // Each thread runs in a working directory of its own, reused from run to run and renamed to
  // the run's name only when the run keeps its files: a directory created for every run costs
  // more than a short run itself (measured: 2.3 ms to create a directory and a file in it on
  // this ext4, 0.1 ms to create a file in a directory that exists).
  auto worker = [&](unsigned slot) {
    const fs::path slot_dir = o.out_dir / "runs" / (".slot-" + std::to_string(slot));
    for (;;) {
      std::uint64_t k;
      {
        std::unique_lock lock(mu);
        for (;;) {
          while (next < total && (!o.part.owns(next) || is_recorded(next))) ++next;
          if (stop || next >= total || (o.cancel && o.cancel->load())) return;
          if (past_deadline()) {
            result.deadline_reached = true;
            return;
          }
          const bool due = o.checkpoint && o.checkpoint_runs > 0 && since_checkpoint >= o.checkpoint_runs;
          if (!due && !checkpointing && slots_in_use + slots_of(next) <= o.jobs) break;
          if (due && !checkpointing && in_flight == 0) {
            checkpointing = true;
            since_checkpoint = 0;
            const std::uint64_t recorded_runs = result.resumed + result.performed, failed = failures;
            lock.unlock();
            o.checkpoint(recorded_runs, failed);
            lock.lock();
            checkpointing = false;
            idle.notify_all();
            continue;
          }
          idle.wait_for(lock, std::chrono::milliseconds(100));
        }
        k = next++;
        ++in_flight;
        slots_in_use += slots_of(k);
      }
      const variant& v = o.variants[variant_index(k)];
      const std::uint64_t seed = seed_of(k);
      const std::string id = make_run_id(v.name, seed);

      run_request rq;
      rq.argv = v.argv;
      rq.env = o.env;
      for (const auto& kv : v.env) {
        auto eq = kv.find('=');
        set_env(rq.env, kv.substr(0, eq), eq == std::string::npos ? std::string() : kv.substr(eq + 1));
      }
      set_env(rq.env, "FAULTLINE_SEED", std::to_string(seed));
      const std::string faults = faults_of(k, v);
      set_env(rq.env, "FAULTLINE_FAULTS", faults.empty() ? std::nullopt : std::optional<std::string>(faults));
      rq.run_dir = slot_dir;
      rq.log_path = o.out_dir / "logs" / (id + ".log");
      rq.timeout = v.timeout;
      rq.grace = o.grace;
      rq.log_limit_bytes = o.log_limit_bytes;
      rq.stacks = o.stacks;
      rq.crash = o.crash;
      rq.gtest_output = v.gtest_output;
      rq.in_run_dir = v.in_run_dir;
      rq.check_shm = check_shm;
      rq.cancel = o.cancel;
      // Decided once the run is classified, so that a passing run kept by no one has no log file.
      bool keep = true;
      rq.keep_log = [&](const run_report& r) {
        if (r.interrupted || r.verdict.result != outcome::pass) return keep = true;
        std::lock_guard lock(mu);
        std::uint64_t& kept = passes_kept[variant_index(k)];
        keep = kept < passes_to_keep;
        if (keep) ++kept;
        return keep;
      };
      run_report rep = run_once(rq);
      auto end_of_run = [&] {  // under mu
        --in_flight;
        slots_in_use -= slots_of(k);
        idle.notify_all();  // a checkpoint waiting for no run in flight, a wide run for room
      };
      // A scheduler that ends a job (Slurm's scancel, a pod's termination, a CI cancel) signals
      // every process of it at once, the runs among them: a run that died of SIGTERM, SIGINT or
      // SIGHUP (or a shell's exit status for one, 128 + N) while the campaign is being cancelled
      // was interrupted, not failed. The harness's own signal may land a moment after its run's,
      // so it is given half a second to.
      if (!rep.interrupted && o.cancel && rep.evidence.wait_status) {
        const int st = *rep.evidence.wait_status;
        const int sig = WIFSIGNALED(st) ? WTERMSIG(st) : WIFEXITED(st) && WEXITSTATUS(st) > 128 ? WEXITSTATUS(st) - 128 : 0;
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
          for (int i = 0; i < 50 && !o.cancel->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          rep.interrupted = o.cancel->load();
        }
      }
      if (rep.interrupted) {
        std::lock_guard lock(mu);
        end_of_run();
        return;
      }

      run_record rec = to_record(rep, v, faults, k, seed, id, v.argv, keep);
      rec.points_reached = read_points(rq.run_dir);  // before the directory is reused
      for (auto& l : late_cuda_by_api(rq.run_dir)) rec.late_cuda.push_back({l.api, l.calls, std::move(l.signature)});
      std::error_code keep_ec;
      if (keep) {
        // The record names runs/ID: the working directory becomes it (the next run makes a new one).
        const fs::path kept = o.out_dir / "runs" / id;
        fs::remove_all(kept, keep_ec);  // a resumed campaign's run that was in flight
        fs::rename(slot_dir, kept, keep_ec);
      }
      auto ws = writer.append(rec);
      // Only a recorded run is pruned: its line is all that is left of it.
      if (keep_ec) {
        std::lock_guard lock(mu);
        warn("cannot keep the files of run " + id + ": " + keep_ec.message());
      }
      if (!keep && ws) {
        if (auto pe = prune_run(o.out_dir, id); pe) {
          std::lock_guard lock(mu);
          if (!prune_warned) {
            prune_warned = true;
            warn("cannot remove the files of passing run " + id + ": " + pe.message() + " (further failures not reported)");
          }
        }
      }
      std::lock_guard lock(mu);
      end_of_run();
      if (!ws) {
        // Nothing more can be recorded (a full disk, say): a run performed now would be lost.
        if (write_error.is_ok()) write_error = ws;
        stop = true;
        continue;
      }
      ++since_checkpoint;
      ++done;
      ++result.performed;
      summary.add(rec);
      if (rec.result != outcome::pass) {
        ++failures;
        if (o.until_fail) {
          stop = true;
          result.stopped_early = true;
        }
      }
      progress.update(done, failures);
    }
  };

  // A thread that cannot be created (process or memory limits) lowers the parallelism; the
  // runs still all happen, on the threads that did start.
  std::vector<std::thread> threads;
  result.jobs = 1;
  for (unsigned j = 1; j < jobs; ++j) {
    try {
      threads.emplace_back(worker, j);
      ++result.jobs;
    } catch (const std::system_error& e) {
      warn("could start only " + std::to_string(result.jobs) + " of " + std::to_string(jobs) + " runs at once (" + e.what() +
           "); going on with " + std::to_string(result.jobs));
      break;
    }
  }
  worker(0);
  for (auto& t : threads) t.join();
  for (unsigned j = 0; j < jobs; ++j) fs::remove_all(o.out_dir / "runs" / (".slot-" + std::to_string(j)), ec);
  progress.finish();

  result.interrupted = o.cancel && o.cancel->load();
  result.stray_pids = kill_strays(o.grace);
  if (!check_shm && o.sweep_shm_at_end) {
    for (const auto& name : faultline_shm_entries()) {
      if (std::binary_search(shm_before.begin(), shm_before.end(), name)) continue;
      result.stray_shm.push_back(name);
      fs::remove(fs::path("/dev/shm") / name, ec);
    }
  }
  result.summaries = summary.summaries();
  if (!write_error)
    return core::status(write_error.code(),
                        write_error.message() + "; stopped: the " + std::to_string(result.resumed + result.performed) +
                            " runs recorded before it are intact in " + results_path.string() +
                            ", and --resume performs the rest once it can be written");
  return result;
}

}  // namespace faultline::harness
