// rmm_client: a small program against the real RMM C++ library from PyPI's `librmm-cu13` wheels,
// built once per release, that holds an RMM pool until process exit the way RMM issue #2366 did,
// so faultline can be pointed at a client nobody here wrote (`faultline exec -- rmm_client_2604`).
//
// The bug (rapidsai/rmm #2366, April 2026; fixed by #2367, released in 26.06): a
// `pool_memory_resource` installed with `set_current_device_resource` and left there until exit
// made cuDF's STRINGS_NVBENCH (`--rmm-mode pool`) die with SIGSEGV in 60-80% of runs, after the
// results were printed: the pool lived in the static map behind `detail::get_ref_map()`, so its
// destructor ran during `exit()`, and `stream_ordered_memory_resource::release()` called
// `cudaEventSynchronize` / `cudaEventDestroy` on its events after the CUDA primary context had
// been torn down; in release builds the call went into libcuda.so and faulted there, in debug
// builds cudart answered with shutdown errors (cudaErrorContextIsDestroyed); `cudaEventQuery` was
// no safe probe either. The fix: `get_ref_map()` registers an atexit hook right after building
// the map (so the hook runs before the map's destructor, [basic.start.term]); the hook sets the
// flag that `rmm::process_is_exiting()` reads, and `release()` then returns at once, leaving the
// events and blocks to the OS. It covers resources RMM's map owns; RMM declares static containers
// of RMM objects of one's own unsupported, and nothing stops a thread still allocating.
//
// What this program does, per release (chosen at compile time by rmm/process_is_exiting.hpp):
//   26.06 and later (the fix is in): the pool is moved into RMM's per-device map, which then owns
//     it (`set_current_device_resource(pool_memory_resource{cuda_memory_resource{}, ...})`); the
//     map is built before the first CUDA call (`get_per_device_resource_ref` makes none), so, as
//     in the bug report, it is destroyed after CUDA's atexit teardown.
//   26.04 (before the fix; its map holds only references): the pool and its upstream live in a
//     function-local static container built before the first CUDA call, installed as the current
//     device resource by pointer (`set_current_device_resource(&pool)`); the container is
//     destroyed after CUDA's teardown, with no flag to consult.
// Then `--streams N` threads, one `rmm::cuda_stream` each, allocate `rmm::device_buffer`s from the
// current device resource (sizes from splitmix64 with a fixed seed, 1 KiB to 8 MiB), fill them
// with `cudaMemsetAsync` and free them on their stream, keeping a window of 8 live, for
// `--iterations` each; blocks freed on one stream are reused on others through the pool. The
// threads are joined. With `--detached-worker`, one more thread with its own stream allocates the
// same way without end and is detached once it has run `--settle-ms`: it is still allocating
// while `main` returns. `main` prints "work done" and returns 0.
//
// Usage: rmm_client_<release> [--streams N] [--iterations N] [--detached-worker] [--settle-ms N]
//                             [--pool-mib N]
// Exit status: 0 when the exit survived, a signal when it did not, 1 when RMM failed during the
// work, 2 when no CUDA device answers, 64 on a bad argument.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rmm/cuda_device.hpp>
#include <rmm/cuda_stream.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>

#if __has_include(<rmm/process_is_exiting.hpp>)
#define RMM_CLIENT_MAP_OWNS_POOL 1
#else
#define RMM_CLIENT_MAP_OWNS_POOL 0
#endif

namespace {

constexpr std::size_t window = 8;

// Static storage: the detached worker counts after main has returned.
std::atomic<unsigned long> buffers_done{0};
std::atomic<unsigned long> worker_buffers_done{0};
constexpr std::size_t min_bytes = std::size_t{1} << 10;
constexpr std::size_t max_bytes = std::size_t{8} << 20;

// splitmix64, mapped onto [lo, hi] by multiply-shift: the same sizes on every run.
class sizes {
 public:
  explicit sizes(std::uint64_t seed) : state_(seed) {}
  std::size_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const std::uint64_t span = max_bytes - min_bytes + 1;
    return min_bytes + static_cast<std::size_t>(((z >> 32) * span) >> 32);
  }

 private:
  std::uint64_t state_;
};

#if !RMM_CLIENT_MAP_OWNS_POOL
// 26.04: the client owns its pools, one per device, in a function-local static container.
using pool_mr = rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>;
struct device_pools {
  rmm::mr::cuda_memory_resource upstream;              // destroyed after the pools
  std::map<int, std::unique_ptr<pool_mr>> by_device;
};
device_pools& pools() {
  static device_pools p;
  return p;
}
#endif

// Allocates `count` buffers on `stream` (without end when count is 0), each filled and then freed
// in stream order, `window` of them live at a time.
void churn(const rmm::cuda_stream& stream, std::uint64_t seed, unsigned long count, std::atomic<unsigned long>& done) {
  sizes next_size(seed);
  std::vector<rmm::device_buffer> live(window);
  for (unsigned long i = 0; count == 0 || i < count; ++i) {
    const std::size_t bytes = next_size.next();
    rmm::device_buffer buffer(bytes, stream.view());  // the current device resource
    cudaMemsetAsync(buffer.data(), static_cast<int>(i & 0xff), bytes, stream.value());
    live[i % window] = std::move(buffer);  // frees the oldest on the stream
    if (i % window == window - 1) stream.synchronize_no_throw();
    done.fetch_add(1, std::memory_order_relaxed);
  }
}

int usage() {
  std::fprintf(stderr,
               "usage: rmm_client [--streams N] [--iterations N] [--detached-worker] [--settle-ms N] "
               "[--pool-mib N]\n");
  return 64;
}

bool parse_count(const char* text, long lo, long hi, long& out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long stream_count = 4;
  long iterations = 2000;
  long settle_ms = 20;
  long pool_mib = 256;
  bool detached_worker = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const bool has_value = i + 1 < argc;
    if (std::strcmp(a, "--detached-worker") == 0) {
      detached_worker = true;
    } else if (std::strcmp(a, "--streams") == 0 && has_value) {
      if (!parse_count(argv[++i], 1, 64, stream_count)) return usage();
    } else if (std::strcmp(a, "--iterations") == 0 && has_value) {
      if (!parse_count(argv[++i], 1, 100000000, iterations)) return usage();
    } else if (std::strcmp(a, "--settle-ms") == 0 && has_value) {
      if (!parse_count(argv[++i], 0, 600000, settle_ms)) return usage();
    } else if (std::strcmp(a, "--pool-mib") == 0 && has_value) {
      if (!parse_count(argv[++i], 1, 1 << 20, pool_mib)) return usage();
    } else {
      return usage();
    }
  }
  const std::size_t pool_bytes = static_cast<std::size_t>(pool_mib) << 20;

  // Built before the first CUDA call, so destroyed after CUDA's atexit teardown.
#if RMM_CLIENT_MAP_OWNS_POOL
  (void)rmm::mr::get_per_device_resource_ref(rmm::cuda_device_id{0});  // builds RMM's map
#else
  pools();
#endif

  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "rmm_client: no CUDA device answers: %s\n",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 2;
  }

  try {
#if RMM_CLIENT_MAP_OWNS_POOL
    rmm::mr::set_current_device_resource(rmm::mr::pool_memory_resource{rmm::mr::cuda_memory_resource{}, pool_bytes});
#else
    auto& pool = pools().by_device[0];
    pool = std::make_unique<pool_mr>(&pools().upstream, pool_bytes);
    rmm::mr::set_current_device_resource(pool.get());
#endif

    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(stream_count));
    std::vector<std::thread> threads;
    for (long t = 0; t < stream_count; ++t) {
      threads.emplace_back([&, t] {
        try {
          rmm::cuda_stream stream(rmm::cuda_stream::flags::non_blocking);
          churn(stream, 20240611 + static_cast<std::uint64_t>(t), static_cast<unsigned long>(iterations), buffers_done);
          stream.synchronize();
        } catch (...) {
          errors[static_cast<std::size_t>(t)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }

    if (detached_worker) {
      std::thread worker([] {
        // A worker of a real program: it stops at the first error RMM reports, quietly.
        try {
          rmm::cuda_stream stream(rmm::cuda_stream::flags::non_blocking);
          churn(stream, 20240611 + 1000, 0, worker_buffers_done);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rmm_client: worker stopped: %s\n", e.what());
        }
      });
      for (int i = 0; i < 10000 && worker_buffers_done.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
      worker.detach();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rmm_client: %s\n", e.what());
    return 1;
  }
  std::printf("work done: rmm %s, %ld streams, %lu buffers%s\n", RMM_CLIENT_RELEASE, stream_count,
              buffers_done.load(),
              detached_worker ? ", a detached worker still allocating" : "");
  std::fflush(stdout);
  return 0;
}
