// Allocation throughput of the pool against its upstreams and against RMM's pool, on the
// process's device backend (FAULTLINE_DEVICE: the sim by default where no GPU answers, cuda on a
// GPU machine). Every resource runs in the same binary and the same run, so the results read as
// ratios (ci/gpu/alloc-ratios.py prints them from --benchmark_out JSON).
//
// Two shapes:
//   bm_pairs   each iteration is one allocate + deallocate pair: the allocation of the oldest of
//              16 outstanding blocks is freed (on the stream that allocated it) and a new one is
//              allocated, so the resource always serves a realistic mix of live blocks rather
//              than an immediate free of what it just handed out. Sizes come from a fixed seed,
//              uniform in [256 B, 1 MiB], precomputed. Streams are used round-robin: one, or four.
//   bm_random  RMM's random-allocations shape (rmm/cpp/benchmarks/random_allocations): each
//              iteration replays one plan of 2 x 1000 steps; a step allocates (always when
//              nothing is live, else with probability 73% while fewer than 1000 allocations were
//              made and the live bytes stay under a cap) a size uniform in [1 B, max], or frees a
//              live allocation chosen uniformly, so allocations and frees interleave and blocks
//              die in random order; what is still live at the end is freed, inside the timing.
//              max is 1, 4, 64 or 256 MiB; the cap min(16000 MiB, a quarter of the device's
//              memory); streams round-robin per allocation (1 or 4), each block freed on its own.
//              The plan comes from points::generator (splitmix64, seed 20240611) mapped by hand,
//              computed once outside the timing, so every resource replays the same steps.
// Both run one untimed warm-up first (the pools grow there).
//
// Resources compared:
//   pool      pool_resource over device_resource (initial 2 MiB, doubling, unbounded)
//   device    device_resource: cudaMalloc / cudaFree on cuda
//   async     async_resource: cudaMallocAsync / cudaFreeAsync on cuda
//   rmm_pool  RMM's rmm::mr::pool_memory_resource over rmm::mr::cuda_memory_resource, sized as
//             the pool (initial 2 MiB; unbounded, so RMM grows by the larger of the request and
//             its current size, i.e. doubling too). Only in a build configured with
//             FAULTLINE_RMM_ROOT (a `librmm-cu13` >= 26.06 wheel unpacked by
//             ci/gpu/fetch-rmm.sh); cuda backend only, it skips with "no CUDA device" elsewhere.
// and, separately, the cost of the backend's context_epoch(), which the pool calls per operation.
//
//   alloc_bench --benchmark_filter=pool
//   FAULTLINE_DEVICE=cuda alloc_bench --benchmark_out=alloc.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc/device_resource.h"
#include "core/alloc/pool_resource.h"
#include "core/device/device.h"
#include "core/points/random.h"

#if FAULTLINE_BENCH_RMM
#include <cuda_runtime_api.h>

#include <cuda/stream_ref>
#include <exception>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#endif

namespace {

namespace alloc = faultline::core::alloc;
namespace core = faultline::core;
namespace device = faultline::core::device;
namespace points = faultline::points;

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

enum class kind { pool, device, async, rmm_pool };

#if FAULTLINE_BENCH_RMM
// RMM's pool behind faultline's resource interface, so both run through the same loops (one
// virtual call per operation on either side). The streams are the cuda backend's, whose native
// handle is the cudaStream_t. RMM reports failures by exceptions; they become error values here.
class rmm_pool_resource final : public alloc::device_memory_resource {
 public:
  explicit rmm_pool_resource(std::size_t initial_size_bytes)
      : pool_(rmm::mr::cuda_memory_resource{}, initial_size_bytes) {}

  [[nodiscard]] std::size_t pool_size() const noexcept { return pool_.pool_size(); }

 private:
  static cuda::stream_ref to_cuda(device::stream s) noexcept {
    return cuda::stream_ref{static_cast<cudaStream_t>(s.native)};
  }
  core::result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override {
    try {
      return pool_.allocate(to_cuda(s), bytes, alloc::pool_resource::alignment_bytes);
    } catch (const std::exception& e) {
      return core::status(core::errc::out_of_memory, std::string("rmm pool_memory_resource: ") + e.what());
    }
  }
  core::status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override {
    pool_.deallocate(to_cuda(s), ptr, bytes, alloc::pool_resource::alignment_bytes);
    return core::status::ok();
  }

  rmm::mr::pool_memory_resource pool_;
};
#endif

// The resources of one benchmark over one backend; only the chosen one is used (RMM's pool is
// built only when chosen: it allocates its initial block at construction).
class resource_set {
 public:
  explicit resource_set(device::backend& dev)
      : dev_(dev), upstream_(dev_), async_(dev_), pool_(upstream_, pool_options_for(dev_)) {}

  // The chosen resource, or an error message for SkipWithError.
  std::pair<alloc::device_memory_resource*, std::string> choose(kind k) {
    switch (k) {
      case kind::pool: return {&pool_, {}};
      case kind::device: return {&upstream_, {}};
      case kind::async: return {&async_, {}};
      case kind::rmm_pool:
#if FAULTLINE_BENCH_RMM
        if (dev_.kind() != device::backend_kind::cuda) {
          return {nullptr, "no CUDA device (backend " + std::string(dev_.name()) + "): rmm_pool needs cuda"};
        }
        try {
          rmm_pool_ = std::make_unique<rmm_pool_resource>(pool_options_for(dev_).initial_size_bytes);
        } catch (const std::exception& e) {
          return {nullptr, std::string("rmm pool_memory_resource: ") + e.what()};
        }
        return {rmm_pool_.get(), {}};
#else
        return {nullptr, "built without FAULTLINE_RMM_ROOT"};
#endif
    }
    return {nullptr, "unknown kind"};
  }

  // The resource's own numbers, as benchmark counters.
  void report(kind k, benchmark::State& state) const {
    if (k == kind::pool) {
      const auto stats = pool_.statistics();
      state.counters["pool_MiB"] = static_cast<double>(stats.pool_bytes) / (1 << 20);
      state.counters["cross_stream_waits"] = static_cast<double>(stats.cross_stream_waits);
    }
#if FAULTLINE_BENCH_RMM
    if (k == kind::rmm_pool && rmm_pool_ != nullptr) {
      state.counters["pool_MiB"] = static_cast<double>(rmm_pool_->pool_size()) / (1 << 20);
    }
#endif
  }

 private:
  static alloc::pool_options pool_options_for(device::backend& dev) {
    alloc::pool_options options;
    options.backend = &dev;
    return options;
  }

  device::backend& dev_;
  alloc::device_resource upstream_;
  alloc::async_resource async_;
  alloc::pool_resource pool_;
#if FAULTLINE_BENCH_RMM
  std::unique_ptr<rmm_pool_resource> rmm_pool_;  // destroyed first: before the streams go
#endif
};

// `stream_count` fresh streams of `dev`, or an error message.
std::pair<std::vector<device::stream>, std::string> make_streams(device::backend& dev, int stream_count) {
  std::vector<device::stream> streams;
  for (int i = 0; i < stream_count; ++i) {
    auto s = dev.create_stream();
    if (!s) {
      for (auto made : streams) (void)dev.destroy_stream(made);
      return {{}, s.error().to_string()};
    }
    streams.push_back(*s);
  }
  return {streams, {}};
}

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
  auto [streams, stream_error] = make_streams(dev, stream_count);
  if (!stream_error.empty()) {
    state.SkipWithError(stream_error.c_str());
    return;
  }
  {
    resource_set resources(dev);
    auto [r, error] = resources.choose(k);
    if (r != nullptr) {
      pair_loop loop(*r, streams);
      for (std::size_t i = 0; i < warmup_pairs && error.empty(); ++i) error = loop.step();
      if (error.empty()) {
        for (auto _ : state) {
          error = loop.step();
          if (!error.empty()) break;
        }
      }
      (void)loop.drain();
      for (auto s : streams) (void)dev.synchronize_stream(s);
      resources.report(k, state);
    }
    if (!error.empty()) state.SkipWithError(error.c_str());
  }
  for (auto s : streams) (void)dev.destroy_stream(s);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetLabel(std::string(dev.name()));
}

// --- RMM's random-allocations shape ------------------------------------------------------------

constexpr std::size_t random_allocations = 1000;
constexpr std::size_t random_max_usage_bytes = std::size_t{16000} << 20;  // RMM's max_usage
constexpr std::uint64_t random_seed = 20240611;

// One step of a plan: allocate `value` bytes, or free the live allocation at index `value`.
struct random_step {
  bool allocate = false;
  std::size_t value = 0;
};

// The plan for sizes in [1, max_size_bytes] with live bytes under `cap_bytes`. Deterministic: the
// same seed, max and cap give the same steps on every run and standard library.
std::vector<random_step> make_random_plan(std::size_t max_size_bytes, std::size_t cap_bytes) {
  points::generator g(random_seed);
  std::vector<random_step> plan;
  plan.reserve(2 * random_allocations);
  std::vector<std::size_t> live;  // sizes of live allocations, in the replay's order
  std::size_t live_bytes = 0;
  std::size_t made = 0;
  for (std::size_t i = 0; i < 2 * random_allocations; ++i) {
    const std::size_t bytes = g.between(1, max_size_bytes);
    bool allocate = true;
    if (!live.empty()) {
      allocate = g.between(0, 99) < 73 && made < random_allocations && live_bytes + bytes < cap_bytes;
    }
    if (allocate) {
      plan.push_back({true, bytes});
      live.push_back(bytes);
      live_bytes += bytes;
      ++made;
    } else {
      // Swap-remove, as the replay does, so indices keep meaning the same allocation.
      const std::size_t index = g.between(0, live.size() - 1);
      plan.push_back({false, index});
      live_bytes -= live[index];
      live[index] = live.back();
      live.pop_back();
    }
  }
  return plan;
}

const std::vector<random_step>& random_plan(std::size_t max_size_bytes, std::size_t cap_bytes) {
  static std::map<std::pair<std::size_t, std::size_t>, std::vector<random_step>> plans;
  auto [it, inserted] = plans.try_emplace({max_size_bytes, cap_bytes});
  if (inserted) it->second = make_random_plan(max_size_bytes, cap_bytes);
  return it->second;
}

// Replays a plan against one resource; every allocation is freed by the end.
class random_replay {
 public:
  random_replay(alloc::device_memory_resource& r, const std::vector<device::stream>& streams)
      : r_(r), streams_(streams) {
    live_.reserve(random_allocations);
  }

  // Returns an error message or empty.
  std::string run(const std::vector<random_step>& plan) {
    std::string error;
    std::size_t next_stream = 0;
    for (const random_step& step : plan) {
      if (step.allocate) {
        const device::stream s = streams_[next_stream++ % streams_.size()];
        auto p = r_.allocate(step.value, s);
        if (!p) {
          error = p.error().to_string();
          break;
        }
        live_.push_back({*p, step.value, s});
      } else {
        const slot freed = live_[step.value];
        live_[step.value] = live_.back();
        live_.pop_back();
        if (auto st = r_.deallocate(freed.ptr, freed.bytes, freed.stream); !st) {
          error = st.to_string();
          break;
        }
      }
    }
    for (const slot& s : live_) {
      if (auto st = r_.deallocate(s.ptr, s.bytes, s.stream); !st && error.empty()) error = st.to_string();
    }
    live_.clear();
    return error;
  }

 private:
  alloc::device_memory_resource& r_;
  const std::vector<device::stream>& streams_;
  std::vector<slot> live_;
};

// args: max allocation size in MiB, stream count.
void bm_random(benchmark::State& state, kind k) {
  const auto max_size_bytes = static_cast<std::size_t>(state.range(0)) << 20;
  const auto stream_count = static_cast<int>(state.range(1));
  auto chosen = device::select_backend();
  if (!chosen) {
    state.SkipWithError(chosen.error().to_string().c_str());
    return;
  }
  device::backend& dev = **chosen;
  auto info = dev.memory(0);
  if (!info) {
    state.SkipWithError(info.error().to_string().c_str());
    return;
  }
  const std::size_t cap_bytes = std::min(random_max_usage_bytes, info->bytes_total / 4);
  const std::vector<random_step>& plan = random_plan(max_size_bytes, cap_bytes);
  auto [streams, stream_error] = make_streams(dev, stream_count);
  if (!stream_error.empty()) {
    state.SkipWithError(stream_error.c_str());
    return;
  }
  {
    resource_set resources(dev);
    auto [r, error] = resources.choose(k);
    if (r != nullptr) {
      random_replay replay(*r, streams);
      error = replay.run(plan);  // warm-up
      if (error.empty()) {
        for (auto _ : state) {
          error = replay.run(plan);
          if (!error.empty()) break;
        }
      }
      for (auto s : streams) (void)dev.synchronize_stream(s);
      resources.report(k, state);
    }
    if (!error.empty()) state.SkipWithError(error.c_str());
  }
  for (auto s : streams) (void)dev.destroy_stream(s);
  // Items are allocate and free calls: the plan's steps plus the frees of what it left live.
  std::size_t allocations = 0;
  for (const random_step& step : plan) allocations += step.allocate ? 1 : 0;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 2 * allocations));
  state.counters["cap_MiB"] = static_cast<double>(cap_bytes >> 20);
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
#if FAULTLINE_BENCH_RMM
BENCHMARK_CAPTURE(bm_pairs, rmm_pool_1_stream, kind::rmm_pool, 1)->UseRealTime();
BENCHMARK_CAPTURE(bm_pairs, rmm_pool_4_streams, kind::rmm_pool, 4)->UseRealTime();
#endif

void random_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"max_mib", "streams"})->ArgsProduct({{1, 4, 64, 256}, {1, 4}});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(bm_random, pool, kind::pool)->Apply(random_args);
BENCHMARK_CAPTURE(bm_random, device, kind::device)->Apply(random_args);
BENCHMARK_CAPTURE(bm_random, async, kind::async)->Apply(random_args);
#if FAULTLINE_BENCH_RMM
BENCHMARK_CAPTURE(bm_random, rmm_pool, kind::rmm_pool)->Apply(random_args);
#endif

}  // namespace

BENCHMARK_MAIN();
