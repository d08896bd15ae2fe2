// A stand-in for the CUDA driver (built as libcuda.so.1 in a folder of its own) for the tests of
// the cuda/ fault points on machines without a GPU: a few entry points with the driver's names
// and calling conventions that count their calls, and a cuGetProcAddress_v2 that hands them out
// the way the real driver does (asked "cuMemFree", it gives cuMemFree_v2). fake_cuda_report()
// says what was called; after cuFakeDeinit_fake() cuMemFree_v2 answers CUDA_ERROR_DEINITIALIZED,
// as the real driver does once its exit teardown has run.
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {
int mem_free_calls = 0;
unsigned long long last_freed = 0;
int resets = 0;
int reset_device = -1;
int current_device = 0;
double many_sum = 0;
bool deinitialized = false;
}  // namespace

extern "C" {

int cuInit(unsigned) { return 0; }

int cuMemFree_v2(unsigned long long ptr) {
  if (deinitialized) return 4;  // CUDA_ERROR_DEINITIALIZED
  ++mem_free_calls;
  last_freed = ptr;
  return 0;
}

int cuMemAlloc_v2(unsigned long long* ptr, std::size_t bytes) {
  if (ptr == nullptr) return 1;
  *ptr = 0x100000 + bytes;
  return 0;
}

// The same function under a name the agent's dlsym never looks at (cuda_points_bench's baseline).
// Not an alias: dladdr would name cuMemAlloc_v2's address after either.
int fake_raw_cuMemAlloc_v2(unsigned long long* ptr, std::size_t bytes) {
  if (ptr == nullptr) return 1;
  *ptr = 0x100000 + bytes;
  return 0;
}

int cuCtxGetDevice(int* device) {
  *device = current_device;
  return 0;
}

int cuCtxSetCurrentDevice_fake(int device) {  // not a driver call: the child picks a device
  current_device = device;
  return 0;
}

int cuFakeDeinit_fake() {  // not a driver call: the child tears the fake driver down
  deinitialized = true;
  return 0;
}

int cuDevicePrimaryCtxReset_v2(int device) {
  ++resets;
  reset_device = device;
  return 0;
}

// Eight integer arguments (two on the stack) and three doubles: a stub must pass them all.
int cuManyArgs_v2(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, double d1, double d2,
                  double d3) {
  many_sum = static_cast<double>(a1 + 2 * a2 + 3 * a3 + 4 * a4 + 5 * a5 + 6 * a6 + 7 * a7 + 8 * a8) + d1 * 10 +
             d2 * 100 + d3 * 1000;
  return 0;
}

int cuGetProcAddress_v2(const char* symbol, void** pfn, int, std::uint64_t, void* status) {
  if (status != nullptr) *static_cast<int*>(status) = 0;
  struct entry {
    const char* name;
    void* fn;
  };
  const entry table[] = {
      {"cuInit", reinterpret_cast<void*>(&cuInit)},
      {"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2)},
      {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuCtxGetDevice", reinterpret_cast<void*>(&cuCtxGetDevice)},
      {"cuManyArgs", reinterpret_cast<void*>(&cuManyArgs_v2)},
      {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
  };
  for (const entry& e : table) {
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      return 0;
    }
  }
  *pfn = nullptr;
  return 500;  // CUDA_ERROR_NOT_FOUND
}

void fake_cuda_report() {
  std::printf("fake: frees=%d last=0x%llx resets=%d reset_device=%d many=%.1f\n", mem_free_calls, last_freed, resets,
              reset_device, many_sum);
}

}  // extern "C"
