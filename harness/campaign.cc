#include "harness/campaign.h"

#include <sys/wait.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

#include "harness/detail/sys.h"
#include "harness/process.h"
#include "harness/process_tree.h"
#include "harness/progress.h"
#include "harness/runner.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

run_record to_record(const run_report& rep, const variant& v, std::uint64_t run, std::uint64_t seed,
                     const std::string& run_id, const std::vector<std::string>& argv) {
  run_record r;
  r.run_id = run_id;
  r.run = run;
  r.name = v.name;
  r.seed = seed;
  r.faults = v.faults;
  r.injected = !v.faults.empty();
  r.result = rep.verdict.result;
  r.when = rep.verdict.when;
  r.exit_code = rep.verdict.exit_code;
  r.signal = rep.verdict.signal;
  r.duration_ms = rep.duration.count();
  r.signature = rep.verdict.signature;
  r.log = "logs/" + run_id + ".log";
  r.stacks = rep.evidence.stacks_path.empty() ? "" : "runs/" + run_id + "/" + rep.evidence.stacks_path.filename().string();
  r.leaked_pids = rep.evidence.leaked_pids;
  r.leaked_shm = rep.evidence.leaked_shm;
  r.timestamp = detail::iso_utc(rep.started);
  r.command = argv;
  return r;
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

}  // namespace

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

std::uint64_t owned_runs(std::uint64_t total, const shard& part) {
  if (part.count == 0 || part.index >= part.count) return 0;
  return total / part.count + (part.index < total % part.count ? 1 : 0);
}

core::result<campaign_result> run_campaign(const campaign_options& o) {
  if (o.variants.empty()) return core::status(core::errc::invalid_argument, "nothing to run");
  if (o.jobs == 0) return core::status(core::errc::invalid_argument, "jobs must be at least 1");
  std::error_code ec;
  fs::create_directories(o.out_dir / "logs", ec);
  fs::create_directories(o.out_dir / "runs", ec);
  if (ec) return core::status(core::errc::io_error, "create " + o.out_dir.string() + ": " + ec.message());
  results_writer writer;
  if (auto s = writer.open(o.out_dir / "results.jsonl"); !s) return s;

  const std::uint64_t nvariants = o.variants.size();
  const std::uint64_t total = o.repeat * nvariants;
  const auto shm_before = faultline_shm_entries();

  std::mutex mu;
  std::uint64_t next = 0, done = 0, failures = 0;
  bool stop = false;
  core::status write_error;
  campaign_result result;
  progress_meter progress(o.progress, o.progress_tty, owned_runs(total, o.part));

  auto worker = [&] {
    for (;;) {
      std::uint64_t k;
      {
        std::lock_guard lock(mu);
        while (next < total && !o.part.owns(next)) ++next;
        if (stop || next >= total || (o.cancel && o.cancel->load())) return;
        k = next++;
      }
      const variant& v = o.variants[k % nvariants];
      const std::uint64_t seed = o.seed + k / nvariants;
      const std::string id = make_run_id(v.name, seed);

      run_request rq;
      rq.argv = v.argv;
      rq.env = o.env;
      for (const auto& kv : v.env) {
        auto eq = kv.find('=');
        set_env(rq.env, kv.substr(0, eq), eq == std::string::npos ? std::string() : kv.substr(eq + 1));
      }
      set_env(rq.env, "FAULTLINE_SEED", std::to_string(seed));
      set_env(rq.env, "FAULTLINE_FAULTS", v.faults.empty() ? std::nullopt : std::optional<std::string>(v.faults));
      rq.run_dir = o.out_dir / "runs" / id;
      rq.log_path = o.out_dir / "logs" / (id + ".log");
      rq.timeout = v.timeout;
      rq.grace = o.grace;
      rq.stacks = o.stacks;
      rq.gtest_output = v.gtest_output;
      rq.check_shm = o.jobs == 1;  // with runs overlapping, a new entry has no single owner
      rq.cancel = o.cancel;
      run_report rep = run_once(rq);
      if (rep.interrupted) return;

      run_record rec = to_record(rep, v, k, seed, id, v.argv);
      auto ws = writer.append(rec);
      std::lock_guard lock(mu);
      if (!ws && write_error.is_ok()) write_error = ws;
      ++done;
      if (rec.result != outcome::pass) {
        ++failures;
        if (o.until_fail) {
          stop = true;
          result.stopped_early = true;
        }
      }
      result.records.push_back(std::move(rec));
      progress.update(done, failures);
    }
  };

  std::vector<std::thread> threads;
  for (unsigned j = 1; j < o.jobs; ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  progress.finish();

  result.interrupted = o.cancel && o.cancel->load();
  result.stray_pids = kill_strays(o.grace);
  if (o.jobs > 1) {
    for (const auto& name : faultline_shm_entries()) {
      if (std::binary_search(shm_before.begin(), shm_before.end(), name)) continue;
      result.stray_shm.push_back(name);
      fs::remove(fs::path("/dev/shm") / name, ec);
    }
  }
  std::sort(result.records.begin(), result.records.end(),
            [](const run_record& a, const run_record& b) { return a.run < b.run; });
  if (!write_error) return write_error;
  return result;
}

}  // namespace faultline::harness
