// fl_cuda_points_probe — a small CUDA runtime program for checking the preloaded agent's cuda/
// fault points (faults/preload/cuda_points.h) on a GPU. Built twice: with the static runtime
// (fl_cuda_points_probe, as nvcc links by default) and with libcudart.so
// (fl_cuda_points_probe_shared). It knows nothing of faultline.
//
// Usage: fl_cuda_points_probe STEP...   (each step prints one line)
//   alloc       cudaMalloc of 1 GiB: "alloc rc=N ms=T"
//   free        cudaFree of it: "free rc=N ms=T used_mib=U" (U: device memory in use after it,
//               from cudaMemGetInfo: a free that never reached the driver leaves the GiB in use)
//   event       record an event on a new stream: "event rc=N"
//   sync        cudaEventSynchronize of it: "sync rc=N" (fails once its context was reset)
//   info        "info used_mib=U"
// Exit status 0 (whatever the calls answered), 2 when no device answers, 64 on a bad step.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

long used_mib() {
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
  return static_cast<long>((total - free_bytes) >> 20);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "fl_cuda_points_probe: no CUDA device\n");
    return 2;
  }
  void* buffer = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  for (int i = 1; i < argc; ++i) {
    const char* step = argv[i];
    const auto begin = std::chrono::steady_clock::now();
    if (std::strcmp(step, "alloc") == 0) {
      const cudaError_t rc = cudaMalloc(&buffer, std::size_t{1} << 30);
      std::printf("alloc rc=%d ms=%.1f\n", static_cast<int>(rc), ms_since(begin));
    } else if (std::strcmp(step, "free") == 0) {
      const cudaError_t rc = cudaFree(buffer);
      const double ms = ms_since(begin);
      std::printf("free rc=%d ms=%.1f used_mib=%ld\n", static_cast<int>(rc), ms, used_mib());
    } else if (std::strcmp(step, "event") == 0) {
      cudaError_t rc = cudaStreamCreate(&stream);
      if (rc == cudaSuccess) rc = cudaEventCreate(&event);
      if (rc == cudaSuccess) rc = cudaEventRecord(event, stream);
      std::printf("event rc=%d\n", static_cast<int>(rc));
    } else if (std::strcmp(step, "sync") == 0) {
      std::printf("sync rc=%d\n", static_cast<int>(cudaEventSynchronize(event)));
    } else if (std::strcmp(step, "info") == 0) {
      std::printf("info used_mib=%ld\n", used_mib());
    } else {
      std::fprintf(stderr, "fl_cuda_points_probe: unknown step '%s'\n", step);
      return 64;
    }
    std::fflush(stdout);
  }
  return 0;
}
