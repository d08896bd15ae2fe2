// The one interface every core component uses to talk to a device (DESIGN.md §4.1).
//
// Two backends implement it: `sim` (a simulated device in host memory that reproduces the
// failure semantics of real CUDA, always built) and `cuda` (the CUDA runtime and driver, built
// when the toolkit is found). `current()` returns the backend chosen by FAULTLINE_DEVICE
// (auto|sim|cuda; auto = cuda when a device answers, else sim).
//
//   auto& dev = core::device::current();
//   auto s = dev.create_stream();
//   auto p = dev.allocate_async(1 << 20, *s);
//   dev.deallocate_async(*p, *s);
//   dev.synchronize_stream(*s);
//
// Handles (`stream`, `event`) are opaque and belong to the device context they were created in.
// Using one after that context was reset is the bug class this project reproduces: the sim makes
// it a real SIGSEGV, as real CUDA does for events (DESIGN.md §13.2). Callers that must survive a
// reset compare `context_epoch()` before touching old handles.
//
// Every call after runtime teardown returns errc::runtime_unloading and is counted in
// `calls_after_teardown()`, so "a device call was made after teardown" is observable rather
// than inferred from a signal.
//
// Thread safety: every member may be called from any thread. Each call acts on the calling
// thread's current device (set_device), like the CUDA runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace faultline::core::device {

/// An ordered queue of device work. Opaque; `native` is the backend's handle
/// (a cudaStream_t, or a pointer into the sim's context pages). The default stream is {nullptr}.
struct stream {
  void* native = nullptr;
  friend bool operator==(stream a, stream b) noexcept { return a.native == b.native; }
};

/// A marker recorded into a stream. Opaque like `stream`.
struct event {
  void* native = nullptr;
  explicit operator bool() const noexcept { return native != nullptr; }
  friend bool operator==(event a, event b) noexcept { return a.native == b.native; }
};

enum class backend_kind { sim, cuda };

/// Where the device runtime is in its life: not yet initialised, running, or torn down
/// (its atexit teardown has run; every call now returns runtime_unloading).
enum class runtime_state { uninitialized, running, torn_down };

/// Free and total bytes of one device.
struct memory_info {
  std::size_t bytes_free = 0;
  std::size_t bytes_total = 0;
};

class backend {
 public:
  virtual ~backend() = default;

  [[nodiscard]] virtual backend_kind kind() const noexcept = 0;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;

  // --- devices -----------------------------------------------------------------------------
  /// Number of devices. The first call of any member initialises the runtime lazily, and the
  /// runtime registers its teardown with atexit at that moment (as cudart does).
  virtual result<int> device_count() noexcept = 0;
  /// Selects the calling thread's current device.
  virtual status set_device(int device) noexcept = 0;
  virtual result<int> current_device() noexcept = 0;
  /// Free and total bytes of `device` (the current device is left as it was).
  virtual result<memory_info> memory(int device) noexcept = 0;
  /// An NVML-style utilisation query (percent busy). Slow on purpose: milliseconds on real
  /// hardware, a configurable latency on the sim. Never call it under a lock.
  virtual result<int> utilization(int device) noexcept = 0;

  // --- memory ------------------------------------------------------------------------------
  /// Synchronous allocation on the current device (cudaMalloc). bytes == 0 is invalid_argument.
  virtual result<void*> allocate(std::size_t bytes) noexcept = 0;
  /// Synchronous free (cudaFree): waits for outstanding work on the device first.
  virtual status deallocate(void* ptr) noexcept = 0;
  /// Stream-ordered allocation (cudaMallocAsync): usable by work queued on `s` afterwards.
  virtual result<void*> allocate_async(std::size_t bytes, stream s) noexcept = 0;
  /// Stream-ordered free (cudaFreeAsync): released once work queued on `s` before it completes.
  virtual status deallocate_async(void* ptr, stream s) noexcept = 0;
  /// Copy `bytes` from `src` to `dst`, ordered on `s` (cudaMemcpyAsync with cudaMemcpyDefault:
  /// both backends address device memory with plain pointers, so one call covers every
  /// direction).
  virtual status copy_async(void* dst, const void* src, std::size_t bytes, stream s) noexcept = 0;
  /// Fill `bytes` at `dst` with `value`, ordered on `s`.
  virtual status fill_async(void* dst, int value, std::size_t bytes, stream s) noexcept = 0;

  // --- streams and events ------------------------------------------------------------------
  virtual result<stream> create_stream() noexcept = 0;
  /// Destroys a stream after its queued work completes.
  virtual status destroy_stream(stream s) noexcept = 0;
  /// Blocks until every operation queued on `s` has completed.
  virtual status synchronize_stream(stream s) noexcept = 0;
  /// Blocks until all work on the current device has completed.
  virtual status synchronize_device() noexcept = 0;
  virtual result<event> create_event() noexcept = 0;
  virtual status destroy_event(event e) noexcept = 0;
  /// Captures the work queued on `s` so far.
  virtual status record_event(event e, stream s) noexcept = 0;
  /// ok when the captured work is complete, errc::not_ready when not.
  virtual status query_event(event e) noexcept = 0;
  /// Blocks until the captured work is complete.
  virtual status synchronize_event(event e) noexcept = 0;
  /// Work queued on `s` after this call waits for `e` (cudaStreamWaitEvent).
  virtual status stream_wait_event(stream s, event e) noexcept = 0;

  // --- context and runtime lifetime --------------------------------------------------------
  /// Resets `device`'s primary context (cuDevicePrimaryCtxReset): every allocation, stream and
  /// event created in it becomes invalid. Handles kept by callers are now stale; the sim makes
  /// touching them a real SIGSEGV.
  virtual status reset_context(int device) noexcept = 0;
  /// A number that changes every time `device`'s context is reset (or first created).
  /// 0 means the context does not exist yet. Cheap; safe to call at any time, even after
  /// teardown (it then returns the last epoch and does not count as a device call).
  [[nodiscard]] virtual std::uint64_t context_epoch(int device) const noexcept = 0;
  [[nodiscard]] virtual runtime_state state() const noexcept = 0;
  /// How many calls were made after the runtime's teardown (each returned runtime_unloading).
  [[nodiscard]] virtual std::uint64_t calls_after_teardown() const noexcept = 0;
};

/// The process's backend, selected on first use from FAULTLINE_DEVICE. Fails with
/// invalid_argument naming the bad value, or unavailable when `cuda` is asked for and not
/// built or no device answers. The backend lives until process exit (never destroyed).
result<backend*> select_backend() noexcept;

/// The selected backend; aborts with the selection error's message if selection failed.
/// Use `select_backend()` where a bad FAULTLINE_DEVICE must be reported as an error value.
backend& current() noexcept;

/// Parses a FAULTLINE_DEVICE value ("auto", "sim", "cuda"); exposed for tests and the CLI.
enum class selection { automatic, sim, cuda };
result<selection> parse_selection(std::string_view text) noexcept;

/// The always-present simulated backend (one instance per process).
backend& sim() noexcept;
/// The CUDA backend, or unavailable when it was not built.
result<backend*> cuda() noexcept;

}  // namespace faultline::core::device
