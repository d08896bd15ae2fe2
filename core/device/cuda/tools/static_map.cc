// fl_cuda_static_map — the first program of DESIGN.md §13.2.
//
// A function-local static std::map is constructed before the first CUDA call, so its destructor
// is registered with atexit before CUDA's teardown (registered at the process's first cuInit)
// and runs after it. Each element owns an
// event and device memory; its destructor synchronises and destroys the event and frees the
// memory, printing the CUDA error name of every call. Measured on an H100 (driver 580, CUDA
// 13.0): every call answers cudaErrorCudartUnloading and the process exits 0 (30/30 runs).
//
// Usage: fl_cuda_static_map [elements]   (default 3)
// Exit status: 0 after the work (whatever the destructors print); 2 when no CUDA device
// answers; 64 on a bad argument.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <map>

namespace {

void report(int key, const char* call, cudaError_t err) {
  std::printf("~gpu_resources[%d]: %s -> %s\n", key, call, cudaGetErrorName(err));
  std::fflush(stdout);
}

struct gpu_resources {
  int key = -1;
  cudaEvent_t event = nullptr;
  void* memory = nullptr;

  gpu_resources() = default;
  gpu_resources(const gpu_resources&) = delete;
  gpu_resources& operator=(const gpu_resources&) = delete;
  ~gpu_resources() {
    if (event != nullptr) {
      report(key, "cudaEventSynchronize", cudaEventSynchronize(event));
      report(key, "cudaEventDestroy", cudaEventDestroy(event));
    }
    if (memory != nullptr) report(key, "cudaFree", cudaFree(memory));
  }
};

std::map<int, gpu_resources>& resources() {
  static std::map<int, gpu_resources> map;
  return map;
}

}  // namespace

int main(int argc, char** argv) {
  int elements = 3;
  if (argc > 2 || (argc == 2 && (elements = std::atoi(argv[1])) <= 0)) {
    std::fprintf(stderr, "usage: fl_cuda_static_map [elements > 0]\n");
    return 64;
  }
  // Constructed before the first CUDA call: its destructor runs after CUDA's teardown.
  resources();

  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "fl_cuda_static_map: no CUDA device answers: %s\n",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 2;
  }
  for (int i = 0; i < elements; ++i) {
    gpu_resources& r = resources()[i];
    r.key = i;
    if (cudaError_t e = cudaMalloc(&r.memory, std::size_t{1} << 20); e != cudaSuccess) {
      std::fprintf(stderr, "fl_cuda_static_map: cudaMalloc: %s\n", cudaGetErrorName(e));
      return 1;
    }
    if (cudaError_t e = cudaEventCreate(&r.event); e != cudaSuccess) {
      std::fprintf(stderr, "fl_cuda_static_map: cudaEventCreate: %s\n", cudaGetErrorName(e));
      return 1;
    }
    cudaMemsetAsync(r.memory, i, std::size_t{1} << 20, nullptr);
    cudaEventRecord(r.event, nullptr);
  }
  std::printf("work done\n");
  std::fflush(stdout);
  return 0;
}
