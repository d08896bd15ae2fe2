// Allocation throughput of the pool against its upstreams, on the process's device backend
// (FAULTLINE_DEVICE: the sim by default where no GPU answers, cuda on a GPU machine).
//
// Each iteration is one allocate + deallocate pair: the allocation of the oldest of 16 outstanding
// blocks is freed (on the stream that allocated it) and a new one is allocated, so the resource
// always serves a realistic mix of live blocks rather than an immediate free of what it just
// handed out. Sizes come from a fixed seed, uniform in [256 B, 1 MiB], precomputed. Streams are
// used round-robin: one stream, or four.
//
// Resources compared:
//   pool    pool_resource over device_resource (the pool grows during an untimed warm-up)
//   device  device_resource: cudaMalloc / cudaFree on cuda
//   async   async_resource: cudaMallocAsync / cudaFreeAsync on cuda
// and, separately, the cost of the backend's context_epoch(), which the pool calls per operation.
//
//   alloc_bench --benchmark_filter=pool
//   FAULTLINE_DEVICE=cuda alloc_bench
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc/device_resource.h"
#include "core/alloc/pool_resource.h"
#include "core/device/device.h"

namespace {

namespace alloc = faultline::core::alloc;
namespace device = faultline::core::device;

constexpr std::size_t window = 16;
constexpr std::size_t size_count = 4096;
constexpr std::size_t min_bytes = 256;
constexpr std::size_t max_bytes = std::size_t{1} << 20;
constexpr std::size_t warmup_pairs = 1024;

const std::vector<std::size_t>& sizes() {
  static const std::vector<std::size_t> table = [] {
    std::vector<std::size_t> out;
    out.reserve(size_count);
    std::uint64_t state = 20240611;  // fixed seed: every run measures the same sequence
    for (std::size_t i = 0; i < size_count; ++i) {
      std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      const std::uint64_t span = max_bytes - min_bytes + 1;
      out.push_back(min_bytes + (((z >> 32) * span) >> 32));
    }
    return out;
  }();
  return table;
}

enum class kind { pool, device, async };

struct slot {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  device::stream stream;
};

class pair_loop {
 public:
  pair_loop(alloc::device_memory_resource& r, const std::vector<device::stream>& streams)
      : r_(r), streams_(streams) {}

  // One allocate + deallocate pair; returns an error message or empty.
  std::string step() {
    slot& s = ring_[i_ % window];
    if (s.ptr != nullptr) {
      if (auto st = r_.deallocate(s.ptr, s.bytes, s.stream); !st) return st.to_string();
      s.ptr = nullptr;
    }
    const std::size_t bytes = sizes()[i_ % size_count];
    const device::stream stream = streams_[i_ % streams_.size()];
    auto p = r_.allocate(bytes, stream);
    if (!p) return p.error().to_string();
    s = {*p, bytes, stream};
    ++i_;
    return {};
  }

  std::string drain() {
    for (auto& s : ring_) {
      if (s.ptr == nullptr) continue;
      if (auto st = r_.deallocate(s.ptr, s.bytes, s.stream); !st) return st.to_string();
      s.ptr = nullptr;
    }
    return {};
  }

 private:
  alloc::device_memory_resource& r_;
  const std::vector<device::stream>& streams_;
  std::array<slot, window> ring_{};
  std::size_t i_ = 0;
};

void bm_pairs(benchmark::State& state, kind k, int stream_count) {
  auto chosen = device::select_backend();
  if (!chosen) {
    state.SkipWithError(chosen.error().to_string().c_str());
    return;
  }
  device::backend& dev = **chosen;
  std::vector<device::stream> streams;
  for (int i = 0; i < stream_count; ++i) {
    auto s = dev.create_stream();
    if (!s) {
      state.SkipWithError(s.error().to_string().c_str());
      return;
    }
    streams.push_back(*s);
  }
  {
    alloc::device_resource upstream(dev);
    alloc::async_resource async(dev);
    alloc::pool_options options;
    options.backend = &dev;
    alloc::pool_resource pool(upstream, options);
    alloc::device_memory_resource& r = k == kind::pool ? static_cast<alloc::device_memory_resource&>(pool)
                                       : k == kind::device ? static_cast<alloc::device_memory_resource&>(upstream)
                                                           : static_cast<alloc::device_memory_resource&>(async);
    pair_loop loop(r, streams);
    std::string error;
    for (std::size_t i = 0; i < warmup_pairs && error.empty(); ++i) error = loop.step();
    if (error.empty()) {
      for (auto _ : state) {
        error = loop.step();
        if (!error.empty()) break;
      }
    }
    if (!error.empty()) state.SkipWithError(error.c_str());
    (void)loop.drain();
    for (auto s : streams) (void)dev.synchronize_stream(s);
    if (k == kind::pool) {
      const auto stats = pool.statistics();
      state.counters["pool_MiB"] = static_cast<double>(stats.pool_bytes) / (1 << 20);
      state.counters["cross_stream_waits"] = static_cast<double>(stats.cross_stream_waits);
    }
  }
  for (auto s : streams) (void)dev.destroy_stream(s);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetLabel(std::string(dev.name()));
}

// The pool reads its device's context epoch on every allocate and deallocate (to never serve or
// take back memory of a reset context), so the backend's context_epoch() is on its hot path.
void bm_context_epoch(benchmark::State& state) {
  auto chosen = device::select_backend();
  if (!chosen) {
    state.SkipWithError(chosen.error().to_string().c_str());
    return;
  }
  device::backend& dev = **chosen;
  // Measured with the context active, as the pool sees it.
  auto p = dev.allocate(256);
  if (!p) {
    state.SkipWithError(p.error().to_string().c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(dev.context_epoch(0));
  (void)dev.deallocate(*p);
  state.SetLabel(std::string(dev.name()));
}

BENCHMARK(bm_context_epoch);
BENCHMARK_CAPTURE(bm_pairs, pool_1_stream, kind::pool, 1)->UseRealTime();
BENCHMARK_CAPTURE(bm_pairs, pool_4_streams, kind::pool, 4)->UseRealTime();
BENCHMARK_CAPTURE(bm_pairs, device_1_stream, kind::device, 1)->UseRealTime();
BENCHMARK_CAPTURE(bm_pairs, device_4_streams, kind::device, 4)->UseRealTime();
BENCHMARK_CAPTURE(bm_pairs, async_1_stream, kind::async, 1)->UseRealTime();
BENCHMARK_CAPTURE(bm_pairs, async_4_streams, kind::async, 4)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
