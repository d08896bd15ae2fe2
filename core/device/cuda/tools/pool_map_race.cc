// fl_cuda_pool_map_race — the program of the Fidelity measurement (issue "Fidelity", the RMM
// #2367 class in its stream-ordered form): a function-local static map of memory pools, one per
// device, constructed before CUDA initialises, each owning a cudaMemPool_t and a stream and
// destroying them in its destructor; and a detached thread that allocates from the pool and
// frees on the stream (cudaMallocFromPoolAsync / cudaFreeAsync / cudaStreamSynchronize) while
// main returns. At exit the map's destructor and CUDA's teardown run under the thread's feet.
//
// --drain is the fix: main stops the thread and joins it before returning; it must never crash,
// not even with the exit amplifier (faultline exec --faults 'exit/end=delay(100ms)').
//
// --exit-stderr makes the map's destructor write one line to stderr (fprintf, unbuffered) once
// its pools are destroyed, as the program of the issue does: exit then lasts as long as that
// write takes, which depends on where stderr goes (a pipe, a regular file, /dev/null), and so
// does the crash rate (a program of this shape on an H100: 51/60 runs crashed through a pipe,
// 50/60 with stderr on /dev/null, 28/60 with it in a regular file).
//
// Usage: fl_cuda_pool_map_race [--drain] [--settle-ms N] [--exit-stderr]
// Exit status: 0 when the exit survived, SIGSEGV when it did not, 2 when no CUDA device
// answers, 64 on a bad argument.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

namespace {

struct device_pool {
  cudaMemPool_t pool = nullptr;
  cudaStream_t stream = nullptr;

  device_pool() = default;
  device_pool(const device_pool&) = delete;
  device_pool& operator=(const device_pool&) = delete;
  ~device_pool() {
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (pool != nullptr) cudaMemPoolDestroy(pool);
  }
};

bool exit_stderr = false;  // --exit-stderr

// The static map; its destructor destroys the pools, then (--exit-stderr) says so on stderr.
struct pool_map {
  std::map<int, device_pool> pools;

  pool_map() = default;
  pool_map(const pool_map&) = delete;
  pool_map& operator=(const pool_map&) = delete;
  ~pool_map() {
    const std::size_t n = pools.size();
    pools.clear();
    if (exit_stderr) std::fprintf(stderr, "fl_cuda_pool_map_race: destroyed %zu pool(s)\n", n);
  }
};

std::map<int, device_pool>& pools() {
  static pool_map map;
  return map.pools;
}

std::atomic<bool> stop{false};
std::atomic<bool> running{false};
std::atomic<unsigned long> iterations{0};

void churn(cudaMemPool_t pool, cudaStream_t stream) {
  running.store(true);
  while (!stop.load(std::memory_order_relaxed)) {
    void* p = nullptr;
    if (cudaMallocFromPoolAsync(&p, std::size_t{1} << 20, pool, stream) == cudaSuccess) cudaFreeAsync(p, stream);
    cudaStreamSynchronize(stream);
    iterations.fetch_add(1, std::memory_order_relaxed);
  }
  running.store(false);
}

int usage() {
  std::fprintf(stderr, "usage: fl_cuda_pool_map_race [--drain] [--settle-ms N] [--exit-stderr]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  bool drain = false;
  long settle_ms = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--drain") == 0) {
      drain = true;
    } else if (std::strcmp(argv[i], "--exit-stderr") == 0) {
      exit_stderr = true;
    } else if (std::strcmp(argv[i], "--settle-ms") == 0 && i + 1 < argc) {
      char* end = nullptr;
      settle_ms = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || settle_ms < 0) return usage();
    } else {
      return usage();
    }
  }
  pools();  // constructed before the first CUDA call: destroyed after CUDA's teardown

  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "fl_cuda_pool_map_race: no CUDA device answers: %s\n",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 2;
  }
  device_pool& dp = pools()[0];
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  if (cudaMemPoolCreate(&dp.pool, &props) != cudaSuccess ||
      cudaStreamCreateWithFlags(&dp.stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "fl_cuda_pool_map_race: cannot create the pool\n");
    return 1;
  }
  std::thread worker(churn, dp.pool, dp.stream);
  for (int i = 0; i < 10000 && iterations.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  if (drain) {
    stop.store(true);
    worker.join();
  } else {
    worker.detach();
  }
  std::printf("work done\n");
  std::fflush(stdout);
  return 0;
}
