// The sim's hot paths: allocate/free (the pool allocator's benchmark compares against these),
// event record + query, and the round trip of one queued op. Timings are measured, never asserted.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "core/device/device.h"
#include "core/device/sim/sim_backend.h"

namespace {

namespace dev = faultline::core::device;

void allocate_free(benchmark::State& state) {
  auto& s = dev::sim();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    auto p = s.allocate(bytes);
    benchmark::DoNotOptimize(p);
    if (!p || !s.deallocate(*p)) state.SkipWithError("allocate/deallocate failed");
  }
}
BENCHMARK(allocate_free)->Arg(256)->Arg(64 << 10)->Arg(16 << 20)->ThreadRange(1, 4)->UseRealTime();

// Allocation with many live blocks of mixed sizes: the free lists, not a fresh arena.
void allocate_free_fragmented(benchmark::State& state) {
  auto& s = dev::sim();
  std::vector<void*> live;
  std::uint64_t seed = 42;
  auto next = [&seed] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return seed >> 33;
  };
  for (int i = 0; i < 4096; ++i) live.push_back(*s.allocate(256 + next() % (256 << 10)));
  for (auto _ : state) {
    const std::size_t i = next() % live.size();
    if (!s.deallocate(live[i])) state.SkipWithError("deallocate failed");
    auto p = s.allocate(256 + next() % (256 << 10));
    if (!p) state.SkipWithError("allocate failed");
    live[i] = *p;
  }
  for (void* p : live) (void)s.deallocate(p);
}
BENCHMARK(allocate_free_fragmented);

void event_record_query(benchmark::State& state) {
  auto& s = dev::sim();
  auto st = s.create_stream();
  auto e = s.create_event();
  for (auto _ : state) {
    (void)s.record_event(*e, *st);
    benchmark::DoNotOptimize(s.query_event(*e).code());
  }
  (void)s.destroy_event(*e);
  (void)s.destroy_stream(*st);
}
BENCHMARK(event_record_query);

void fill_and_synchronize(benchmark::State& state) {
  auto& s = dev::sim();
  auto st = s.create_stream();
  auto p = s.allocate(256);
  for (auto _ : state) {
    (void)s.fill_async(*p, 1, 256, *st);
    (void)s.synchronize_stream(*st);
  }
  (void)s.deallocate(*p);
  (void)s.destroy_stream(*st);
}
BENCHMARK(fill_and_synchronize)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
