#include "core/device/sim/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "core/device/sim/detail/context.h"
#include "core/points/point.h"

namespace faultline::core::device {

namespace detail {

namespace {

constinit shared_state g_shared;

thread_local int tl_device = 0;

constexpr std::size_t min_memory_bytes = std::size_t{1} << 20;
constexpr std::size_t max_memory_bytes = std::size_t{512} << 30;
constexpr std::uint32_t max_latency_ms = 60000;
constexpr std::uint64_t ticket_mask = (std::uint64_t{1} << 48) - 1;

status invalid(std::string message) { return status(errc::invalid_argument, std::move(message)); }

status check_options(const sim_options& o) {
  if (o.device_count < 1 || o.device_count > max_devices) {
    return invalid("sim: device_count " + std::to_string(o.device_count) + " is outside 1.." +
                   std::to_string(max_devices));
  }
  if (o.memory_bytes < min_memory_bytes || o.memory_bytes > max_memory_bytes) {
    return invalid("sim: memory_bytes " + std::to_string(o.memory_bytes) + " is outside 1M..512G");
  }
  if (o.query_latency_ms > max_latency_ms) {
    return invalid("sim: query_latency_ms " + std::to_string(o.query_latency_ms) + " is above 60000");
  }
  return {};
}

std::optional<std::uint64_t> parse_uint(std::string_view text) noexcept {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The process's one sim. Placed in static storage and never destroyed, so it outlives every
// static destructor and atexit handler that may still call it.
class sim_backend final : public backend {
 public:
  [[nodiscard]] backend_kind kind() const noexcept override { return backend_kind::sim; }
  [[nodiscard]] std::string_view name() const noexcept override { return "sim"; }

  result<int> device_count() noexcept override {
    if (auto s = enter(); !s) return s;
    return device_count_;
  }

  status set_device(int device) noexcept override {
    if (auto s = enter(); !s) return s;
    if (auto s = check_device(device); !s) return s;
    tl_device = device;
    return {};
  }

  result<int> current_device() noexcept override {
    if (auto s = enter(); !s) return s;
    return tl_device;
  }

  result<memory_info> memory(int device) noexcept override {
    if (auto s = enter(); !s) return s;
    if (auto s = check_device(device); !s) return s;
    auto c = context_of(device);
    if (!c) return c.error();
    std::lock_guard g((*c)->alloc_mutex);
    const std::size_t total = devices_[device].arena_bytes;
    return memory_info{total - (*c)->blocks.granules_in_use() * granule_bytes, total};
  }

  result<int> utilization(int device) noexcept override {
    if (auto s = enter(); !s) return s;
    if (auto s = check_device(device); !s) return s;
    if (const std::uint32_t ms = shared().query_latency_ms.load(std::memory_order_relaxed); ms != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    device_state& dev = devices_[device];
    std::lock_guard g(dev.util_mutex);
    const std::uint64_t now = now_ns();
    const std::uint64_t busy = dev.busy_ns.load(std::memory_order_relaxed);
    const std::uint64_t wall = now - dev.util_wall_ns;
    const std::uint64_t spent = busy - dev.util_busy_ns;
    dev.util_wall_ns = now;
    dev.util_busy_ns = busy;
    return wall == 0 ? 0 : static_cast<int>(std::min<std::uint64_t>(100, spent * 100 / wall));
  }

  result<void*> allocate(std::size_t bytes) noexcept override {
    if (auto s = enter(); !s) return s;
    auto c = context_of(tl_device);
    if (!c) return c.error();
    if (bytes == 0) return invalid("sim: allocate of 0 bytes");
    if (const int code = FAULTLINE_POINT("sim/allocate")) return status::injected_fault("sim/allocate", code);
    return allocate_bytes(**c, bytes);
  }

  status deallocate(void* ptr) noexcept override {
    if (auto s = enter(); !s) return s;
    if (ptr == nullptr) return {};
    device_state* dev = owner_of(ptr);
    if (dev == nullptr) return invalid("sim: deallocate of a pointer that is not sim device memory");
    auto c = context_of(dev->index);
    if (!c) return c.error();
    if (const int code = FAULTLINE_POINT("sim/free")) return status::injected_fault("sim/free", code);
    if (auto s = synchronize_context(**c); !s) return s;
    return free_now(**c, ptr);
  }

  result<void*> allocate_async(std::size_t bytes, stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    if (bytes == 0) return invalid("sim: allocate_async of 0 bytes");
    if (const int code = FAULTLINE_POINT("sim/allocate")) return status::injected_fault("sim/allocate", code);
    // Memory is taken now; work queued on the stream afterwards can use it, which is all
    // stream ordering promises.
    return allocate_bytes(*(*slot)->ctx, bytes);
  }

  status deallocate_async(void* ptr, stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    if (ptr == nullptr) return {};
    if (const int code = FAULTLINE_POINT("sim/free")) return status::injected_fault("sim/free", code);
    if (auto st = mark_free_pending(*(*slot)->ctx, ptr); !st) return st;
    op o{};
    o.kind = op_kind::free;
    o.dst = ptr;
    return enqueue(**slot, o);
  }

  status copy_async(void* dst, const void* src, std::size_t bytes, stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    if (bytes == 0) return {};
    if (dst == nullptr || src == nullptr) return invalid("sim: copy_async with a null pointer");
    op o{};
    o.kind = op_kind::copy;
    o.dst = dst;
    o.src = src;
    o.bytes = bytes;
    return enqueue(**slot, o);
  }

  status fill_async(void* dst, int value, std::size_t bytes, stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    if (bytes == 0) return {};
    if (dst == nullptr) return invalid("sim: fill_async with a null pointer");
    op o{};
    o.kind = op_kind::fill;
    o.dst = dst;
    o.value = value & 0xff;
    o.bytes = bytes;
    return enqueue(**slot, o);
  }

  result<stream> create_stream() noexcept override {
    if (auto s = enter(); !s) return s;
    auto c = context_of(tl_device);
    if (!c) return c.error();
    auto slot = open_stream(**c);
    if (!slot) return slot.error();
    return stream{*slot};
  }

  status destroy_stream(stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    if (s.native == nullptr) return invalid("sim: the default stream cannot be destroyed");
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    return close_stream(**slot);
  }

  status synchronize_stream(stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    return wait_ticket(**slot, (*slot)->enqueued.load(std::memory_order_acquire));
  }

  status synchronize_device() noexcept override {
    if (auto s = enter(); !s) return s;
    auto c = context_of(tl_device);
    if (!c) return c.error();
    return synchronize_context(**c);
  }

  result<event> create_event() noexcept override {
    if (auto s = enter(); !s) return s;
    auto c = context_of(tl_device);
    if (!c) return c.error();
    auto slot = open_event(**c);
    if (!slot) return slot.error();
    return event{*slot};
  }

  status destroy_event(event e) noexcept override {
    if (auto s = enter(); !s) return s;
    auto slot = event_of(e);
    if (!slot) return slot.error();
    close_event(**slot);
    return {};
  }

  status record_event(event e, stream s) noexcept override {
    if (auto st = enter(); !st) return st;
    auto ev = event_of(e);
    if (!ev) return ev.error();
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    if ((*ev)->ctx != (*slot)->ctx) return invalid("sim: event and stream belong to different devices");
    // The event captures how many ops the stream has queued: it completes when that many have run.
    const std::uint64_t ticket = (*slot)->enqueued.load(std::memory_order_acquire);
    (*ev)->mark.store((std::uint64_t{(*slot)->index} + 1) << 48 | ticket, std::memory_order_release);
    return {};
  }

  status query_event(event e) noexcept override {
    if (auto s = enter(); !s) return s;
    auto ev = event_of(e);
    if (!ev) return ev.error();
    const std::uint64_t mark = (*ev)->mark.load(std::memory_order_acquire);
    if (mark == 0) return {};
    const stream_slot& t = (*ev)->ctx->streams[(mark >> 48) - 1];
    if (t.completed.load(std::memory_order_acquire) >= (mark & ticket_mask)) return {};
    return status(errc::not_ready, "work pending");  // short: no allocation on a polling path
  }

  status synchronize_event(event e) noexcept override {
    if (auto s = enter(); !s) return s;
    auto ev = event_of(e);
    if (!ev) return ev.error();
    const std::uint64_t mark = (*ev)->mark.load(std::memory_order_acquire);
    if (mark == 0) return {};
    return wait_ticket((*ev)->ctx->streams[(mark >> 48) - 1], mark & ticket_mask);
  }

  status stream_wait_event(stream s, event e) noexcept override {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    auto ev = event_of(e);
    if (!ev) return ev.error();
    const std::uint64_t mark = (*ev)->mark.load(std::memory_order_acquire);
    if (mark == 0) return {};
    op o{};
    o.kind = op_kind::wait;
    o.wait_on = &(*ev)->ctx->streams[(mark >> 48) - 1];
    o.ticket = mark & ticket_mask;
    return enqueue(**slot, o);
  }

  status reset_context(int device) noexcept override {
    if (auto s = enter(); !s) return s;
    if (auto s = check_device(device); !s) return s;
    std::lock_guard life(lifecycle_mutex_);
    device_state& dev = devices_[device];
    std::lock_guard create(dev.create_mutex);
    context* c = dev.ctx.load(std::memory_order_acquire);
    if (c == nullptr) return {};
    touch(*c);  // a teardown that won the lifecycle lock left dead pages here: fault, as in flight
    signal_stop(*c);
    join_workers(*c);
    kill_context(c);
    dev.ctx.store(nullptr, std::memory_order_release);
    if (shared().strict.load()) decommit_arena(dev);
    dev.epoch.fetch_add(1, std::memory_order_acq_rel);
    shared().context_resets.fetch_add(1, std::memory_order_relaxed);
    return {};
  }

  [[nodiscard]] std::uint64_t context_epoch(int device) const noexcept override {
    if (device < 0 || device >= max_devices) return 0;
    return devices_[device].epoch.load(std::memory_order_acquire);
  }

  [[nodiscard]] runtime_state state() const noexcept override {
    return shared().state.load(std::memory_order_acquire);
  }

  [[nodiscard]] std::uint64_t calls_after_teardown() const noexcept override {
    return shared().calls_after_teardown.load(std::memory_order_relaxed);
  }

  // --- sim controls ----------------------------------------------------------------------------

  status configure(const sim_options& o) noexcept {
    if (auto s = check_options(o); !s) return s;
    std::lock_guard g(lifecycle_mutex_);
    if (shared().state.load() != runtime_state::uninitialized) {
      return status(errc::busy, "sim: already initialised; sim_configure must run before the sim's first call");
    }
    options_ = o;
    configured_ = true;
    init_error_ = status{};
    return {};
  }

  void set_strict(bool on) noexcept {
    std::lock_guard g(lifecycle_mutex_);
    strict_override_ = on;
    shared().strict.store(on);
  }

  void set_query_latency_ms(std::uint32_t ms) noexcept {
    std::lock_guard g(lifecycle_mutex_);
    latency_override_ = ms;
    shared().query_latency_ms.store(ms);
  }

  void teardown() noexcept {
    std::lock_guard life(lifecycle_mutex_);
    shared_state& sh = shared();
    if (sh.state.load() == runtime_state::torn_down) return;
    sh.state.store(runtime_state::torn_down);
    // Calls already past the teardown check may be about to create a context: hold every
    // device's creation lock so they find dead pages (or the tombstone) instead.
    std::unique_lock<std::mutex> held[max_devices];
    context* live[max_devices] = {};
    for (int d = 0; d < device_count_; ++d) {
      held[d] = std::unique_lock(devices_[d].create_mutex);
      live[d] = devices_[d].ctx.load(std::memory_order_acquire);
    }
    // All contexts stop before any is joined: a wait op may block on another device's stream.
    for (int d = 0; d < device_count_; ++d) {
      if (live[d] != nullptr) signal_stop(*live[d]);
    }
    for (int d = 0; d < device_count_; ++d) {
      if (live[d] != nullptr) join_workers(*live[d]);
    }
    for (int d = 0; d < device_count_; ++d) {
      device_state& dev = devices_[d];
      if (live[d] != nullptr) {
        kill_context(live[d]);
      } else {
        dev.ctx.store(reinterpret_cast<context*>(tombstone_), std::memory_order_release);
      }
      reserve_none(dev.arena, dev.arena_bytes);
      dev.committed_bytes = 0;
    }
    for (auto& h : held) {
      if (h.owns_lock()) h.unlock();
    }
    // The real runtime's teardown takes a while after its state is gone; a delay here keeps the
    // process alive long enough for calls parked in the check-to-use window to reach dead pages.
    (void)FAULTLINE_POINT("sim/teardown/after-unmap");
  }

  status launch_host_func(stream s, void (*fn)(void*), void* arg) noexcept {
    if (auto st = enter(); !st) return st;
    auto slot = stream_of(s);
    if (!slot) return slot.error();
    if (fn == nullptr) return invalid("sim: launch_host_func with a null function");
    op o{};
    o.kind = op_kind::host_fn;
    o.fn = fn;
    o.arg = arg;
    return enqueue(**slot, o);
  }

  [[nodiscard]] sim_counters counters() const noexcept {
    const shared_state& sh = shared();
    sim_counters c;
    c.calls_after_teardown = sh.calls_after_teardown.load();
    c.contexts_created = sh.contexts_created.load();
    c.context_resets = sh.context_resets.load();
    c.streams_created = sh.streams_created.load();
    for (const device_state& d : devices_) {
      c.allocations += d.allocations.load();
      c.deallocations += d.deallocations.load();
      c.ops_executed += d.ops_executed.load();
      c.ops_dropped += d.ops_dropped.load();
    }
    return c;
  }

 private:
  static void teardown_at_exit();

  static status unloading() {
    shared().calls_after_teardown.fetch_add(1, std::memory_order_relaxed);
    return status(errc::runtime_unloading, "sim: device call after the runtime's teardown (process exit)");
  }

  static void touch(const context& c) noexcept {
    if (c.magic != context_magic) fatal("a device context's header is corrupt");
  }

  // Every call: the teardown check, then the window a race test widens, then (in the caller)
  // the first dereference of context pages. Nothing here closes the window.
  status enter() noexcept {
    const runtime_state st = shared().state.load(std::memory_order_acquire);
    if (st != runtime_state::running) [[unlikely]] {
      if (st == runtime_state::torn_down) return unloading();
      if (auto s = initialize(); !s) return s;
    }
    if (const int code = FAULTLINE_POINT("sim/call/after-unloading-check")) {
      return status::injected_fault("sim/call/after-unloading-check", code);
    }
    return {};
  }

  status initialize() noexcept {
    std::lock_guard g(lifecycle_mutex_);
    shared_state& sh = shared();
    const runtime_state st = sh.state.load();
    if (st == runtime_state::running) return {};
    if (st == runtime_state::torn_down) return unloading();
    if (!init_error_.is_ok()) return init_error_;
    sim_options o = options_;
    if (!configured_) {
      auto env = sim_options_from_env();
      if (!env) return init_error_ = env.error();
      o = *env;
    }
    if (strict_override_) o.strict = *strict_override_;
    if (latency_override_) o.query_latency_ms = *latency_override_;
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    o.memory_bytes = o.memory_bytes / page * page;
    tombstone_ = reserve_fresh(page);
    if (tombstone_ == nullptr) return init_error_ = status::from_errno(errno, "sim: reserve a page");
    const std::uint64_t now = now_ns();
    for (int d = 0; d < o.device_count; ++d) {
      device_state& dev = devices_[d];
      dev.arena = reserve_fresh(o.memory_bytes);
      if (dev.arena == nullptr) {
        init_error_ = status(errc::out_of_memory, "sim: cannot reserve " + std::to_string(o.memory_bytes) +
                                                      " bytes of address space for device " + std::to_string(d));
        for (int u = 0; u < d; ++u) munmap(devices_[u].arena, devices_[u].arena_bytes);
        return init_error_;
      }
      dev.index = d;
      dev.arena_bytes = o.memory_bytes;
      dev.util_wall_ns = now;
    }
    options_ = o;
    device_count_ = o.device_count;
    sh.strict.store(o.strict);
    sh.query_latency_ms.store(o.query_latency_ms);
    // As cudart does: the teardown is registered by the first call, so handlers registered
    // earlier run after it and handlers registered later run before it.
    if (std::atexit(teardown_at_exit) != 0) return init_error_ = status(errc::internal, "sim: atexit failed");
    sh.state.store(runtime_state::running, std::memory_order_release);
    return {};
  }

  [[nodiscard]] status check_device(int device) const {
    if (device >= 0 && device < device_count_) return {};
    return invalid("sim: device " + std::to_string(device) + " does not exist (" + std::to_string(device_count_) +
                   " devices)");
  }

  result<context*> context_of(int device) noexcept {
    device_state& dev = devices_[device];
    context* c = dev.ctx.load(std::memory_order_acquire);
    if (c == nullptr) [[unlikely]] {
      std::lock_guard g(dev.create_mutex);
      c = dev.ctx.load(std::memory_order_acquire);
      if (c == nullptr) {
        auto created = create_context(dev);
        if (!created) return created.error();
        c = *created;
        if (dev.epoch.load() == 0) dev.epoch.store(1);
        dev.ctx.store(c, std::memory_order_release);
      }
    }
    touch(*c);  // faults when the context was torn down under a call in flight
    return c;
  }

  result<stream_slot*> stream_of(stream s) noexcept {
    if (s.native == nullptr) {
      auto c = context_of(tl_device);
      if (!c) return c.error();
      return &(*c)->streams[0];
    }
    auto* slot = static_cast<stream_slot*>(s.native);
    const std::uint32_t magic = slot->magic.load(std::memory_order_acquire);  // faults when stale
    if (magic == stream_magic) return slot;
    return invalid(magic == free_magic ? "sim: stream was destroyed" : "sim: not a stream handle");
  }

  static result<event_slot*> event_of(event e) noexcept {
    if (!e) return invalid("sim: null event");
    auto* slot = static_cast<event_slot*>(e.native);
    const std::uint32_t magic = slot->magic.load(std::memory_order_acquire);  // faults when stale
    if (magic == event_magic) return slot;
    return invalid(magic == free_magic ? "sim: event was destroyed" : "sim: not an event handle");
  }

  device_state* owner_of(const void* ptr) noexcept {
    const auto* p = static_cast<const std::byte*>(ptr);
    for (int d = 0; d < device_count_; ++d) {
      if (p >= devices_[d].arena && p < devices_[d].arena + devices_[d].arena_bytes) return &devices_[d];
    }
    return nullptr;
  }

  std::mutex lifecycle_mutex_;  // initialisation, configuration, resets, teardown
  sim_options options_;
  bool configured_ = false;
  std::optional<bool> strict_override_;
  std::optional<std::uint32_t> latency_override_;
  status init_error_;
  int device_count_ = 0;  // written before state becomes running, read after
  std::byte* tombstone_ = nullptr;
  device_state devices_[max_devices];
};

alignas(sim_backend) unsigned char g_storage[sizeof(sim_backend)];

sim_backend& instance() noexcept {
  static sim_backend* const the_sim = new (g_storage) sim_backend();
  return *the_sim;
}

void sim_backend::teardown_at_exit() { instance().teardown(); }

}  // namespace

shared_state& shared() noexcept { return g_shared; }

}  // namespace detail

backend& sim() noexcept { return detail::instance(); }

result<std::size_t> sim_parse_bytes(std::string_view text) noexcept {
  std::string_view digits = text;
  unsigned shift = 0;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
  }
  if (shift != 0) digits.remove_suffix(1);
  const auto value = detail::parse_uint(digits);
  if (!value) {
    return detail::invalid("'" + std::string(text) + "': expected a byte count with an optional K, M or G suffix");
  }
  if (*value > (std::uint64_t{SIZE_MAX} >> shift)) return detail::invalid("'" + std::string(text) + "': too large");
  return static_cast<std::size_t>(*value << shift);
}

result<sim_options> sim_options_from_env() noexcept {
  sim_options o;
  auto bad = [](const char* name, const char* value, const char* expected) {
    return detail::invalid(std::string(name) + "='" + value + "': expected " + expected);
  };
  const auto set = [](const char* value) { return value != nullptr && *value != '\0'; };
  if (const char* v = std::getenv("FAULTLINE_SIM_DEVICES"); set(v)) {
    const auto n = detail::parse_uint(v);
    if (!n || *n < 1 || *n > detail::max_devices) return bad("FAULTLINE_SIM_DEVICES", v, "a device count from 1 to 16");
    o.device_count = static_cast<int>(*n);
  }
  if (const char* v = std::getenv("FAULTLINE_SIM_MEMORY"); set(v)) {
    const auto bytes = sim_parse_bytes(v);
    if (!bytes || *bytes < detail::min_memory_bytes || *bytes > detail::max_memory_bytes) {
      return bad("FAULTLINE_SIM_MEMORY", v, "bytes per device with an optional K, M or G suffix, 1M to 512G (e.g. 4G)");
    }
    o.memory_bytes = *bytes;
  }
  if (const char* v = std::getenv("FAULTLINE_SIM_STRICT"); set(v)) {
    const std::string_view s(v);
    if (s != "0" && s != "1") return bad("FAULTLINE_SIM_STRICT", v, "0 or 1");
    o.strict = s == "1";
  }
  if (const char* v = std::getenv("FAULTLINE_SIM_QUERY_LATENCY_MS"); set(v)) {
    const auto ms = detail::parse_uint(v);
    if (!ms || *ms > detail::max_latency_ms) return bad("FAULTLINE_SIM_QUERY_LATENCY_MS", v, "milliseconds from 0 to 60000");
    o.query_latency_ms = static_cast<std::uint32_t>(*ms);
  }
  return o;
}

status sim_configure(const sim_options& options) noexcept { return detail::instance().configure(options); }
void sim_set_strict(bool strict) noexcept { detail::instance().set_strict(strict); }
void sim_set_query_latency_ms(std::uint32_t latency_ms) noexcept { detail::instance().set_query_latency_ms(latency_ms); }
void sim_teardown_now() noexcept { detail::instance().teardown(); }
status sim_launch_host_func(stream s, void (*fn)(void*), void* arg) noexcept {
  return detail::instance().launch_host_func(s, fn, arg);
}
sim_counters sim_get_counters() noexcept { return detail::instance().counters(); }

}  // namespace faultline::core::device
