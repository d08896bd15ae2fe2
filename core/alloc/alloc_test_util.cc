#include "core/alloc/alloc_test_util.h"

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/points/point.h"

namespace faultline::core::alloc::testing {

// --- recording_backend ------------------------------------------------------------------------

void recording_backend::log(recorded_call c) {
  std::lock_guard lock(mu_);
  calls_.push_back(std::move(c));
}

std::vector<recorded_call> recording_backend::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

void recording_backend::clear() {
  std::lock_guard lock(mu_);
  calls_.clear();
}

std::size_t recording_backend::count(const std::string& name) const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& c : calls_) n += c.name == name ? 1 : 0;
  return n;
}

result<void*> recording_backend::allocate(std::size_t bytes) noexcept {
  log({"allocate", nullptr, nullptr, bytes});
  if (block_allocate.load()) {
    allocate_blocked.store(true);
    while (block_allocate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return inner_.allocate(bytes);
}

status recording_backend::deallocate(void* ptr) noexcept {
  log({"deallocate", nullptr, nullptr, 0});
  return inner_.deallocate(ptr);
}

result<void*> recording_backend::allocate_async(std::size_t bytes, device::stream s) noexcept {
  log({"allocate_async", s.native, nullptr, bytes});
  return inner_.allocate_async(bytes, s);
}

status recording_backend::deallocate_async(void* ptr, device::stream s) noexcept {
  log({"deallocate_async", s.native, nullptr, 0});
  return inner_.deallocate_async(ptr, s);
}

status recording_backend::synchronize_stream(device::stream s) noexcept {
  log({"synchronize_stream", s.native, nullptr, 0});
  return inner_.synchronize_stream(s);
}

status recording_backend::synchronize_device() noexcept {
  log({"synchronize_device", nullptr, nullptr, 0});
  return inner_.synchronize_device();
}

result<device::event> recording_backend::create_event() noexcept {
  auto e = inner_.create_event();
  log({"create_event", nullptr, e ? e->native : nullptr, 0});
  return e;
}

status recording_backend::destroy_event(device::event e) noexcept {
  log({"destroy_event", nullptr, e.native, 0});
  return inner_.destroy_event(e);
}

status recording_backend::record_event(device::event e, device::stream s) noexcept {
  log({"record_event", s.native, e.native, 0});
  return inner_.record_event(e, s);
}

status recording_backend::stream_wait_event(device::stream s, device::event e) noexcept {
  log({"stream_wait_event", s.native, e.native, 0});
  return inner_.stream_wait_event(s, e);
}

// --- test_upstream ----------------------------------------------------------------------------

test_upstream::~test_upstream() {
  if (arena_ != nullptr) (void)backend_.deallocate(arena_);
}

std::vector<std::size_t> test_upstream::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

std::vector<std::size_t> test_upstream::granted() const {
  std::lock_guard lock(mu_);
  return granted_;
}

std::size_t test_upstream::deallocations() const {
  std::lock_guard lock(mu_);
  return deallocations_;
}

std::size_t test_upstream::live_bytes() const {
  std::lock_guard lock(mu_);
  return live_bytes_;
}

result<void*> test_upstream::do_allocate(std::size_t bytes, device::stream /*s*/) noexcept {
  std::lock_guard lock(mu_);
  requests_.push_back(bytes);
  const std::size_t limit = refuse_above_bytes.load();
  if (limit != 0 && bytes > limit) {
    return status(errc::out_of_memory, "test_upstream: refusing " + std::to_string(bytes) + " bytes");
  }
  void* p = nullptr;
  if (adjacent_arena_bytes > 0) {
    if (arena_ == nullptr) {
      auto a = backend_.allocate(adjacent_arena_bytes);
      if (!a) return a.error();
      arena_ = *a;
    }
    if (arena_used_ + bytes > adjacent_arena_bytes) {
      return status(errc::out_of_memory, "test_upstream: arena exhausted");
    }
    p = static_cast<char*>(arena_) + arena_used_;
    arena_used_ += bytes;
  } else {
    auto a = backend_.allocate(bytes);
    if (!a) return a.error();
    p = *a;
  }
  granted_.push_back(bytes);
  live_bytes_ += bytes;
  return p;
}

status test_upstream::do_deallocate(void* ptr, std::size_t bytes, device::stream /*s*/) noexcept {
  std::lock_guard lock(mu_);
  if (fail_deallocate.load()) return status(errc::internal, "test_upstream: deallocate fails on purpose");
  ++deallocations_;
  live_bytes_ -= bytes;
  if (adjacent_arena_bytes > 0) return status::ok();  // slices go back with the arena
  return backend_.deallocate(ptr);
}

// --- fault-point rules ------------------------------------------------------------------------

namespace {

struct rule {
  std::atomic<const char*> name{nullptr};
  int code = 0;
  int delay_ms = 0;
  bool marked_only = false;
  std::atomic<int> remaining{0};
  std::atomic<int> fired{0};
};

std::array<rule, 8> rules;
thread_local bool thread_marked = false;

points::outcome hook(const char* name) noexcept {
  for (auto& r : rules) {
    const char* n = r.name.load(std::memory_order_acquire);
    if (n == nullptr || std::strcmp(n, name) != 0) continue;
    if (r.marked_only && !thread_marked) continue;
    int left = r.remaining.load();
    // -1 means unlimited; otherwise take one of the remaining shots.
    while (left != -1) {
      if (left == 0) return {};
      if (r.remaining.compare_exchange_weak(left, left - 1)) break;
    }
    r.fired.fetch_add(1);
    if (r.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
    return {true, r.code};
  }
  return {};
}

}  // namespace

void arm_point(const char* name, int code, int delay_ms, int times, bool marked_threads_only) {
  for (auto& r : rules) {
    if (r.name.load() != nullptr) continue;
    r.code = code;
    r.delay_ms = delay_ms;
    r.marked_only = marked_threads_only;
    r.remaining.store(times);
    r.fired.store(0);
    r.name.store(name, std::memory_order_release);
    points::install_hook(&hook);
    points::set_armed(true);
    return;
  }
}

void mark_this_thread() { thread_marked = true; }

int fired_count(const char* name) {
  for (auto& r : rules) {
    const char* n = r.name.load();
    if (n != nullptr && std::strcmp(n, name) == 0) return r.fired.load();
  }
  return 0;
}

void disarm_points() {
  points::set_armed(false);
  for (auto& r : rules) r.name.store(nullptr);
}

// --- seeded_rng -------------------------------------------------------------------------------

std::uint64_t seeded_rng::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t seeded_rng::between(std::uint64_t lo, std::uint64_t hi) {
  const std::uint64_t span = hi - lo + 1;
  return lo + (((next() >> 32) * span) >> 32);
}

}  // namespace faultline::core::alloc::testing
