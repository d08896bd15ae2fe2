// BM_no_point: the same loop as BM_point_disabled with the fault points compiled out, as a
// FAULTLINE_FAULTS=OFF build sees them. The target defines FAULTLINE_FAULTS_ENABLED=1 for every
// source; redefining it here, before point.h, gives this one file the OFF macros without a
// second build.
#undef FAULTLINE_FAULTS_ENABLED
#define FAULTLINE_FAULTS_ENABLED 0

#include <benchmark/benchmark.h>

#include "core/points/point.h"

namespace {

void BM_no_point(benchmark::State& state) {
  int acc = 0;
  for (auto _ : state) {
    acc += FAULTLINE_POINT("bench/point");
    benchmark::DoNotOptimize(acc);
  }
}
BENCHMARK(BM_no_point);

}  // namespace
