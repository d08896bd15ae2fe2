// fl_cuda_exit_race — the second program of DESIGN.md §13.2: an exit-time SIGSEGV.
//
// The fl_cuda_static_map program (a function-local static map, constructed before cudart
// initialises, whose element frees device memory and destroys an event in its destructor) plus
// a detached thread that loops cudaMalloc/cudaFree. main waits until the loop is going, prints
// "work done" and returns; exit then runs the CUDA teardown while the thread is inside the
// runtime. DESIGN.md §13.2 records SIGSEGV in 18/30 runs on an H100 (driver 580, CUDA 13.0).
//
// --guard adds the usual fix attempt: an atexit handler, registered after CUDA initialises (so
// it runs before the teardown), sets a flag that makes the map's destructor skip its CUDA calls.
// It guards the destructor only, not the calls in flight on the thread (DESIGN.md §13.2: 27/30 SIGSEGV).
//
// The rate is set by how much of its time the thread spends inside the runtime; --pause-us
// sleeps between iterations to lower it. Measured here on an H100 (driver 580.159.04, this
// program as built, 30 runs per cell, SIGSEGV count without / with --guard):
//   pause 0 us: 30 / 30    20 us: 13 / 15    100 us: 8 / 7    300 us: 0 / 5    1000 us: 1 / 1
// The default (0) reproduces on every run, which is what an injector-free reproducer wants.
//
// --drain is the real fix: main stops the thread and joins it before returning; it must never
// crash, not even with the exit amplifier (faultline exec --faults 'exit/end=delay(100ms)').
//
// Usage: fl_cuda_exit_race [--guard] [--drain] [--settle-ms N] [--pause-us N] [--exit-printf]
//   --settle-ms N  sleep N ms after the loop has started before returning (default 20)
//   --pause-us N   sleep N us between the thread's cudaMalloc/cudaFree pairs (default 0)
//   --exit-printf  printf one more line just before returning and leave it in stdio's buffer:
//                  exit() writes it after the destructors and CUDA's teardown (to a pipe or a
//                  file; a terminal gets it at once), so exit lasts as long as that write takes,
//                  which depends on where stdout goes. Lost when the process crashes first.
// Exit status: 0 when the exit survived, SIGSEGV (139 from a shell) when it did not, 2 when
// no CUDA device answers, 64 on a bad argument.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

namespace {

std::atomic<bool> exiting{false};
std::atomic<bool> stop{false};
std::atomic<unsigned long> loop_iterations{0};

void set_exiting() { exiting.store(true); }

struct gpu_resources {
  cudaEvent_t event = nullptr;
  void* memory = nullptr;

  gpu_resources() = default;
  gpu_resources(const gpu_resources&) = delete;
  gpu_resources& operator=(const gpu_resources&) = delete;
  ~gpu_resources() {
    if (exiting.load()) return;  // the --guard flag: set before cudart's teardown
    if (event != nullptr) {
      cudaEventSynchronize(event);
      cudaEventDestroy(event);
    }
    if (memory != nullptr) cudaFree(memory);
  }
};

std::map<int, gpu_resources>& resources() {
  static std::map<int, gpu_resources> map;
  return map;
}

void churn(long pause_us) {
  while (!stop.load(std::memory_order_relaxed)) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::size_t{1} << 20) == cudaSuccess) cudaFree(p);
    loop_iterations.fetch_add(1, std::memory_order_relaxed);
    if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
}

bool parse_count(const char* text, long& out) {
  char* end = nullptr;
  out = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && out >= 0;
}

int usage() {
  std::fprintf(stderr, "usage: fl_cuda_exit_race [--guard] [--drain] [--settle-ms N] [--pause-us N] [--exit-printf]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  bool guard = false;
  bool drain = false;
  bool exit_printf = false;
  long settle_ms = 20;
  long pause_us = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--guard") == 0) {
      guard = true;
    } else if (std::strcmp(argv[i], "--drain") == 0) {
      drain = true;
    } else if (std::strcmp(argv[i], "--exit-printf") == 0) {
      exit_printf = true;
    } else if (std::strcmp(argv[i], "--settle-ms") == 0 && i + 1 < argc) {
      if (!parse_count(argv[++i], settle_ms)) return usage();
    } else if (std::strcmp(argv[i], "--pause-us") == 0 && i + 1 < argc) {
      if (!parse_count(argv[++i], pause_us)) return usage();
    } else {
      return usage();
    }
  }
  // Constructed before the first CUDA call: its destructor runs after CUDA's teardown.
  resources();

  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "fl_cuda_exit_race: no CUDA device answers: %s\n",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 2;
  }
  if (guard) std::atexit(set_exiting);  // after CUDA's registration: runs before its teardown

  gpu_resources& r = resources()[0];
  if (cudaMalloc(&r.memory, std::size_t{1} << 20) != cudaSuccess || cudaEventCreate(&r.event) != cudaSuccess) {
    std::fprintf(stderr, "fl_cuda_exit_race: cannot allocate the map's resources\n");
    return 1;
  }
  cudaEventRecord(r.event, nullptr);

  std::thread worker(churn, pause_us);
  // Wait (bounded) until the loop is really inside the runtime, then a little longer.
  for (int i = 0; i < 10000 && loop_iterations.load(std::memory_order_relaxed) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  if (drain) {
    stop.store(true);
    worker.join();
  } else {
    worker.detach();
  }
  std::printf("work done\n");
  std::fflush(stdout);
  if (exit_printf) std::printf("fl_cuda_exit_race: main returns; exit() flushes this line\n");  // left buffered
  return 0;
}
