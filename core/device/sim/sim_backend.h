// Controls specific to the simulated device backend `sim()` (DESIGN.md §4.3): its options, its
// exit-time teardown on demand, counters, and host functions queued on a stream.
//
// The sim is a device in host memory that fails the way real CUDA does. Its first call of any
// member initialises it and registers its teardown with atexit at that moment; after the
// teardown every call returns errc::runtime_unloading (and is counted). Each device's context
// (stream table, event table, allocation bookkeeping) lives in its own mapping; stream and event
// handles point into it. A context reset or the teardown stops and joins the context's worker
// threads, then replaces the mapping with a PROT_NONE reservation of the same range, so the
// address is never reused and a stale handle, or a call already past the teardown check, takes a
// real SIGSEGV. Device memory is an arena per device, host-addressable.
//
//   core::device::sim_options o;                     // or FAULTLINE_SIM_* in the environment
//   o.memory_bytes = std::size_t{256} << 20;
//   if (auto s = core::device::sim_configure(o); !s) return s;   // before the sim's first call
//   auto& dev = core::device::sim();
//   auto p = dev.allocate(4096);                      // std::memset(*p, 0, 4096) is fine
//   core::device::sim_teardown_now();                 // what exit() would do
//   dev.allocate(4096).code();                        // errc::runtime_unloading
//
// Environment, read once at the sim's first call unless sim_configure() ran before it:
//   FAULTLINE_SIM_DEVICES=N               device count, 1..16 (default 2)
//   FAULTLINE_SIM_MEMORY=BYTES[K|M|G]     arena per device, 1M..512G, binary suffixes (default 4G)
//   FAULTLINE_SIM_STRICT=0|1              poison freed device memory (default 0)
//   FAULTLINE_SIM_QUERY_LATENCY_MS=N      utilization() latency, 0..60000 (default 1)
// A malformed value is not a crash: the first call (and every later one) returns
// invalid_argument naming the variable and the value.
//
// Semantics beyond device.h:
// - Memory: 256-byte granules, two-level segregated fit with immediate coalescing; a freed range
//   is silently reused by later allocations, as on CUDA. The arena's address space is reserved
//   up front and committed in 64 MiB steps as allocations reach it.
// - Strict mode: a freed range's whole pages become PROT_NONE (a read-after-free faults) and its
//   bytes on pages shared with live blocks are filled with `sim_poison_byte`. A context reset
//   then decommits the arena, so any pointer into it faults until it is allocated again.
// - Streams: one worker thread per stream runs its ops in order; the default stream {nullptr}
//   is a real stream of the current device (no implicit synchronisation with other streams, like
//   cudaStreamPerThread). A stream queues at most 512 ops; a producer then waits for space.
//   destroy_stream() waits for the queued work, then joins the worker. Host functions (and fault
//   hooks on a worker) must not synchronise on their own stream.
// - Events capture a ticket (how many ops the stream had queued) instead of queueing an op, so
//   record and query are lock-free; query of a never-recorded event is ok, as on CUDA.
// - deallocate_async() takes a pointer of the stream's own device; the block stays allocated
//   (and counted as used) until the stream reaches the free.
// - A context reset frees every allocation of that context; the fresh context is created by the
//   next call on that device and keeps the epoch the reset set. Resetting a context that does
//   not exist is a no-op. device_count, set_device, current_device and utilization need no
//   context and so never fault. Threads blocked in a synchronise call are released with
//   errc::context_reset (errc::runtime_unloading at teardown); calls that start later on stale
//   handles fault.
// - Teardown abandons queued ops that have not started; an op already running finishes first.
//
// Fault points (FAULTLINE_POINT; see core/points/point.h):
//   sim/call/after-unloading-check  every call, between the teardown check and the first
//                                   dereference of context pages (the race window; fail(code)
//                                   makes the call return an injected fault)
//   sim/allocate                    allocate(), allocate_async(): fail(code) -> injected fault
//   sim/free                        deallocate(), deallocate_async(): fail(code) -> injected
//                                   fault, nothing freed
//   sim/stream/op                   on the worker, before each queued op (delay widens it;
//                                   fail(code) drops the op, counted in ops_dropped)
//   sim/teardown/after-unmap        the teardown, after every context was unmapped (delay keeps
//                                   the process alive so calls in flight reach the dead pages)
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/device/device.h"
#include "core/status.h"

namespace faultline::core::device {

/// The byte strict mode writes over freed device memory that stays readable.
inline constexpr std::uint8_t sim_poison_byte = 0xDB;

/// The sim's configuration. Device count and memory are fixed at initialisation.
struct sim_options {
  int device_count = 2;                                  ///< 1..16
  std::size_t memory_bytes = std::size_t{4} << 30;       ///< per device; 1 MiB..512 GiB
  bool strict = false;                                   ///< poison freed device memory
  std::uint32_t query_latency_ms = 1;                    ///< utilization() latency, 0..60000
};

/// Options from FAULTLINE_SIM_* (defaults for unset variables). Errors: invalid_argument naming
/// the variable and its value. Reads the environment; does not touch the sim.
result<sim_options> sim_options_from_env() noexcept;

/// Parses a byte count: decimal digits with an optional K, M or G suffix (binary, any case),
/// e.g. "4096", "512M", "4G". Errors: invalid_argument (empty, junk, overflow).
result<std::size_t> sim_parse_bytes(std::string_view text) noexcept;

/// Sets the options the sim initialises with (overrides the environment). Only before the sim's
/// first call: afterwards errc::busy. Errors: invalid_argument for a value out of range.
status sim_configure(const sim_options& options) noexcept;

/// Switches strict mode for frees from now on (before initialisation: overrides the options).
void sim_set_strict(bool strict) noexcept;

/// Sets utilization()'s latency from now on (before initialisation: overrides the options).
void sim_set_query_latency_ms(std::uint32_t latency_ms) noexcept;

/// Runs the sim's teardown now, exactly as its atexit handler would: stops and joins every
/// worker, unmaps every context and arena (re-reserved PROT_NONE). Idempotent; the atexit
/// handler then does nothing. Irreversible for the process: run it in a child in tests.
void sim_teardown_now() noexcept;

/// Queues `fn(arg)` on `s` (cudaLaunchHostFunc): it runs on the stream's worker, ordered with the
/// stream's other ops. Useful as a "kernel" whose length a test controls. Errors: invalid_argument
/// (null fn, destroyed stream), runtime_unloading after teardown. A stale handle faults.
status sim_launch_host_func(stream s, void (*fn)(void*), void* arg) noexcept;

/// Process-wide counts since start (monotonic; never reset).
struct sim_counters {
  std::uint64_t calls_after_teardown = 0;  ///< calls answered runtime_unloading
  std::uint64_t contexts_created = 0;
  std::uint64_t context_resets = 0;
  std::uint64_t streams_created = 0;       ///< default streams included
  std::uint64_t allocations = 0;           ///< successful, sync and async
  std::uint64_t deallocations = 0;         ///< blocks returned to an arena
  std::uint64_t ops_executed = 0;          ///< stream ops run by workers
  std::uint64_t ops_dropped = 0;           ///< stream ops dropped by an injected sim/stream/op
};

/// A snapshot of the counters. Never initialises the sim and is not a device call.
sim_counters sim_get_counters() noexcept;

}  // namespace faultline::core::device
