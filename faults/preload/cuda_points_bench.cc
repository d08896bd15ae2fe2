// What a cuda/ fault point costs a driver call (faults/preload/cuda_points.h), measured on the
// stand-in driver (testing/fake_libcuda.cc: each call is a few instructions, so the figures are
// the stub's own cost). The benchmark re-executes itself with libfaultline_agent.so preloaded and
// FAULTLINE_FAULTS naming cuda/cuMemFree_v2 with a term that never fires (0%fail), then compares
// in one process:
//   BM_unnamed_call   cuMemAlloc_v2, which no item names: the driver's own function (a point on
//                     another call costs it nothing; this is the check that it is not replaced)
//   BM_named_call     cuMemFree_v2 through its stub: trampoline, gate, plan evaluated, no fire
// The two functions of the stand-in do the same work (store and return), so the difference is the
// stub's. Usage: cuda_points_bench [benchmark flags]; FAULTLINE_AGENT_LIB and
// FAULTLINE_FAKE_LIBCUDA override the build's paths (a carried copy on a GPU machine).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

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

void BM_unnamed_call(benchmark::State& state) {
  auto f = reinterpret_cast<alloc_fn>(proc("cuMemAlloc"));
  unsigned long long p = 0;
  for (auto _ : state) benchmark::DoNotOptimize(f(&p, 64));
}
BENCHMARK(BM_unnamed_call);

void BM_named_call(benchmark::State& state) {
  auto f = reinterpret_cast<free_fn>(proc("cuMemFree"));
  for (auto _ : state) benchmark::DoNotOptimize(f(0x1234));
}
BENCHMARK(BM_named_call);
BENCHMARK(BM_named_call)->Threads(2)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("FAULTLINE_CUDA_POINTS_BENCH_CHILD") == nullptr) {
    const char* agent = std::getenv("FAULTLINE_AGENT_LIB");
    char run_dir[] = "/tmp/fl-cuda-points-bench-XXXXXX";
    if (::mkdtemp(run_dir) == nullptr) {
      std::perror("cuda_points_bench: mkdtemp");
      return 2;
    }
    setenv("FAULTLINE_CUDA_POINTS_BENCH_CHILD", "1", 1);
    setenv("LD_PRELOAD", agent != nullptr ? agent : FAULTLINE_AGENT_PRELOAD, 1);
    setenv("FAULTLINE_FAULTS", "cuda/cuMemFree_v2=0%fail", 1);
    setenv("FAULTLINE_RUN_DIR", run_dir, 1);
    setenv("FAULTLINE_AGENT_QUIET", "1", 1);
    ::execv("/proc/self/exe", argv);
    std::perror("cuda_points_bench: exec");
    return 2;
  }
  const char* fake = std::getenv("FAULTLINE_FAKE_LIBCUDA");
  driver = dlopen(fake != nullptr ? fake : FAULTLINE_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "cuda_points_bench: %s\n", dlerror());
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
