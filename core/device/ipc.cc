#include "core/device/ipc.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/device/detail/ipc_bytes.h"
#include "core/device/detail/ipc_registry.h"
#include "core/device/sim/sim_backend.h"
#include "core/points/point.h"

namespace faultline::core::device::ipc {

static_assert(sizeof(handle) == 144 && offsetof(handle, checksum) == 136,
              "handle must stay a fixed, padding-free layout: its bytes are its wire format");

namespace {

constexpr std::string_view text_prefix = "flipc1:";
constexpr std::size_t min_pool_bytes = 1024;
constexpr std::size_t max_pool_bytes = std::size_t{64} << 30;

status invalid(std::string message) { return status(errc::invalid_argument, std::move(message)); }

status unloading(std::string_view what) {
  return status(errc::runtime_unloading, "ipc: " + std::string(what) + " after the device runtime's teardown");
}

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Unique, not random: nothing a run's outcome depends on reads it.
std::uint64_t new_pool_id() noexcept {
  static std::atomic<std::uint64_t> counter{0};
  const detail::process_identity self = detail::self_identity();
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::uint64_t id = mix(mix(static_cast<std::uint64_t>(self.pid) << 32 ^ self.start_time) ^
                               mix(now) ^ counter.fetch_add(1, std::memory_order_relaxed));
  return id == 0 ? 1 : id;
}

// The publication rule of export_handle and reexport: the handle exists only once `ready` has
// completed. bug/ipc/dropped-event-wait re-creates numba-cuda #930: the pre-fix code asked
// whether the work was done and dropped the answer.
status wait_ready(backend& dev, event ready) noexcept {
  if (!ready) return {};
  if (FAULTLINE_BUG("bug/ipc/dropped-event-wait")) {
    (void)dev.query_event(ready);
    return {};
  }
  return dev.synchronize_event(ready);
}

void fill_source(handle& h, const detail::process_identity& self) noexcept {
  h.source_pid = self.pid;
  h.source_ns_pid = self.ns_pid;
  h.source_start = self.start_time;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string to_string(const handle& h) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(text_prefix);
  out.reserve(text_prefix.size() + 2 * sizeof(handle));
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  for (std::size_t i = 0; i < sizeof(handle); ++i) {
    out.push_back(digits[p[i] >> 4]);
    out.push_back(digits[p[i] & 15]);
  }
  return out;
}

result<handle> parse_handle(std::string_view text) noexcept {
  if (!text.starts_with(text_prefix)) return invalid("ipc: not a handle (expected the prefix 'flipc1:')");
  text.remove_prefix(text_prefix.size());
  if (text.size() != 2 * sizeof(handle)) {
    return invalid("ipc: a handle has " + std::to_string(2 * sizeof(handle)) + " hex digits after its prefix, got " +
                   std::to_string(text.size()));
  }
  handle h;
  auto* p = reinterpret_cast<unsigned char*>(&h);
  for (std::size_t i = 0; i < sizeof(handle); ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid("ipc: the handle has a non-hex digit at " + std::to_string(2 * i));
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  if (h.magic != handle_magic) return invalid("ipc: the handle's magic is wrong");
  if (h.version != handle_version) return invalid("ipc: handle version " + std::to_string(h.version) + " is unknown");
  if (h.checksum != detail::handle_checksum(h)) return invalid("ipc: the handle's checksum does not match (damaged)");
  if (h.backend != static_cast<std::uint8_t>(backend_kind::sim) && h.backend != static_cast<std::uint8_t>(backend_kind::cuda)) {
    return invalid("ipc: the handle names an unknown backend");
  }
  return h;
}

std::string describe(const std::vector<holder>& holders) {
  std::string out;
  for (const holder& h : holders) {
    if (!out.empty()) out += ", ";
    out += "pid " + std::to_string(h.pid);
    if (h.ns_pid != 0 && h.ns_pid != h.pid) out += " (pid " + std::to_string(h.ns_pid) + " in its namespace)";
    out += " (allocation " + std::to_string(h.allocation) + ")";
  }
  return out.empty() ? "nobody" : out;
}

// --- pool ------------------------------------------------------------------------------------

pool::pool(backend& dev, int device, std::size_t capacity, std::uint64_t id)
    : dev_(dev), device_(device), capacity_(capacity), id_(id) {}

result<std::unique_ptr<pool>> pool::create(backend& dev, const pool_options& options) noexcept {
  if (options.bytes < min_pool_bytes || options.bytes > max_pool_bytes) {
    return invalid("ipc: pool size " + std::to_string(options.bytes) + " is outside 1 KiB .. 64 GiB");
  }
  if (dev.state() == runtime_state::torn_down) return unloading("pool::create");
  auto count = dev.device_count();  // initialises the runtime, as any first device call does
  if (!count) return count.error();
  if (options.device < 0 || options.device >= *count) {
    return invalid("ipc: device " + std::to_string(options.device) + " does not exist (" + std::to_string(*count) +
                   " devices)");
  }
  const std::uint64_t id = new_pool_id();
  const bool sim = dev.kind() == backend_kind::sim;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t arena = sim ? (options.bytes + page - 1) / page * page : 0;
  auto reg = detail::registry::create(dev.kind(), options.device, id, arena);
  if (!reg) return reg.error();
  auto bytes = sim ? detail::sim_export((*reg)->fd(), detail::registry::arena_offset(), arena)
                   : detail::cuda_export(options.device, options.bytes);
  if (!bytes) return bytes.error();
  std::unique_ptr<pool> p(new pool(dev, options.device, options.bytes, id));
  p->registry_ = std::move(*reg);
  p->bytes_ = std::move(*bytes);
  return p;
}

pool::~pool() {
  if (closed_) return;
  if (dev_.state() != runtime_state::torn_down && close(std::chrono::milliseconds::zero())) return;
  // Importers remain (or the runtime is gone): free nothing they may read, make no device call.
  std::lock_guard lock(mu_);
  if (bytes_) bytes_->abandon();
  bytes_.reset();
  registry_.reset();
  closed_ = true;
}

result<void*> pool::allocate(std::size_t bytes) noexcept {
  if (bytes == 0) return invalid("ipc: allocate of 0 bytes");
  std::lock_guard lock(mu_);
  if (closed_) return status(errc::refused, "ipc: the pool is closed");
  if (registry_->state() != detail::pool_state::open) return status(errc::refused, "ipc: the pool is closing");
  if (dev_.state() == runtime_state::torn_down) return unloading("pool::allocate");
  std::uint64_t offset = 0;
  auto p = bytes_->allocate(bytes, offset);
  if (!p) return p.error();
  auto slot = registry_->add_allocation(offset, bytes);
  if (!slot) {
    (void)bytes_->deallocate(*p);
    return slot.error();
  }
  allocations_.push_back({*p, *slot});
  return *p;
}

status pool::deallocate(void* ptr) noexcept {
  std::lock_guard lock(mu_);
  if (closed_) return status(errc::refused, "ipc: the pool is closed");
  for (auto it = allocations_.begin(); it != allocations_.end(); ++it) {
    if (it->ptr != ptr) continue;
    if (dev_.state() == runtime_state::torn_down) return unloading("pool::deallocate");
    if (auto s = registry_->remove_allocation(it->slot); !s) return s;
    const status freed = bytes_->deallocate(ptr);
    allocations_.erase(it);
    return freed;
  }
  return invalid("ipc: deallocate of a pointer that does not start an allocation of this pool");
}

result<handle> pool::export_handle(void* ptr, event ready) noexcept {
  // Outside the lock: the wait may be long, and it concerns the caller's stream, not the pool.
  if (auto s = wait_ready(dev_, ready); !s) return s;
  std::lock_guard lock(mu_);
  if (closed_) return status(errc::refused, "ipc: the pool is closed");
  if (registry_->state() != detail::pool_state::open) return status(errc::refused, "ipc: the pool is closing");
  for (const allocation_entry& a : allocations_) {
    if (a.ptr != ptr) continue;
    const detail::allocation_record& rec = registry_->header().allocations[a.slot];
    handle h;
    h.magic = handle_magic;
    h.version = handle_version;
    h.backend = static_cast<std::uint8_t>(dev_.kind());
    h.pool_id = id_;
    fill_source(h, detail::self_identity());
    h.registry_fd = registry_->fd();
    h.allocation = a.slot;
    h.device = device_;
    h.generation = rec.generation.load(std::memory_order_acquire);
    h.offset = rec.offset;
    h.bytes = rec.bytes;
    if (auto s = bytes_->describe(ptr, h); !s) return s;
    h.checksum = detail::handle_checksum(h);
    return h;
  }
  return invalid("ipc: export of a pointer that does not start an allocation of this pool");
}

result<std::vector<holder>> pool::holders() noexcept {
  std::lock_guard lock(mu_);
  if (closed_) return status(errc::refused, "ipc: the pool is closed");
  return registry_->holders();
}

status pool::close(std::chrono::milliseconds timeout) noexcept {
  std::lock_guard lock(mu_);
  if (closed_) return {};
  registry_->begin_close();
  if (auto s = registry_->wait_for_importers(timeout); !s) return s;
  for (const allocation_entry& a : allocations_) registry_->drop_allocation(a.slot);
  allocations_.clear();
  status freed;
  if (dev_.state() == runtime_state::torn_down) {
    bytes_->abandon();  // no device call after teardown; the process is ending anyway
  } else {
    freed = bytes_->destroy();
  }
  registry_->mark_closed();
  bytes_.reset();
  registry_.reset();
  closed_ = true;
  if (!freed) return status(freed.code(), "ipc: " + detail::pool_name(id_) + " closed, but freeing it failed: " + freed.message());
  return {};
}

// --- mapping ---------------------------------------------------------------------------------

mapping::mapping(backend& dev, const handle& h) : dev_(dev), handle_(h) {}

mapping::~mapping() { (void)close(); }

void* mapping::data() const noexcept { return bytes_ ? bytes_->data() : nullptr; }

result<handle> mapping::reexport(event ready) noexcept {
  if (auto s = wait_ready(dev_, ready); !s) return s;
  std::lock_guard lock(mu_);
  if (closed_) return status(errc::refused, "ipc: re-export of a closed mapping");
  if (const auto st = registry_->state(); st != detail::pool_state::open) {
    return status(errc::refused, st == detail::pool_state::closed ? "ipc: the pool is closed" : "ipc: the pool is closing");
  }
  handle h = handle_;
  fill_source(h, detail::self_identity());
  h.registry_fd = registry_->fd();
  h.memory_fd = bytes_->memory_fd();
  h.checksum = detail::handle_checksum(h);
  return h;
}

status mapping::close() noexcept {
  std::lock_guard lock(mu_);
  if (closed_) return {};
  closed_ = true;
  status released;
  // Past the runtime's teardown the device mapping died with it: only the slot is left to free.
  if (bytes_ && dev_.state() != runtime_state::torn_down) released = bytes_->release();
  bytes_.reset();
  registry_->unregister_importer(slot_);  // after the bytes: wakes a closer only when truly done
  registry_.reset();
  return released;
}

result<std::unique_ptr<mapping>> open_import(backend& dev, const handle& h) noexcept {
  if (h.magic != handle_magic || h.version != handle_version || h.checksum != detail::handle_checksum(h)) {
    return invalid("ipc: not a valid handle (magic, version or checksum)");
  }
  if (h.backend != static_cast<std::uint8_t>(dev.kind())) {
    return invalid("ipc: the handle was exported by the " +
                   std::string(h.backend == static_cast<std::uint8_t>(backend_kind::sim) ? "sim" : "cuda") +
                   " backend; this process runs " + std::string(dev.name()));
  }
  if (h.bytes == 0 || h.offset > UINT64_MAX - h.bytes) return invalid("ipc: the handle's range is malformed");
  if (dev.state() == runtime_state::torn_down) return unloading("open_import");
  if (dev.kind() == backend_kind::cuda) {
    // Initialise the runtime the way every first device call does, before anything is mapped.
    if (auto n = dev.device_count(); !n) return n.error();
  }
  auto fd = detail::fetch_descriptor(h, h.registry_fd, /*prefer_pidfd=*/false);
  if (!fd) return fd.error();
  auto reg = detail::registry::attach(*fd, h);
  if (!reg) return reg.error();
  auto slot = (*reg)->register_importer(h.allocation, h.generation);
  if (!slot) return slot.error();
  std::unique_ptr<mapping> m(new mapping(dev, h));
  m->slot_ = *slot;
  m->registry_ = std::move(*reg);
  auto fail = [&m](status s) -> result<std::unique_ptr<mapping>> {
    m->registry_->unregister_importer(m->slot_);
    m->registry_.reset();
    m->closed_ = true;
    return s;
  };
  // The table is the authority on what the allocation is; a handle that disagrees is forged or
  // damaged, and is not allowed to map anything else.
  const detail::registry_header& hdr = m->registry_->header();
  const detail::allocation_record& rec = hdr.allocations[h.allocation];
  if (rec.offset != h.offset || rec.bytes != h.bytes) {
    return fail(invalid("ipc: the handle's range (offset " + std::to_string(h.offset) + ", " + std::to_string(h.bytes) +
                        " bytes) is not the allocation it names"));
  }
  result<std::unique_ptr<detail::imported_bytes>> bytes = status(errc::internal, "unset");
  if (dev.kind() == backend_kind::sim) {
    if (h.offset + h.bytes > hdr.arena_bytes) return fail(invalid("ipc: the handle's range lies outside the arena"));
    bytes = detail::sim_import(m->registry_->fd(), hdr.arena_offset, h);
  } else {
    bytes = detail::cuda_import(h);
  }
  if (!bytes) return fail(bytes.error());
  m->bytes_ = std::move(*bytes);
  return m;
}

status launch_host_sleep(backend& dev, stream s, std::chrono::milliseconds duration) noexcept {
  if (duration.count() < 0) return invalid("ipc: launch_host_sleep of a negative duration");
  void (*fn)(void*) = [](void* arg) {
    std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<std::uintptr_t>(arg)));
  };
  void* arg = reinterpret_cast<void*>(static_cast<std::uintptr_t>(duration.count()));
  if (dev.kind() == backend_kind::sim) return sim_launch_host_func(s, fn, arg);
  return detail::cuda_launch_host_func(s, fn, arg);
}

status launch_host_gate(backend& dev, stream s, host_gate* gate) noexcept {
  if (gate == nullptr || gate->bound.count() < 0) return invalid("ipc: launch_host_gate needs a gate with a non-negative bound");
  void (*fn)(void*) = [](void* arg) {
    auto* g = static_cast<host_gate*>(arg);
    const auto until = std::chrono::steady_clock::now() + g->bound;
    while (!g->open.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  if (dev.kind() == backend_kind::sim) return sim_launch_host_func(s, fn, gate);
  return detail::cuda_launch_host_func(s, fn, gate);
}

}  // namespace faultline::core::device::ipc
