// Where each microsecond of a run goes (issue 42). A run under `faultline exec` of a no-op program
// is taken apart into the steps it is made of, each timed on its own, and the whole run and the
// whole campaign are timed with the same steps inside (run_report::steps):
//   start/    the program started bare (posix_spawn + waitpid), and with the agent preloaded
//   cgroup/   a run cgroup created and removed, taken from the pool and given back, moved into
//             (cgroup.procs), and the whole containment path (clone3 CLONE_INTO_CGROUP, vfork)
//   output/   the pipe, its drain thread and the log (a pass whose log is not kept writes no file)
//   results/  a record appended to results.jsonl, and what an fdatasync after it would cost
//   scheduler/ a run claimed and recorded
//   run/      run_once (counters: its steps, us a run), at 1 thread and at every core
//   campaign/ run_campaign of the no-op at --jobs 1 and --jobs = cores (the command's whole path
//             but its parsing): us a run, and runs a second
// ci/overhead.py --breakdown runs it beside the shell loops and writes the table
// (records/overhead/). Figures are per iteration; the thread benchmarks' are per run.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

#include "harness/campaign/campaign.h"
#include "harness/campaign/detail/scheduler.h"
#include "harness/detail/sys.h"
#include "harness/results/results.h"
#include "harness/run/containment.h"
#include "harness/run/detail/containment.h"
#include "harness/run/output_capture.h"
#include "harness/run/process.h"
#include "harness/run/runner.h"

extern char** environ;

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  static const fs::path dir = fs::temp_directory_path() / ("fl_run_cost_bench." + std::to_string(::getpid()));
  return dir;
}

fs::path bin(const char* name) { return detail::self_dir() / name; }
fs::path noop() { return bin("fl_testdata_noop"); }
fs::path agent() { return detail::self_dir() / ".." / "lib" / "libfaultline_agent.so"; }

std::vector<std::string> with_agent(std::vector<std::string> env) {
  set_env(env, "LD_PRELOAD", fs::weakly_canonical(agent()).string());
  return env;
}

void spawn_and_wait(benchmark::State& state, const std::vector<std::string>& env) {
  const std::string program = noop().string();
  char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  for (auto _ : state) {
    pid_t pid;
    if (posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, envp.data()) != 0) {
      state.SkipWithError("posix_spawn failed");
      break;
    }
    int status;
    ::waitpid(pid, &status, 0);
  }
}

void BM_start_bare(benchmark::State& state) { spawn_and_wait(state, current_environment()); }
void BM_start_agent_preloaded(benchmark::State& state) {
  if (!fs::exists(agent())) return state.SkipWithError("no libfaultline_agent.so beside bin/");
  spawn_and_wait(state, with_agent(current_environment()));
}

bool have_cgroups(benchmark::State& state) {
  if (detail::cgroups().dir.empty()) {
    state.SkipWithError(("no run cgroups here: " + detail::cgroups().why).c_str());
    return false;
  }
  return true;
}

// mkdir, open cgroup.procs and cgroup.kill, close, rmdir: what a run without the pool costs.
void BM_cgroup_create_remove(benchmark::State& state) {
  if (!have_cgroups(state)) return;
  const std::string dir = detail::cgroups().dir + "/faultline-bench." + std::to_string(::getpid());
  for (auto _ : state) {
    if (::mkdir(dir.c_str(), 0755) != 0) return state.SkipWithError("mkdir of a cgroup failed");
    int procs = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    int kill = ::open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
    ::close(procs);
    ::close(kill);
    ::rmdir(dir.c_str());
  }
}

// The pool's path (run_cgroups.cc): an idle cgroup lent, checked empty, given back.
void BM_cgroup_pooled(benchmark::State& state) {
  if (!have_cgroups(state)) return;
  for (auto _ : state) {
    auto c = detail::acquire_run_cgroup();
    if (c.dir.empty()) return state.SkipWithError("no run cgroup");
    detail::release_run_cgroup(std::move(c));
  }
}

// A process written into cgroup.procs and back: what a move costs where clone3 cannot start a
// program straight in its cgroup (keepers, older kernels).
void BM_cgroup_move(benchmark::State& state) {
  if (!have_cgroups(state)) return;
  auto a = detail::acquire_run_cgroup(), b = detail::acquire_run_cgroup();
  if (a.dir.empty() || b.dir.empty()) return state.SkipWithError("no run cgroup");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string text = std::to_string(pid);
  for (auto _ : state) {
    if (::write(a.procs_fd, text.data(), text.size()) < 0 || ::write(b.procs_fd, text.data(), text.size()) < 0)
      state.SkipWithError("cannot move a process between cgroups");
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  state.SetItemsProcessed(state.iterations() * 2);
  detail::release_run_cgroup(std::move(a));
  detail::release_run_cgroup(std::move(b));
}

// The whole containment path of a run: a pooled cgroup, clone3(CLONE_INTO_CGROUP | CLONE_VFORK),
// exec, the program's exit, reaping, the cgroup back to the pool.
void BM_cgroup_clone_into(benchmark::State& state) {
  if (!have_cgroups(state)) return;
  spawn_options o;
  o.argv = {noop().string()};
  o.envp = current_environment();
  o.contain = true;
  for (auto _ : state) {
    auto c = detail::spawn_watched(o);
    if (!c) return state.SkipWithError(c.error().message().c_str());
    c->wait_exit_for(std::chrono::seconds(10));
    c->reap();
  }
}

void BM_output_capture(benchmark::State& state) {
  fs::create_directories(scratch() / "logs");
  for (auto _ : state) {
    auto c = output_capture::open(scratch() / "logs" / "out.log", default_log_limit_bytes);
    if (!c) return state.SkipWithError(c.error().message().c_str());
    c->close_write_end();
    c->finish(std::chrono::milliseconds(100));
    c->discard();
  }
}

void BM_output_thread_only(benchmark::State& state) {
  for (auto _ : state) std::thread([] {}).join();
}

run_record typical_record(std::uint64_t k) {
  run_record r;
  r.run = k;
  r.name = noop().string();
  r.seed = k;
  r.run_id = make_run_id(r.name, k);
  r.duration_ms = 1;
  r.exit_code = 0;
  r.timestamp = "2026-11-28T00:00:00.000Z";
  r.command = {noop().string()};
  r.kind = variant_kind::command;
  return r;
}

void append_records(benchmark::State& state, bool sync) {
  fs::create_directories(scratch());
  const fs::path path = scratch() / "results.jsonl";
  fs::remove(path);
  results_writer w;
  if (auto s = w.open(path); !s) return state.SkipWithError(s.message().c_str());
  const int fd = sync ? ::open(path.c_str(), O_WRONLY | O_CLOEXEC) : -1;
  std::uint64_t k = 0;
  for (auto _ : state) {
    if (auto s = w.append(typical_record(k++)); !s) return state.SkipWithError(s.message().c_str());
    if (fd >= 0) ::fdatasync(fd);
  }
  if (fd >= 0) ::close(fd);
}

void BM_results_append(benchmark::State& state) { append_records(state, false); }
void BM_results_append_fdatasync(benchmark::State& state) { append_records(state, true); }

void BM_scheduler_claim_record(benchmark::State& state) {
  campaign_options o;
  o.variants.resize(1);
  o.variants[0].name = "noop";
  o.variants[0].argv = {"true"};
  o.repeat = std::uint64_t{1} << 40;
  o.jobs = 1;
  detail::run_numbering numbering(o);
  detail::run_scheduler sched(o, numbering, detail::campaign_tally(o), nullptr);
  run_record r = typical_record(0);
  for (auto _ : state) {
    auto k = sched.claim();
    (void)sched.keep_pass(*k);
    sched.record(*k, r);
  }
}

// run_once of the no-op, the thread's own run directory reused from run to run as a campaign's
// worker does; each step of the run is a counter (us a run).
void run_once_steps(benchmark::State& state, bool preload) {
  run_request rq;
  rq.argv = {noop().string()};
  rq.env = preload ? with_agent(current_environment()) : current_environment();
  rq.run_dir = scratch() / "runs" / (".slot-" + std::to_string(state.thread_index()));
  rq.log_path = scratch() / "logs" / ("run-" + std::to_string(state.thread_index()) + ".log");
  rq.timeout = std::chrono::seconds(30);
  rq.stacks.method = stack_method::none;
  rq.check_shm = state.threads() == 1;
  rq.keep_log = [](const run_report&) { return false; };
  run_steps sum;
  double total_us = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_once(rq);
    total_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (r.verdict.result != outcome::pass) return state.SkipWithError(("not a pass: " + r.verdict.signature).c_str());
    for (auto [into, from] : {std::pair{&sum.prepare, r.steps.prepare}, {&sum.arm, r.steps.arm}, {&sum.spawn, r.steps.spawn},
                              {&sum.program, r.steps.program}, {&sum.end, r.steps.end}, {&sum.cores, r.steps.cores},
                              {&sum.reap, r.steps.reap}, {&sum.output, r.steps.output}, {&sum.judge, r.steps.judge}})
      *into += from;
  }
  auto per_run = [](std::chrono::microseconds us) {
    return benchmark::Counter(static_cast<double>(us.count()), benchmark::Counter::kAvgIterations);
  };
  state.counters["prepare_us"] = per_run(sum.prepare);
  state.counters["arm_us"] = per_run(sum.arm);
  state.counters["spawn_us"] = per_run(sum.spawn);
  state.counters["program_us"] = per_run(sum.program);
  state.counters["end_us"] = per_run(sum.end);
  state.counters["cores_us"] = per_run(sum.cores);
  state.counters["reap_us"] = per_run(sum.reap);
  state.counters["output_us"] = per_run(sum.output);
  state.counters["judge_us"] = per_run(sum.judge);
  state.counters["run_once_us"] = benchmark::Counter(total_us, benchmark::Counter::kAvgIterations);
}

void BM_run_once(benchmark::State& state) { run_once_steps(state, false); }
void BM_run_once_agent(benchmark::State& state) { run_once_steps(state, true); }

// A campaign of `runs` runs of the no-op at --jobs J per iteration, its results file and all
// (the command's path but its argument parsing and summary printing).
void BM_campaign(benchmark::State& state) {
  const auto jobs = static_cast<unsigned>(state.range(0));
  const auto runs = static_cast<std::uint64_t>(state.range(1));
  campaign_options o;
  o.variants.resize(1);
  o.variants[0].name = "noop";
  o.variants[0].argv = {noop().string()};
  o.variants[0].env = {"LD_PRELOAD=" + fs::weakly_canonical(agent()).string()};
  o.repeat = runs;
  o.jobs = jobs;
  o.env = current_environment();
  o.stacks.method = stack_method::none;
  o.out_dir = scratch() / ("campaign-j" + std::to_string(jobs));
  o.replace = true;
  (void)prepare_containment(jobs);
  double total_us = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_campaign(o);
    total_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (!r) return state.SkipWithError(r.error().message().c_str());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(runs));
  state.counters["us_per_run"] = total_us / static_cast<double>(state.iterations() * runs);
}

}  // namespace
}  // namespace faultline::harness

int main(int argc, char** argv) {
  using namespace faultline::harness;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  (void)prepare_containment(static_cast<unsigned>(cores));
  auto us = [](benchmark::internal::Benchmark* b) { return b->Unit(benchmark::kMicrosecond)->UseRealTime(); };
  us(benchmark::RegisterBenchmark("start/bare", BM_start_bare));
  us(benchmark::RegisterBenchmark("start/agent_preloaded", BM_start_agent_preloaded));
  us(benchmark::RegisterBenchmark("cgroup/create_remove", BM_cgroup_create_remove));
  us(benchmark::RegisterBenchmark("cgroup/pooled", BM_cgroup_pooled));
  us(benchmark::RegisterBenchmark("cgroup/move", BM_cgroup_move));
  us(benchmark::RegisterBenchmark("cgroup/clone_into_and_wait", BM_cgroup_clone_into));
  us(benchmark::RegisterBenchmark("output/capture", BM_output_capture));
  us(benchmark::RegisterBenchmark("output/thread_only", BM_output_thread_only));
  us(benchmark::RegisterBenchmark("results/append", BM_results_append));
  us(benchmark::RegisterBenchmark("results/append_fdatasync", BM_results_append_fdatasync));
  us(benchmark::RegisterBenchmark("scheduler/claim_record", BM_scheduler_claim_record));
  for (int t : {1, cores}) {
    us(benchmark::RegisterBenchmark("run/run_once", BM_run_once))->Threads(t);
    us(benchmark::RegisterBenchmark("run/run_once_agent", BM_run_once_agent))->Threads(t);
    if (cores == 1) break;
  }
  for (int j : {1, cores}) {
    us(benchmark::RegisterBenchmark("campaign/noop", BM_campaign))->Args({j, 400 * j})->Iterations(3);
    if (cores == 1) break;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(scratch(), ec);
  return 0;
}
