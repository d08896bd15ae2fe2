// The exit/ family: device memory at process exit and after an early context reset.
//
// The bug class is RMM #2367: a function-local static map of per-device pools, constructed before
// the CUDA runtime initialised, so its destructor ran after the runtime's atexit teardown and
// freed through a dead runtime (cudaErrorCudartUnloading, or a segfault at exit in 60-80% of runs
// when another thread was still inside a device call). Measured on an H100 (DESIGN.md §13.2): the
// guard that only protects the destructor leaves calls in flight unprotected, and an event used
// after its primary context was reset is a SIGSEGV every time.
//
// Each scenario drives the real allocator (core/alloc) on the selected backend and checks, at the
// end of its work, the allocator's invariants, and after the runtime's teardown (an atexit probe
// registered before the runtime initialised) that no device call was made after teardown. Leaks
// forced by exit or reset must be reported, not hidden.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/alloc/device_resource.h"
#include "core/alloc/per_device_resource.h"
#include "core/alloc/pool_resource.h"
#include "core/alloc/process_exit.h"
#include "core/device/device.h"
#include "scenarios/scenario.h"

namespace faultline::scenarios {

namespace {

namespace alloc = core::alloc;
namespace device = core::device;

// The exit-phase invariant every scenario of the family shares: after the runtime's teardown has
// run, nothing called into the device. Read from the backend's own counter, so a call that only
// returned an error (as real CUDA does) counts as much as one that crashed.
void check_no_call_after_teardown(context& ctx, device::backend& dev) {
  ctx.check_at_exit("no-device-call-after-teardown", [&dev]() -> std::string {
    auto calls = dev.calls_after_teardown();
    if (calls == 0) return {};
    return std::to_string(calls) + " device call(s) after the runtime's teardown";
  });
}

device::stream make_stream(context& ctx, device::backend& dev) {
  auto s = dev.create_stream();
  ctx.require(s.has_value(), "stream-created", s.error().to_string());
  return *s;
}

// --- exit/static-pool ---------------------------------------------------------------------------
// Arrange: the per-device pool is the process's first device object (as in RMM #2367, where the
//   map was built before the runtime). Act: allocate on two streams so blocks change hands (the
//   pool records per-stream events), free some, keep others live, and return from the work.
// Check: pool invariants after the work; at exit, no device call after teardown, and the bytes
//   the pool had to leak at exit are reported (bytes_leaked_at_exit() > 0).
// Bug point bug/alloc/no-exit-guard: the map is built before the runtime and its destructor frees
//   through the torn-down runtime: detected as a fail in phase exit, every run.
void static_pool(context& ctx) {
  auto resource = alloc::get_per_device_resource(0);
  ctx.require(resource.has_value(), "per-device-resource", resource.error().to_string());
  device::backend& dev = device::current();
  check_no_call_after_teardown(ctx, dev);
  ctx.check_at_exit("exit-leaks-reported", [] {
    return alloc::bytes_leaked_at_exit() > 0
               ? std::string()
               : std::string("the pool held upstream memory at exit but reported no leaked bytes");
  });

  device::stream a = make_stream(ctx, dev);
  device::stream b = make_stream(ctx, dev);
  struct live { void* ptr; std::size_t bytes; device::stream s; };
  std::vector<live> blocks;
  for (int i = 0; i < 64; ++i) {
    std::size_t bytes = ctx.random().between(256, 256 * 1024);
    device::stream s = (i % 2 == 0) ? a : b;
    auto p = (*resource)->allocate(bytes, s);
    ctx.require(p.has_value(), "allocation-served", p.error().to_string());
    blocks.push_back({*p, bytes, s});
  }
  // Free three quarters on the stream that allocated them, then reuse from the other stream so
  // blocks change hands through events.
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i % 4 == 0) continue;
    ctx.check((*resource)->deallocate(blocks[i].ptr, blocks[i].bytes, blocks[i].s), "free-accepted");
  }
  for (int i = 0; i < 16; ++i) {
    device::stream s = (i % 2 == 0) ? b : a;
    auto p = (*resource)->allocate(ctx.random().between(256, 64 * 1024), s);
    ctx.check(p.has_value(), "cross-stream-reuse", p.error().to_string());
  }
  ctx.check(dev.synchronize_device(), "device-synchronised");
  if (auto* pool = dynamic_cast<alloc::pool_resource*>(*resource)) {
    ctx.check(pool->check_invariants(), "allocator-invariants");
  }
  // Live blocks stay allocated on purpose: the process exits holding them.
}

// --- exit/thread-in-flight ----------------------------------------------------------------------
// Arrange: worker threads loop allocating and freeing through the per-device pool and straight
//   through the device (cudaMalloc/cudaFree), never joined. Act: the work returns while they run.
// Check: exit drains the calls in flight or refuses new ones cleanly (workers see errc::refused
//   and stop; any other error they retry, as a prefetcher would); no allocator call is still in
//   flight once the runtime is torn down; no device call after teardown; the process exits 0.
// Bug point bug/alloc/bounded-drain: the drain gives up after a fixed 2 s, as it did before the
//   H100 at --jobs 16 showed calls outlasting it (28 of 30 clean runs failed, one crashed in
//   libcuda at exit); with every allocator device call 3 s long (alloc/device/call=delay(3s)) the
//   calls are still in flight when the teardown runs: a fail at exit every run, on both backends.
// Bug point bug/alloc/no-drain: on the sim alone, 99 of 100 runs detected (29 SIGSEGV at exit on
//   the dead context pages, 70 fail at exit: calls after teardown or still in flight); the verify variant widens the sim's check-to-use window
//   (sim/call/after-unloading-check=delay) and holds the teardown open after it unmapped the
//   context (sim/teardown/after-unmap=delay), so a call in flight reaches the dead pages: a
//   SIGSEGV at exit in every run. On an H100: a fail at exit (a call still in flight) every run.
void thread_in_flight(context& ctx) {
  auto resource = alloc::get_per_device_resource(0);
  ctx.require(resource.has_value(), "per-device-resource", resource.error().to_string());
  device::backend& dev = device::current();
  check_no_call_after_teardown(ctx, dev);
  // The drain rule itself: once the runtime is torn down no allocator call may still be inside
  // it. On real CUDA this is what catches a missing drain: a call caught in cudart's teardown
  // does not return before the process is gone, so it is never counted as a call after it.
  ctx.check_at_exit("no-call-in-flight-at-teardown", [] {
    int n = alloc::device_calls_in_flight();
    return n == 0 ? std::string() : std::to_string(n) + " allocator device call(s) still in flight";
  });

  constexpr int workers = 4;
  // Leaked on purpose: the workers outlive main and must not touch destroyed state.
  auto* upstream = new alloc::device_resource();
  auto* started = new std::atomic<int>(0);
  for (int w = 0; w < workers; ++w) {
    std::uint64_t seed = ctx.random().next();
    std::thread([resource = *resource, upstream, started, seed] {
      rng r(seed);
      started->fetch_add(1);
      // Like a prefetcher, a worker retries what fails; only the allocator's refusal at exit
      // (errc::refused, the fixed behaviour's clean stop) ends it. Without that refusal it keeps
      // calling into a runtime that is gone, which the backend counts.
      auto stop = [](const core::status& st) { return st.code() == core::errc::refused; };
      for (;;) {
        std::size_t bytes = r.between(256, 1 << 20);
        auto p = upstream->allocate(bytes);
        if (!p) {
          if (stop(p.error())) break;
          continue;
        }
        if (auto st = upstream->deallocate(*p, bytes); !st && stop(st)) break;
        auto q = resource->allocate(bytes);
        if (!q) {
          if (stop(q.error())) break;
          continue;
        }
        if (auto st = resource->deallocate(*q, bytes); !st && stop(st)) break;
      }
    }).detach();
  }
  while (started->load() < workers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Let the workers get going so exit finds them inside device calls.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// --- exit/early-reset ---------------------------------------------------------------------------
// Arrange: a pool over the device with blocks on two streams (so it holds per-stream events) and
//   some blocks still live. Inject: the device's context is reset under the live pool (as a
//   library calling cuDevicePrimaryCtxReset would). Act: use the pool on fresh streams, return
//   the old blocks, destroy the pool.
// Check: no crash; the pool rebinds to the new context; the bytes of the old context are reported
//   as leaked (bytes_leaked_on_reset > 0), stale frees dropped (nothing of the old context left
//   live or free in the pool's books); invariants hold; no device call after teardown.
// Bug point bug/alloc/no-epoch-guard: the pool uses its old events and streams after the reset:
//   a SIGSEGV during the work, every run (the sim). On an H100 (records/gpu/2026-11-24.md) it is
//   detected in every run too, but not always as a crash: 7 of 10 died in cudaEventRecord or
//   cudaEventDestroy on a stale event, 3 failed allocation-after-reset (the driver answered the
//   stale handle with an error, which the pool passed on, rather than faulting).
void early_reset(context& ctx) {
  device::backend& dev = device::current();
  check_no_call_after_teardown(ctx, dev);
  alloc::device_resource upstream(dev);
  alloc::pool_resource pool(upstream, {.initial_size_bytes = 1 << 20, .device = 0, .backend = &dev});

  device::stream a = make_stream(ctx, dev);
  device::stream b = make_stream(ctx, dev);
  std::vector<std::pair<void*, std::size_t>> old_live;
  for (int i = 0; i < 32; ++i) {
    std::size_t bytes = ctx.random().between(256, 128 * 1024);
    auto p = pool.allocate(bytes, i % 2 == 0 ? a : b);
    ctx.require(p.has_value(), "allocation-served", p.error().to_string());
    if (i % 3 == 0) {
      old_live.emplace_back(*p, bytes);
    } else {
      ctx.check(pool.deallocate(*p, bytes, i % 2 == 0 ? a : b), "free-accepted");
    }
  }
  // Hand a block from a to b so the pool holds an event recorded on a.
  auto handed = pool.allocate(512, b);
  ctx.require(handed.has_value(), "allocation-served", handed.error().to_string());
  ctx.check(pool.deallocate(*handed, 512, b), "free-accepted");
  ctx.check(dev.synchronize_device(), "device-synchronised");

  ctx.note("injecting: reset of device 0's context under a live pool");
  ctx.require(dev.reset_context(0).is_ok(), "context-reset");

  device::stream c = make_stream(ctx, dev);
  device::stream d = make_stream(ctx, dev);
  // The owners of the old blocks give them back first (before the addresses can be handed out
  // again by the new context, after which an old pointer is indistinguishable from a double free).
  for (auto [ptr, bytes] : old_live) {
    ctx.check(pool.deallocate(ptr, bytes, c), "stale-free-accepted");
  }
  for (int i = 0; i < 32; ++i) {
    std::size_t bytes = ctx.random().between(256, 128 * 1024);
    device::stream s = i % 2 == 0 ? c : d;
    auto p = pool.allocate(bytes, s);
    ctx.require(p.has_value(), "allocation-after-reset", p.error().to_string());
    ctx.check(pool.deallocate(*p, bytes, i % 2 == 0 ? d : c), "free-after-reset");
  }
  ctx.check(pool.check_invariants(), "allocator-invariants");
  auto stats = pool.statistics();
  ctx.check(stats.context_resets_seen >= 1, "reset-observed", "the pool never noticed the reset");
  ctx.check(stats.bytes_leaked_on_reset > 0, "reset-leaks-reported",
            "the old context's memory was dropped without being reported");
  // The old blocks, given back before the pool noticed the reset (a free reads no epoch), went
  // to a free list that the first allocation after it dropped: none is live or free in the new
  // context's books, whose memory is all free again.
  ctx.check(stats.live_blocks == 0 && stats.free_bytes == stats.pool_bytes, "stale-frees-dropped",
            std::to_string(stats.live_blocks) + " blocks still live, " + std::to_string(stats.free_bytes) + " of " +
                std::to_string(stats.pool_bytes) + " pool bytes free after every block was given back");
  ctx.check(dev.synchronize_device(), "device-synchronised");
  ctx.check(pool.release(), "pool-released");
}

}  // namespace

void register_exit_scenarios(registry& r) {
  // The soak's fault space (harness/campaign/fault_space.h): device calls, the pool's growth and the
  // window between the runtime's unloading check and its work slowed at random. The fixed
  // allocator must survive every combination; the bug points are verify's.
  const std::vector<std::string> fault_space = {
      "sim/allocate=1..30%delay(1us..2ms)",
      "sim/free=1..30%delay(1us..2ms)",
      "sim/stream/op=1..30%delay(1us..2ms)",
      "sim/call/after-unloading-check=1..50%delay(1us..5ms)",
      "alloc/pool/grow=1..50%delay(1us..2ms)"};
  const auto add = family_adder(r, fault_space);
  add({.name = "exit/static-pool",
       .description = "per-device pool map destroyed at exit after the runtime teardown (RMM #2367)",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = static_pool,
       .bug_points = {{.point = "bug/alloc/no-exit-guard",
                       .faults = "bug/alloc/no-exit-guard=print",
                       .detect_rate = 0.95,
                       .expect = "fail at exit: device calls after teardown"}},
       .fault_space = fault_space_without(fault_space, "sim/free")});
  add({.name = "exit/thread-in-flight",
       .description = "threads inside device calls while the process exits (RMM #2367, 60% SIGSEGV)",
       .timeout_ms = 20000,
       .cpu_percent = 50,
       .run = thread_in_flight,
       .bug_points = {{.point = "bug/alloc/no-drain",
                       .faults = "bug/alloc/no-drain=print;sim/call/after-unloading-check=delay(20ms);"
                                 "sim/teardown/after-unmap=delay(100ms)",
                       .detect_rate = 0.95,
                       .expect = "crash at exit (SIGSEGV) or device calls after teardown"},
                      {.point = "bug/alloc/bounded-drain",
                       .faults = "bug/alloc/bounded-drain=print;alloc/device/call=delay(3s)",
                       .detect_rate = 0.95,
                       .expect = "fail at exit: no-call-in-flight-at-teardown (the drain gave up on 3 s calls)"}},
       // Slow device calls at exit (a loaded GPU): the drain must outwait them.
       .fault_space = [&] {
         auto space = fault_space_without(fault_space, "sim/stream/op");
         space.push_back("alloc/device/call=1..10%delay(1us..2500ms)");
         return space;
       }()});
  add({.name = "exit/early-reset",
       .description = "device context reset under a live pool, then the pool is used and destroyed",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = early_reset,
       .bug_points = {{.point = "bug/alloc/no-epoch-guard",
                       .faults = "bug/alloc/no-epoch-guard=print",
                       .detect_rate = 0.95,
                       .expect = "crash during the work (SIGSEGV on a stale event)"}}});
}

}  // namespace faultline::scenarios
