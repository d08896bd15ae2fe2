// What the nccl/ points cost an NCCL call (nccl_points.h), measured on the stand-in libnccl.so.2
// (testing/fake_libnccl.cc), whose ncclGroupStart and ncclGroupEnd only return: the figures are the
// agent's own cost per call. The benchmark re-executes itself with libfaultline_agent.so preloaded,
// takes the functions from dlsym on the library's handle (the agent hands out its own) and compares,
// in one process:
//   BM_raw_call        the stand-in's ncclGroupStart under a name the agent never stands before
//   BM_agent_call      ncclGroupStart through the agent: the rank's counts, no item asked
//   BM_raw_collective  the stand-in's ncclAllReduce of one float on a communicator of one rank, on
//                      the null stream, under a name the agent never stands before
//   BM_agent_collective the same through the agent: counts, its ring entry, and (setting `driver`)
//                      its event recorded and the oldest pending one queried
// in the setting `unused` (no nccl/ item in FAULTLINE_FAULTS), in the setting `named`
// (FAULTLINE_FAULTS=nccl/ncclGroupEnd=0%fail) the same and
//   BM_named_call      ncclGroupEnd through the agent and its item: a term that never fires
// and in the setting `driver` (no item; the stand-in CUDA driver loaded first, whose cuEventRecord
// on the null stream completes the event at once: the figures are the agent's bookkeeping, not a
// GPU's) the two collectives.
// Usage: nccl_points_bench [benchmark flags] (every setting, one after the other; give
// --benchmark_out only with FAULTLINE_NCCL_POINTS_BENCH_MODE=unused, named or driver, which runs one).
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <benchmark/benchmark.h>

namespace {

using group_fn = int (*)();
using all_reduce_fn = int (*)(const void*, void*, std::size_t, int, int, void*, void*);
using unique_id_fn = int (*)(void*);
using init_fn = int (*)(void**, int, std::array<char, 128>, int);
using destroy_fn = int (*)(void*);
void* library = nullptr;
void* comm = nullptr;  // a communicator of one rank

template <class F = group_fn>
F function(const char* name) {
  auto f = reinterpret_cast<F>(dlsym(library, name));
  if (f == nullptr) {
    std::fprintf(stderr, "nccl_points_bench: %s not found\n", name);
    std::exit(2);
  }
  return f;
}

void run_calls(benchmark::State& state, group_fn f) {
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

void run_collectives(benchmark::State& state, all_reduce_fn f) {
  float send = 1.0f, recv = 0.0f;
  for (auto _ : state) benchmark::DoNotOptimize(f(&send, &recv, 1, /*ncclFloat*/ 7, /*ncclSum*/ 0, comm, nullptr));
}

int run_mode(const char* mode, char** argv) {
  char run_dir[] = "/tmp/fl-nccl-points-bench-XXXXXX";
  if (::mkdtemp(run_dir) == nullptr) return 2;
  const pid_t pid = ::fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    setenv("FAULTLINE_NCCL_POINTS_BENCH_CHILD", mode, 1);
    setenv("LD_PRELOAD", FAULTLINE_AGENT_PRELOAD, 1);
    if (std::strcmp(mode, "named") == 0) setenv("FAULTLINE_FAULTS", "nccl/ncclGroupEnd=0%fail", 1);
    else setenv("FAULTLINE_FAULTS", "exit/end=off", 1);
    setenv("FAULTLINE_RUN_DIR", run_dir, 1);
    setenv("FAULTLINE_AGENT_QUIET", "1", 1);
    ::execv("/proc/self/exe", argv);
    ::_exit(2);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return 2;
  const std::string cleanup = std::string("rm -rf ") + run_dir;
  (void)!std::system(cleanup.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const char* child = std::getenv("FAULTLINE_NCCL_POINTS_BENCH_CHILD");
  if (child == nullptr) {
    const char* only = std::getenv("FAULTLINE_NCCL_POINTS_BENCH_MODE");
    int rc = 0;
    for (const char* mode : {"unused", "named", "driver"}) {
      if (only != nullptr && std::strcmp(only, mode) != 0) continue;
      if (int r = run_mode(mode, argv); r != 0) rc = r;
    }
    return rc;
  }
  const bool driver = std::strcmp(child, "driver") == 0;
  if (driver && dlopen(FAULTLINE_FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "nccl_points_bench: %s\n", dlerror());
    return 2;
  }
  library = dlopen(FAULTLINE_FAKE_LIBNCCL, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "nccl_points_bench: %s\n", dlerror());
    return 2;
  }
  std::array<char, 128> id{};
  if (function<unique_id_fn>("ncclGetUniqueId")(id.data()) != 0 || function<init_fn>("ncclCommInitRank")(&comm, 1, id, 0) != 0) {
    std::fprintf(stderr, "nccl_points_bench: no communicator\n");
    return 2;
  }
  const std::string suffix = std::string("/") + child;
  if (!driver) {
    group_fn raw = function("fake_raw_ncclGroupStart"), start = function("ncclGroupStart"), end = function("ncclGroupEnd");
    benchmark::RegisterBenchmark(("BM_raw_call" + suffix).c_str(), run_calls, raw);
    benchmark::RegisterBenchmark(("BM_agent_call" + suffix).c_str(), run_calls, start);
    if (std::strcmp(child, "named") == 0) benchmark::RegisterBenchmark(("BM_named_call" + suffix).c_str(), run_calls, end);
  }
  benchmark::RegisterBenchmark(("BM_raw_collective" + suffix).c_str(), run_collectives,
                               function<all_reduce_fn>("fake_raw_ncclAllReduce"));
  benchmark::RegisterBenchmark(("BM_agent_collective" + suffix).c_str(), run_collectives,
                               function<all_reduce_fn>("ncclAllReduce"));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  function<destroy_fn>("ncclCommDestroy")(comm);
  return 0;
}
