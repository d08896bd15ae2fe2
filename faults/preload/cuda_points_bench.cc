// What a cuda/ fault point costs a driver call (faults/preload/cuda_points.h), measured on the
// stand-in driver (testing/fake_libcuda.cc: each call is a few instructions, so the figures are
// the stub's own cost). The benchmark re-executes itself with libfaultline_agent.so preloaded and
// FAULTLINE_FAULTS naming cuda/cuMemFree_v2 with a term that never fires (0%fail), then compares
// in one process:
//   BM_unnamed_call   cuMemAlloc_v2, which no item names: the driver's own function (a point on
//                     another call costs it nothing; this is the check that it is not replaced)
//   BM_named_call     cuMemFree_v2 through its stub: trampoline, gate, plan evaluated, no fire
// The two functions of the stand-in do the same work (store and return), so the difference is the
// stub's. Then the same again with `--late-cuda`'s setting (the agent as CUDA's injection
// library), where every driver function gets a stub that, until exit begins, only jumps on:
//   BM_raw_call                  cuMemAlloc_v2 called without the agent between (the baseline)
//   BM_unnamed_call/late_cuda    cuMemAlloc_v2 through its stub's fast path
//   BM_named_call/late_cuda      cuMemFree_v2 through its stub and the item's gate, as above
// Usage: cuda_points_bench [benchmark flags] (both settings, one after the other: give
// --benchmark_out only with FAULTLINE_CUDA_POINTS_BENCH_MODE=plain or late, which runs one);
// FAULTLINE_AGENT_LIB and FAULTLINE_FAKE_LIBCUDA override the build's paths (a carried copy on a
// GPU machine).
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <benchmark/benchmark.h>

namespace {

using free_fn = int (*)(unsigned long long);
using alloc_fn = int (*)(unsigned long long*, std::size_t);
using get_proc_fn = int (*)(const char*, void**, int, unsigned long long, void*);

void* driver = nullptr;

void* proc(const char* name) {
  auto get = reinterpret_cast<get_proc_fn>(dlsym(driver, "cuGetProcAddress_v2"));
  void* fn = nullptr;
  int status = 0;
  if (get == nullptr || get(name, &fn, 13000, 0, &status) != 0 || fn == nullptr) {
    std::fprintf(stderr, "cuda_points_bench: %s not found\n", name);
    std::exit(2);
  }
  return fn;
}

void BM_raw_call(benchmark::State& state) {
  // The stand-in's cuMemAlloc_v2 under a name the agent's dlsym never looks at.
  auto f = reinterpret_cast<alloc_fn>(dlsym(driver, "fake_raw_cuMemAlloc_v2"));
  if (f == nullptr) {
    state.SkipWithError("the stand-in driver has no fake_raw_cuMemAlloc_v2");
    return;
  }
  unsigned long long p = 0;
  for (auto _ : state) benchmark::DoNotOptimize(f(&p, 64));
}

void BM_unnamed_call(benchmark::State& state) {
  auto f = reinterpret_cast<alloc_fn>(proc("cuMemAlloc"));
  unsigned long long p = 0;
  for (auto _ : state) benchmark::DoNotOptimize(f(&p, 64));
}

void BM_named_call(benchmark::State& state) {
  auto f = reinterpret_cast<free_fn>(proc("cuMemFree"));
  for (auto _ : state) benchmark::DoNotOptimize(f(0x1234));
}

// One setting in a child process of its own: the agent reads its environment as it loads.
int run_mode(const char* mode, char** argv) {
  const char* agent = std::getenv("FAULTLINE_AGENT_LIB");
  if (agent == nullptr) agent = FAULTLINE_AGENT_PRELOAD;
  char run_dir[] = "/tmp/fl-cuda-points-bench-XXXXXX";
  if (::mkdtemp(run_dir) == nullptr) {
    std::perror("cuda_points_bench: mkdtemp");
    return 2;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("cuda_points_bench: fork");
    return 2;
  }
  if (pid == 0) {
    setenv("FAULTLINE_CUDA_POINTS_BENCH_CHILD", mode, 1);
    setenv("LD_PRELOAD", agent, 1);
    setenv("FAULTLINE_FAULTS", "cuda/cuMemFree_v2=0%fail", 1);
    setenv("FAULTLINE_RUN_DIR", run_dir, 1);
    setenv("FAULTLINE_AGENT_QUIET", "1", 1);
    if (std::strcmp(mode, "late") == 0) setenv("CUDA_INJECTION64_PATH", agent, 1);
    ::execv("/proc/self/exe", argv);
    std::perror("cuda_points_bench: exec");
    ::_exit(2);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return 2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const char* child = std::getenv("FAULTLINE_CUDA_POINTS_BENCH_CHILD");
  if (child == nullptr) {
    const char* only = std::getenv("FAULTLINE_CUDA_POINTS_BENCH_MODE");
    if (only != nullptr && std::strcmp(only, "plain") != 0 && std::strcmp(only, "late") != 0) {
      std::fprintf(stderr, "cuda_points_bench: FAULTLINE_CUDA_POINTS_BENCH_MODE must be plain or late, not '%s'\n", only);
      return 64;
    }
    int rc = 0;
    for (const char* mode : {"plain", "late"}) {
      if (only != nullptr && std::strcmp(only, mode) != 0) continue;
      if (int r = run_mode(mode, argv); r != 0) rc = r;
    }
    return rc;
  }
  const char* fake = std::getenv("FAULTLINE_FAKE_LIBCUDA");
  driver = dlopen(fake != nullptr ? fake : FAULTLINE_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "cuda_points_bench: %s\n", dlerror());
    return 2;
  }
  const bool late = std::strcmp(child, "late") == 0;
  const std::string suffix = late ? "/late_cuda" : "";
  if (late) benchmark::RegisterBenchmark("BM_raw_call", BM_raw_call);
  benchmark::RegisterBenchmark(("BM_unnamed_call" + suffix).c_str(), BM_unnamed_call);
  benchmark::RegisterBenchmark(("BM_named_call" + suffix).c_str(), BM_named_call);
  benchmark::RegisterBenchmark(("BM_named_call" + suffix).c_str(), BM_named_call)->Threads(2)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
