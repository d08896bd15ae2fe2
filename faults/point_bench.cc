// What a fault point costs (DESIGN.md §6.1: "one relaxed load and a predictable branch" while
// nothing is enabled). Compare BM_point_disabled with BM_no_point (the macro compiled out, in
// point_bench_compiled_out.cc) and with BM_raw_fiu_fail (what consulting libfiu on every hit
// would cost); BM_point_enabled_other is the price every point pays while some other point is
// enabled, BM_point_enabled_fail the price of a point that fires.
#include <benchmark/benchmark.h>

#define FIU_ENABLE 1
#include <fiu.h>

#include "faults/engine.h"
#include "core/points/point.h"

namespace faultline::faults {
namespace {

// False (and the benchmark marked as skipped) when the spec cannot be applied, e.g. in a
// FAULTLINE_FAULTS=OFF build.
bool configure_for(benchmark::State& state, const char* spec) {
  if (core::status s = configure(spec); !s) {
    state.SkipWithError(s.to_string().c_str());
    return false;
  }
  return true;
}

void BM_point_disabled(benchmark::State& state) {
  disable_all();
  int acc = 0;
  for (auto _ : state) {
    acc += FAULTLINE_POINT("bench/point");
    benchmark::DoNotOptimize(acc);
  }
}
BENCHMARK(BM_point_disabled);

void BM_raw_fiu_fail(benchmark::State& state) {
  fiu_init(0);
  disable_all();
  int acc = 0;
  for (auto _ : state) {
    acc += fiu_fail("bench/point");
    benchmark::DoNotOptimize(acc);
  }
}
BENCHMARK(BM_raw_fiu_fail);

void BM_point_enabled_other(benchmark::State& state) {
  if (!configure_for(state, "bench/other=fail")) return;
  int acc = 0;
  for (auto _ : state) {
    acc += FAULTLINE_POINT("bench/point");
    benchmark::DoNotOptimize(acc);
  }
  disable_all();
}
BENCHMARK(BM_point_enabled_other);

void BM_point_enabled_fail(benchmark::State& state) {
  if (!configure_for(state, "bench/point=fail(EIO)")) return;
  int acc = 0;
  for (auto _ : state) {
    acc += FAULTLINE_POINT("bench/point");
    benchmark::DoNotOptimize(acc);
  }
  disable_all();
  if (acc == 0) state.SkipWithError("the enabled point never fired");
}
BENCHMARK(BM_point_enabled_fail);

}  // namespace
}  // namespace faultline::faults

BENCHMARK_MAIN();
