// Costs of the instance registry (DESIGN.md §5.2), on the selected backend (FAULTLINE_DEVICE:
// the sim where no GPU answers, the GPU otherwise). Each figure is set beside its baseline taken
// in the same iteration, so the two always share a machine state:
//
//   unregister/N        N saves of 256 KiB submitted, then unregister, timed from the first
//                       submit to unregister's return (manual time), against the same N saves
//                       submitted and drained alone, timed from the first submit to the last
//                       save's completion (the two take turns going first). Counters:
//                       drain_alone_ms, unregister_ms, overhead_ms (= their difference: the
//                       barrier, joining the workers, destroying streams and events, releasing
//                       the buffers). Target: overhead < 1 ms.
//   save_throughput/S   one instance, one device: 64 MiB saved as S-byte blocks (queued at once,
//                       then waited for; each save copies device -> host, synchronises its stream,
//                       hashes the copy against the client's checksum and stores it), against a
//                       plain loop of copy_async of the same sizes into one host buffer and a
//                       single synchronisation. Counters: save_GBps, copy_GBps, save_over_copy.
//
//   registry_bench --benchmark_min_time=0.2s
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/registry/registry.h"

namespace {

namespace device = faultline::core::device;
namespace reg = faultline::core::registry;
using clock_type = std::chrono::steady_clock;

device::backend* backend_or_skip(benchmark::State& state) {
  auto b = device::select_backend();
  if (!b) {
    state.SkipWithError(b.error().to_string().c_str());
    return nullptr;
  }
  return *b;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A registered instance with one buffer on device 0 holding seeded bytes, and the client's
// checksum of each `block`-sized piece.
struct instance {
  reg::registration r;
  std::vector<std::uint64_t> sums;
};

bool make(reg::instance_registry& registry, device::backend& dev, const std::string& id, std::size_t bytes,
          std::size_t block, instance& out, benchmark::State& state) {
  auto r = registry.register_instance(id, {.devices = {0}, .buffers = {{0, bytes}}});
  if (!r) {
    state.SkipWithError(r.error().to_string().c_str());
    return false;
  }
  auto b = registry.buffer(id, r->buffers[0]);
  std::vector<std::byte> host(bytes);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& byte : host) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    byte = static_cast<std::byte>(x);
  }
  auto s = dev.create_stream();
  if (!s || !dev.copy_async(b->ptr, host.data(), bytes, *s) || !dev.synchronize_stream(*s) || !dev.destroy_stream(*s)) {
    state.SkipWithError("cannot fill the buffer");
    return false;
  }
  out.r = *r;
  out.sums.clear();
  for (std::size_t off = 0; off + block <= bytes; off += block) out.sums.push_back(reg::checksum(host.data() + off, block));
  return true;
}

// Submits `n` saves of `block` bytes (cycling over the buffer); false on a refused submit.
bool submit(reg::instance_registry& registry, const std::string& id, const instance& inst, std::size_t n,
            std::size_t block, std::vector<reg::operation>& ops) {
  ops.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t piece = i % inst.sums.size();
    auto op = registry.save(id, {.buffer = inst.r.buffers[0], .offset = piece * block, .bytes = block,
                                 .key = i, .checksum = inst.sums[piece]});
    if (!op) return false;
    ops.push_back(*op);
  }
  return true;
}

void unregister_latency(benchmark::State& state) {
  device::backend* dev = backend_or_skip(state);
  if (dev == nullptr) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t block = 256 << 10;
  constexpr std::size_t buffer = 16 * block;
  reg::options o;
  o.backend = dev;
  reg::instance_registry registry(o);
  double drain_total = 0, unregister_total = 0;
  std::vector<reg::operation> ops;
  bool baseline_first = true;
  for (auto _ : state) {
    instance inst;
    if (!make(registry, *dev, "bench", buffer, block, inst, state)) return;
    // The baseline: the same saves, drained without an unregister (until the last completes; a
    // worker completes its tasks in order). The two take turns going first.
    auto drain_alone = [&]() -> double {
      const auto t0 = clock_type::now();
      if (!submit(registry, "bench", inst, n, block, ops)) state.SkipWithError("save refused");
      if (!ops.empty() && !ops.back().wait()) state.SkipWithError("save failed");
      const double t = seconds_since(t0);
      for (const auto& op : ops) {
        if (!op.wait()) state.SkipWithError("save failed");
      }
      return t;
    };
    double drain = baseline_first ? drain_alone() : 0;
    // The measured case: the same saves queued, then unregister.
    const auto t0 = clock_type::now();
    if (!submit(registry, "bench", inst, n, block, ops)) {
      state.SkipWithError("save refused");
      return;
    }
    const reg::unregister_result u = registry.unregister_instance("bench");
    const double unreg = seconds_since(t0);
    if (!u.status) state.SkipWithError(u.status.to_string().c_str());
    for (const auto& op : ops) {
      if (!op.ready()) state.SkipWithError("a save was still pending after unregister returned");
    }
    if (!baseline_first) {
      if (!make(registry, *dev, "bench", buffer, block, inst, state)) return;
      drain = drain_alone();
      (void)registry.unregister_instance("bench");
    }
    baseline_first = !baseline_first;
    state.SetIterationTime(unreg);
    drain_total += drain;
    unregister_total += unreg;
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["drain_alone_ms"] = drain_total / iters * 1e3;
  state.counters["unregister_ms"] = unregister_total / iters * 1e3;
  state.counters["overhead_ms"] = (unregister_total - drain_total) / iters * 1e3;
  state.SetLabel(std::string(dev->name()));
}
BENCHMARK(unregister_latency)->Name("unregister")->Arg(0)->Arg(16)->Arg(256)->UseManualTime()->Unit(benchmark::kMillisecond);

void save_throughput(benchmark::State& state) {
  device::backend* dev = backend_or_skip(state);
  if (dev == nullptr) return;
  const auto block = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t total = 64 << 20;
  reg::options o;
  o.backend = dev;
  reg::instance_registry registry(o);
  instance inst;
  if (!make(registry, *dev, "bench", total, block, inst, state)) return;
  const std::size_t n = total / block;
  auto buf = registry.buffer("bench", inst.r.buffers[0]);
  std::vector<std::byte> host(total);
  std::memset(host.data(), 1, total);  // touched once, as the store's recycled blocks are
  if (!dev->set_device(0)) {
    state.SkipWithError("cannot select device 0");
    return;
  }
  auto stream = dev->create_stream();
  if (!stream) {
    state.SkipWithError(stream.error().to_string().c_str());
    return;
  }
  double save_total = 0, copy_total = 0;
  std::vector<reg::operation> ops;
  for (auto _ : state) {
    auto t0 = clock_type::now();
    if (!submit(registry, "bench", inst, n, block, ops)) {
      state.SkipWithError("save refused");
      break;
    }
    for (const auto& op : ops) {
      if (auto st = op.wait(); !st) state.SkipWithError(st.to_string().c_str());
    }
    const double save = seconds_since(t0);
    // The baseline: the same copies, nothing else.
    t0 = clock_type::now();
    for (std::size_t off = 0; off < total; off += block) {
      (void)dev->copy_async(host.data() + off, static_cast<std::byte*>(buf->ptr) + off, block, *stream);
    }
    if (!dev->synchronize_stream(*stream)) state.SkipWithError("copy loop failed");
    const double copy = seconds_since(t0);
    state.SetIterationTime(save);
    save_total += save;
    copy_total += copy;
  }
  (void)dev->destroy_stream(*stream);
  const auto iters = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(total) * iters;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["save_GBps"] = bytes / save_total / 1e9;
  state.counters["copy_GBps"] = bytes / copy_total / 1e9;
  state.counters["save_over_copy"] = copy_total / save_total;
  state.SetLabel(std::string(dev->name()));
}
BENCHMARK(save_throughput)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
