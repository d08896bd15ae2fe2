// What the runner costs. Two figures:
//  - per-run overhead: run_once on a trivial program against a bare posix_spawn + waitpid of
//    the same program (the difference is the run directory, log file, pidfd, /proc scans and
//    classification);
//  - time from timeout expiry to a fully reaped tree, for a hanging tree of three processes,
//    without stack capture and with each capture method (manual time: only the teardown).
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "harness/detail/sys.h"
#include "harness/run/process.h"
#include "harness/run/runner.h"

extern char** environ;

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  static const fs::path dir = fs::temp_directory_path() / ("fl_runner_bench." + std::to_string(::getpid()));
  return dir;
}

fs::path bin(const char* name) { return detail::self_dir() / name; }

void bare_spawn_waitpid(benchmark::State& state, const char* program) {
  char* argv[] = {const_cast<char*>(program), nullptr};
  for (auto _ : state) {
    pid_t pid;
    if (posix_spawn(&pid, program, nullptr, nullptr, argv, environ) != 0) {
      state.SkipWithError("posix_spawn failed");
      break;
    }
    int status;
    waitpid(pid, &status, 0);
  }
}

void runner_once(benchmark::State& state, const std::string& program) {
  run_request rq;
  rq.argv = {program};
  rq.env = current_environment();
  rq.run_dir = scratch() / "runs" / "trivial";
  rq.log_path = scratch() / "logs" / "trivial.log";
  rq.timeout = std::chrono::seconds(30);
  rq.stacks.method = stack_method::none;
  for (auto _ : state) {
    auto r = run_once(rq);
    if (r.verdict.result != outcome::pass) {
      state.SkipWithError(("not a pass: " + r.verdict.signature).c_str());
      break;
    }
  }
}

void BM_bare_spawn_true(benchmark::State& state) { bare_spawn_waitpid(state, "/bin/true"); }
void BM_runner_true(benchmark::State& state) { runner_once(state, "/bin/true"); }
void BM_bare_spawn_testdata_pass(benchmark::State& state) {
  static const std::string p = bin("fl_testdata_pass").string();
  bare_spawn_waitpid(state, p.c_str());
}
void BM_runner_testdata_pass(benchmark::State& state) { runner_once(state, bin("fl_testdata_pass").string()); }

// A hung tree of three processes in two sessions (fl_testdata_hang_grandchild), or the
// agent-carrying hung program for the agent method. Only the teardown is timed.
void timeout_to_reaped(benchmark::State& state, stack_method method) {
  if (method == stack_method::gdb && !gdb_available()) {
    state.SkipWithError("gdb is not on PATH");
    return;
  }
  run_request rq;
  rq.argv = {bin(method == stack_method::agent ? "fl_testdata_agent_hang" : "fl_testdata_hang_grandchild").string()};
  rq.env = current_environment();
  rq.run_dir = scratch() / "runs" / "hang";
  rq.log_path = scratch() / "logs" / "hang.log";
  rq.timeout = std::chrono::milliseconds(300);
  rq.grace = std::chrono::seconds(1);
  rq.stacks.method = method;
  for (auto _ : state) {
    auto r = run_once(rq);
    if (r.verdict.result != outcome::hang) {
      state.SkipWithError("not a hang");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(r.teardown).count());
  }
}

BENCHMARK(BM_bare_spawn_true)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_runner_true)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_bare_spawn_testdata_pass)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_runner_testdata_pass)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(timeout_to_reaped, no_stacks, stack_method::none)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(timeout_to_reaped, proc, stack_method::proc)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(timeout_to_reaped, agent, stack_method::agent)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(timeout_to_reaped, gdb, stack_method::gdb)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace faultline::harness

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(faultline::harness::scratch(), ec);
  return 0;
}
