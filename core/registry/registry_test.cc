// The instance registry against DESIGN.md §5.2: saves and loads move real bytes and catch a copy
// from the wrong memory by checksum; handles are checked against their generation; unregister
// refuses new work, drains what it accepted, joins within a bound (leaking rather than freeing
// under a running worker), releases only its own generation, and reports a worker failure after
// finishing its cleanup; concurrent unregisters share one owner's result; unregister_all leaves
// the registry empty. Each of the four bug points is shown to produce its historical symptom.
//
// Method: everything runs on the process's sim (FAULTLINE_SIM_STRICT unset: freed memory stays
// mapped, so "another client reused it" can be played by writing into it). Races are forced, not
// waited for: a tiny local hook (core/points) runs a callback at a named point, and callbacks
// hold a thread on a gate until the other side has reached its point. Every wait is bounded, so a
// broken build fails instead of hanging. Buffers come through a tracking adaptor, which is the
// independent witness that nothing leaked. The one SIGSEGV (a copy from unmapped memory, strict
// sim) runs in a death-test child.
#include "core/registry/registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/alloc/device_resource.h"
#include "core/alloc/tracking_adaptor.h"
#include "core/device/device.h"
#include "core/device/sim/sim_backend.h"
#include "core/points/point.h"

namespace faultline::core::registry {
namespace {

using namespace std::chrono_literals;
namespace points = faultline::points;

constexpr bool points_compiled_in = FAULTLINE_FAULTS_ENABLED;
constexpr auto bound = 10s;  // no correct run comes near it
constexpr std::size_t kib = 1024;

// --- a local fault hook: a callback per point name --------------------------------------------------

std::mutex g_hook_mu;
std::map<std::string, std::function<points::outcome()>, std::less<>> g_hooks;

points::outcome run_hook(const char* name) noexcept {
  std::function<points::outcome()> fn;
  {
    std::lock_guard g(g_hook_mu);
    auto it = g_hooks.find(std::string_view(name));
    if (it == g_hooks.end()) return {};
    fn = it->second;
  }
  return fn();
}

// Installs callbacks for the scope of a test; the test releases every thread it holds first.
class hooks {
 public:
  hooks() = default;
  hooks(const hooks&) = delete;
  hooks& operator=(const hooks&) = delete;
  ~hooks() {
    points::set_armed(false);
    std::lock_guard g(g_hook_mu);
    g_hooks.clear();
  }
  void on(const std::string& point, std::function<points::outcome()> fn) {
    {
      std::lock_guard g(g_hook_mu);
      g_hooks[point] = std::move(fn);
    }
    points::install_hook(&run_hook);
    points::set_armed(true);
  }
  /// The bug point fires (its old path is taken) every time it is evaluated.
  void bug(const std::string& point) {
    on(point, [] { return points::outcome{true, 0}; });
  }
};

class gate {
 public:
  void open() {
    {
      std::lock_guard g(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout = bound) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return open_; });
  }
  bool is_open() {
    std::lock_guard g(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// --- device data ------------------------------------------------------------------------------------

std::vector<std::byte> pattern(std::size_t bytes, std::uint64_t seed) {
  std::vector<std::byte> out(bytes);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (std::size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x >> 24);
  }
  return out;
}

// Through a stream, as on a real device.
void write_device(device::backend& dev, void* dst, const std::vector<std::byte>& src) {
  auto s = dev.create_stream();
  ASSERT_TRUE(s);
  ASSERT_TRUE(dev.copy_async(dst, src.data(), src.size(), *s));
  ASSERT_TRUE(dev.synchronize_stream(*s));
  ASSERT_TRUE(dev.destroy_stream(*s));
}

std::vector<std::byte> read_device(device::backend& dev, const void* src, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  auto s = dev.create_stream();
  EXPECT_TRUE(s);
  if (!s) return out;
  EXPECT_TRUE(dev.copy_async(out.data(), src, bytes, *s));
  EXPECT_TRUE(dev.synchronize_stream(*s));
  EXPECT_TRUE(dev.destroy_stream(*s));
  return out;
}

// Requests without the client's checksum.
save_request raw_save(buffer_handle h, std::size_t offset, std::size_t bytes, std::uint64_t key) {
  return {.buffer = h, .offset = offset, .bytes = bytes, .key = key, .checksum = std::nullopt};
}
load_request raw_load(buffer_handle h, std::size_t offset, std::uint64_t key,
                      std::optional<std::uint64_t> sum = std::nullopt) {
  return {.buffer = h, .offset = offset, .key = key, .checksum = sum};
}

// --- fixture ----------------------------------------------------------------------------------------

class registry_fixture : public ::testing::Test {
 protected:
  device::backend& dev = device::sim();
  alloc::device_resource upstream{dev};
  alloc::tracking_adaptor tracked{upstream, "registry_test buffers"};

  options opts(std::chrono::milliseconds join_timeout = bound) {
    options o;
    o.backend = &dev;
    o.resource = &tracked;
    o.join_timeout = join_timeout;
    return o;
  }

  // One buffer per device listed, `bytes` each, filled with a pattern seeded by its index.
  registration make(instance_registry& reg, const std::string& id, std::vector<int> devices = {0},
                    std::size_t bytes = 64 * kib) {
    instance_config c;
    c.devices = devices;
    for (int d : devices) c.buffers.push_back({d, bytes});
    auto r = reg.register_instance(id, c);
    EXPECT_TRUE(r) << r.error().to_string();
    if (!r) return {};
    for (std::uint32_t i = 0; i < r->buffers.size(); ++i) {
      auto b = reg.buffer(id, r->buffers[i]);
      EXPECT_TRUE(b);
      write_device(dev, b->ptr, pattern(b->bytes, r->generation * 100 + i));
    }
    return *r;
  }

  // A save of [offset, offset + bytes) of buffer `index`, with the client's checksum of what
  // make() wrote there. Safe from client threads.
  save_request save_of(const registration& r, std::uint32_t index, std::size_t offset, std::size_t bytes,
                       std::uint64_t key, std::size_t buffer_bytes = 64 * kib) {
    const std::uint64_t seed = r.generation * 100 + index;
    std::lock_guard g(patterns_mu_);
    auto& p = patterns_[{seed, buffer_bytes}];
    if (p.empty()) p = pattern(buffer_bytes, seed);
    return {r.buffers[index], offset, bytes, key, checksum(p.data() + offset, bytes)};
  }

  std::mutex patterns_mu_;
  std::map<std::pair<std::uint64_t, std::size_t>, std::vector<std::byte>> patterns_;

  void TearDown() override {
    // Leaked-on-purpose buffers (a timed-out join) go back here so later tests start clean.
    for (const auto& a : tracked.outstanding()) (void)tracked.deallocate(a.ptr, a.bytes, a.stream);
  }
};

using registry = registry_fixture;
using registry_bug = registry_fixture;

// --- checksum ---------------------------------------------------------------------------------------

TEST(registry_checksum, is_deterministic_and_sensitive_to_every_byte_and_the_length) {
  auto p = pattern(1000, 7);
  const std::uint64_t base = checksum(p.data(), p.size());
  EXPECT_EQ(base, checksum(p.data(), p.size()));
  EXPECT_NE(base, checksum(p.data(), p.size() - 1));
  for (std::size_t i = 0; i < p.size(); i += 37) {
    for (int bit = 0; bit < 8; bit += 3) {
      auto q = p;
      q[i] ^= static_cast<std::byte>(1 << bit);
      EXPECT_NE(base, checksum(q.data(), q.size())) << "byte " << i << " bit " << bit;
    }
  }
  std::vector<std::byte> zeros(64), longer(65);
  EXPECT_NE(checksum(zeros.data(), 64), checksum(longer.data(), 65));
  EXPECT_NE(checksum(zeros.data(), 0), checksum(zeros.data(), 1));
  // Poisoned (freed) memory never passes for a pattern.
  std::vector<std::byte> poison(4096, static_cast<std::byte>(device::sim_poison_byte));
  EXPECT_NE(checksum(poison.data(), 4096), checksum(pattern(4096, 1).data(), 4096));
}

// --- round trips ------------------------------------------------------------------------------------

TEST_F(registry, saves_and_loads_round_trip_real_bytes_on_every_device) {
  instance_registry reg(opts());
  auto r = make(reg, "engine-0", {0, 1});
  ASSERT_EQ(r.buffers.size(), 2u);
  auto op = reg.save("engine-0", save_of(r, 0, 4 * kib, 16 * kib, 1));
  ASSERT_TRUE(op) << op.error().to_string();
  EXPECT_EQ(op->generation(), r.generation);
  ASSERT_TRUE(op->wait()) << op->wait().to_string();
  EXPECT_TRUE(op->ready());

  auto info = reg.block(1);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->bytes, 16 * kib);
  EXPECT_EQ(info->saved_by, r.generation);
  auto expected = pattern(64 * kib, r.generation * 100);
  expected = std::vector<std::byte>(expected.begin() + 4 * kib, expected.begin() + 20 * kib);
  auto stored = reg.read_block(1);
  ASSERT_TRUE(stored);
  EXPECT_EQ(*stored, expected);
  EXPECT_EQ(info->checksum, checksum(expected.data(), expected.size()));

  // Load it into the other device's buffer, at an offset.
  auto ld = reg.load("engine-0", {r.buffers[1], 8 * kib, 1, info->checksum});
  ASSERT_TRUE(ld);
  ASSERT_TRUE(ld->wait()) << ld->wait().to_string();
  auto b1 = reg.buffer("engine-0", r.buffers[1]);
  ASSERT_TRUE(b1);
  EXPECT_EQ(b1->device, 1);
  EXPECT_EQ(read_device(dev, static_cast<std::byte*>(b1->ptr) + 8 * kib, 16 * kib), expected);

  const auto s = reg.stats();
  EXPECT_EQ(s.saves_completed, 1u);
  EXPECT_EQ(s.loads_completed, 1u);
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.block_bytes, 16 * kib);
  EXPECT_EQ(s.buffers_live, 2u);
  EXPECT_EQ(tracked.outstanding_count(), 2u);
  auto u = reg.unregister_instance("engine-0");
  EXPECT_TRUE(u.status) << u.status.to_string();
  EXPECT_EQ(tracked.outstanding_count(), 0u);
}

TEST_F(registry, a_copy_that_hashes_differently_from_what_the_client_wrote_is_corrupt_and_not_stored) {
  instance_registry reg(opts());
  auto r = make(reg, "a");
  save_request req = save_of(r, 0, 0, 8 * kib, 5);
  *req.checksum ^= 1;
  auto op = reg.save("a", req);
  ASSERT_TRUE(op);
  const status s = op->wait();
  EXPECT_EQ(s.code(), errc::corrupt) << s.to_string();
  EXPECT_NE(s.message().find("hash"), std::string::npos) << s.message();
  EXPECT_EQ(reg.block(5).code(), errc::not_found);
  EXPECT_EQ(reg.stats().checksum_mismatches, 1u);
  // A save without a client checksum stores whatever it copied.
  req.checksum.reset();
  ASSERT_TRUE(reg.save("a", req)->wait());
  EXPECT_TRUE(reg.block(5));
}

TEST_F(registry, loads_check_the_block_exists_fits_and_carries_the_expected_checksum) {
  instance_registry reg(opts());
  auto r = make(reg, "a");
  EXPECT_EQ(reg.load("a", raw_load(r.buffers[0], 0, 99))->wait().code(), errc::not_found);
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 0, 16 * kib, 3))->wait());
  const std::uint64_t sum = reg.block(3)->checksum;
  // 8 KiB of room for a 16 KiB block:
  EXPECT_EQ(reg.load("a", raw_load(r.buffers[0], 56 * kib, 3))->wait().code(), errc::invalid_argument);
  EXPECT_EQ(reg.load("a", raw_load(r.buffers[0], 0, 3, sum + 1))->wait().code(), errc::corrupt);
  EXPECT_TRUE(reg.load("a", raw_load(r.buffers[0], 48 * kib, 3, sum))->wait());
}

TEST_F(registry, handles_are_checked_against_their_generation_index_bounds_and_state) {
  instance_registry reg(opts());
  auto first = make(reg, "a");
  ASSERT_TRUE(reg.unregister_instance("a").status);
  auto second = make(reg, "a");
  EXPECT_GT(second.generation, first.generation);

  auto stale = reg.save("a", save_of(first, 0, 0, 4 * kib, 1));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.code(), errc::not_found);
  EXPECT_NE(stale.error().message().find("stale handle"), std::string::npos) << stale.error().message();
  EXPECT_EQ(reg.buffer("a", first.buffers[0]).code(), errc::not_found);

  EXPECT_EQ(reg.save("a", raw_save(buffer_handle{second.generation, 7}, 0, 4 * kib, 1)).code(), errc::invalid_argument);
  EXPECT_EQ(reg.save("a", raw_save(second.buffers[0], 60 * kib, 8 * kib, 1)).code(), errc::invalid_argument);
  EXPECT_EQ(reg.save("a", raw_save(second.buffers[0], 0, 0, 1)).code(), errc::invalid_argument);
  EXPECT_EQ(reg.load("a", raw_load(second.buffers[0], 64 * kib, 1)).code(), errc::invalid_argument);
  EXPECT_EQ(reg.save("nobody", save_of(second, 0, 0, 4 * kib, 1)).code(), errc::not_found);
  EXPECT_TRUE(reg.save("a", save_of(second, 0, 0, 4 * kib, 1))->wait());
}

TEST_F(registry, rejects_malformed_configurations_and_an_id_that_is_open) {
  instance_registry reg(opts());
  using cfg = instance_config;
  EXPECT_EQ(reg.register_instance("", cfg{{0}, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(reg.register_instance("x", cfg{{}, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(reg.register_instance("x", cfg{{0, 0}, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(reg.register_instance("x", cfg{{99}, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(reg.register_instance("x", cfg{{0}, {{1, 4096}}}).code(), errc::invalid_argument);
  EXPECT_EQ(reg.register_instance("x", cfg{{0}, {{0, 0}}}).code(), errc::invalid_argument);
  auto a = make(reg, "a");
  auto again = reg.register_instance("a", cfg{{0}, {{0, 4096}}});
  EXPECT_EQ(again.code(), errc::already_exists);
  EXPECT_EQ(tracked.outstanding_count(), 1u);
  EXPECT_EQ(reg.find("a")->generation, a.generation);
  EXPECT_EQ(reg.stats().registrations, 1u);
  EXPECT_EQ(reg.unregister_instance("nobody").status.code(), errc::not_found);
}

TEST_F(registry, a_registration_that_fails_midway_leaves_nothing_allocated_or_running) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  hooks h;
  std::atomic<int> allocations{0};
  h.on("sim/allocate", [&] { return ++allocations == 3 ? points::outcome{true, ENOMEM} : points::outcome{}; });
  auto r = reg.register_instance("a", {{0, 1}, {{0, 4096}, {1, 4096}, {1, 8192}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), errc::out_of_memory);
  EXPECT_TRUE(r.error().injected());
  EXPECT_EQ(tracked.outstanding_count(), 0u);
  EXPECT_EQ(reg.stats().workers_running, 0u);
  EXPECT_EQ(reg.stats().buffers_live, 0u);
  EXPECT_EQ(reg.find("a").code(), errc::not_found);
}

// --- unregister -------------------------------------------------------------------------------------

TEST_F(registry, unregister_drains_every_accepted_save_before_it_releases_anything) {
  instance_registry reg(opts());
  auto r = make(reg, "a", {0, 1}, 256 * kib);
  std::vector<operation> ops;
  for (std::uint64_t k = 0; k < 64; ++k) {
    auto op = reg.save("a", save_of(r, static_cast<std::uint32_t>(k % 2), (k / 2) % 32 * 8 * kib, 8 * kib, k, 256 * kib));
    ASSERT_TRUE(op);
    ops.push_back(*op);
  }
  auto u = reg.unregister_instance("a");
  // When unregister returns, no task of that generation can still run.
  for (const auto& op : ops) {
    ASSERT_TRUE(op.ready());
    EXPECT_TRUE(op.wait()) << op.wait().to_string();
  }
  EXPECT_TRUE(u.status) << u.status.to_string();
  EXPECT_TRUE(u.owner);
  EXPECT_TRUE(u.removed);
  EXPECT_TRUE(u.drained);
  EXPECT_FALSE(u.replaced);
  EXPECT_TRUE(u.worker_error);
  EXPECT_EQ(u.generation, r.generation);
  EXPECT_EQ(u.buffers_released, 2u);
  EXPECT_EQ(u.bytes_released, 512 * kib);
  EXPECT_EQ(u.buffers_leaked, 0u);
  EXPECT_EQ(reg.find("a").code(), errc::not_found);
  EXPECT_EQ(tracked.outstanding_count(), 0u);
  const auto s = reg.stats();
  EXPECT_EQ(s.saves_completed, 64u);
  EXPECT_EQ(s.buffers_live, 0u);
  EXPECT_EQ(s.workers_running, 0u);
  EXPECT_EQ(s.instances, 0u);
}

TEST_F(registry, work_submitted_after_the_mark_is_refused_with_a_message_naming_the_instance) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "engine-7");
  ASSERT_TRUE(reg.save("engine-7", save_of(r, 0, 0, 4 * kib, 1))->wait());
  hooks h;
  status save_st, load_st, lease_st;
  instance_state seen = instance_state::open;
  h.on("registry/unregister/after-mark", [&] {
    save_st = reg.save("engine-7", save_of(r, 0, 0, 4 * kib, 2)).error();
    load_st = reg.load("engine-7", raw_load(r.buffers[0], 0, 1)).error();
    lease_st = reg.acquire_lease("engine-7", 1);
    seen = reg.find("engine-7")->state;
    return points::outcome{};
  });
  auto u = reg.unregister_instance("engine-7");
  EXPECT_TRUE(u.status) << u.status.to_string();
  EXPECT_EQ(seen, instance_state::draining);
  for (const status& s : {save_st, load_st, lease_st}) {
    EXPECT_EQ(s.code(), errc::refused) << s.to_string();
    EXPECT_NE(s.message().find("'engine-7'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("being unregistered"), std::string::npos) << s.message();
  }
  EXPECT_EQ(reg.stats().submits_refused, 3u);
  EXPECT_EQ(reg.block(1)->leases, 0u);
}

TEST_F(registry, a_save_past_its_check_when_the_mark_lands_still_runs_before_the_barrier) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "a");
  hooks h;
  gate in_window, marked;
  std::atomic<bool> first{true};
  h.on("registry/save/after-check", [&] {
    if (first.exchange(false)) {
      in_window.open();
      marked.wait();
    }
    return points::outcome{};
  });
  h.on("registry/unregister/after-mark", [&] {
    marked.open();
    return points::outcome{};
  });
  result<operation> op = status(errc::internal, "not run");
  std::thread saver([&] { op = reg.save("a", save_of(r, 0, 0, 16 * kib, 9)); });
  ASSERT_TRUE(in_window.wait());
  auto u = reg.unregister_instance("a");
  saver.join();
  ASSERT_TRUE(op) << op.error().to_string();
  EXPECT_TRUE(op->ready());
  EXPECT_TRUE(op->wait()) << op->wait().to_string();
  EXPECT_TRUE(reg.block(9));
  EXPECT_TRUE(u.status) << u.status.to_string();
}

TEST_F(registry, a_same_id_registration_during_the_join_keeps_its_generation_buffers_and_leases) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto old = make(reg, "a", {0, 1});
  ASSERT_TRUE(reg.save("a", save_of(old, 0, 0, 4 * kib, 1))->wait());
  ASSERT_TRUE(reg.acquire_lease("a", 1));
  hooks h;
  result<registration> fresh = status(errc::internal, "not registered");
  std::atomic<bool> once{true};
  h.on("registry/unregister/joining", [&] {
    if (!once.exchange(false)) return points::outcome{};
    fresh = reg.register_instance("a", {{0, 1}, {{0, 64 * kib}, {1, 64 * kib}}});
    if (fresh) (void)reg.acquire_lease("a", 1);
    return points::outcome{};
  });
  auto u = reg.unregister_instance("a");
  ASSERT_TRUE(fresh) << fresh.error().to_string();
  EXPECT_GT(fresh->generation, old.generation);
  EXPECT_TRUE(u.status) << u.status.to_string();
  EXPECT_TRUE(u.replaced);
  EXPECT_EQ(u.buffers_released, 2u);
  EXPECT_EQ(u.leases_released, 1u);

  auto now = reg.find("a");
  ASSERT_TRUE(now);
  EXPECT_EQ(now->generation, fresh->generation);
  EXPECT_EQ(now->state, instance_state::open);
  EXPECT_EQ(now->buffers_live, 2u);
  EXPECT_EQ(now->leases, 1u);
  EXPECT_EQ(reg.block(1)->leases, 1u);
  EXPECT_EQ(tracked.outstanding_count(), 2u);
  for (const auto& hd : fresh->buffers) {
    auto b = reg.buffer("a", hd);
    ASSERT_TRUE(b) << b.error().to_string();
    write_device(dev, b->ptr, pattern(b->bytes, fresh->generation * 100 + hd.index));
  }
  EXPECT_TRUE(reg.save("a", save_of(*fresh, 1, 0, 8 * kib, 2))->wait());
  auto u2 = reg.unregister_instance("a");
  EXPECT_TRUE(u2.status);
  EXPECT_EQ(reg.stats().leases_outstanding, 0u);
  EXPECT_EQ(tracked.outstanding_count(), 0u);
}

// Shared by the fixed test and the bug test: saves queued behind a task held until the mark,
// then every task after that one fails with an injected worker error.
struct failing_worker {
  gate marked;
  std::atomic<bool> first{true};
  std::atomic<bool> after_mark{false};
  void install(hooks& h) {
    h.on("registry/unregister/after-mark", [this] {
      after_mark = true;
      marked.open();
      return points::outcome{};
    });
    h.on("registry/worker/task", [this] {
      if (first.exchange(false)) {
        marked.wait();
        return points::outcome{};
      }
      return after_mark ? points::outcome{true, EIO} : points::outcome{};
    });
  }
};

TEST_F(registry, a_worker_failing_during_shutdown_is_reported_and_the_cleanup_still_completes) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "a", {0, 1});
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 0, 4 * kib, 100))->wait());
  ASSERT_TRUE(reg.acquire_lease("a", 100));
  hooks h;
  failing_worker fw;
  fw.install(h);
  std::vector<operation> ops;
  for (std::uint64_t k = 0; k < 8; ++k) ops.push_back(*reg.save("a", save_of(r, 0, k * 8 * kib, 8 * kib, k)));
  auto u = reg.unregister_instance("a");
  EXPECT_FALSE(u.status);
  EXPECT_FALSE(u.worker_error);
  EXPECT_TRUE(u.worker_error.injected()) << u.worker_error.to_string();
  EXPECT_EQ(u.status.code(), u.worker_error.code());
  EXPECT_NE(u.status.message().find("completed its cleanup"), std::string::npos) << u.status.message();
  EXPECT_NE(u.worker_error.message().find("save worker (device 0)"), std::string::npos) << u.worker_error.message();
  EXPECT_TRUE(u.drained);
  EXPECT_TRUE(u.removed);
  EXPECT_EQ(u.buffers_released, 2u);
  EXPECT_EQ(u.leases_released, 1u);
  EXPECT_TRUE(ops[0].wait());
  for (std::size_t i = 1; i < ops.size(); ++i) {
    const status s = ops[i].wait();
    EXPECT_FALSE(s);
    EXPECT_TRUE(s.injected()) << s.to_string();
  }
  EXPECT_EQ(reg.find("a").code(), errc::not_found);
  EXPECT_EQ(tracked.outstanding_count(), 0u);
  EXPECT_EQ(reg.stats().leases_outstanding, 0u);
  EXPECT_EQ(reg.stats().worker_errors, 1u);
}

TEST_F(registry, a_worker_failing_at_its_drain_barrier_is_reported_too) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  make(reg, "a", {0, 1});
  hooks h;
  std::atomic<int> n{0};
  h.on("registry/worker/drain", [&] { return ++n == 2 ? points::outcome{true, EIO} : points::outcome{}; });
  auto u = reg.unregister_instance("a");
  EXPECT_EQ(n.load(), 4);  // a save and a load worker per device, each drained once
  EXPECT_FALSE(u.worker_error);
  EXPECT_TRUE(u.drained);
  EXPECT_EQ(u.buffers_released, 2u);
  EXPECT_EQ(tracked.outstanding_count(), 0u);
}

TEST_F(registry, concurrent_unregisters_of_one_id_have_one_owner_and_share_its_result) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "a", {0, 1});
  for (std::uint64_t k = 0; k < 16; ++k) (void)reg.save("a", save_of(r, static_cast<std::uint32_t>(k % 2), 0, 32 * kib, k));
  hooks h;
  gate both_waiting;
  std::atomic<int> concurrent{0};
  h.on("registry/unregister/concurrent", [&] {
    if (++concurrent == 2) both_waiting.open();
    return points::outcome{};
  });
  h.on("registry/unregister/after-join", [&] {
    both_waiting.wait();
    return points::outcome{};
  });
  std::vector<unregister_result> results(3);
  std::vector<int> gone_on_return(3);  // not vector<bool>: written from three threads
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i) {
    ts.emplace_back([&, i] {
      results[i] = reg.unregister_instance("a");
      gone_on_return[i] = reg.find("a").code() == errc::not_found && tracked.outstanding_count() == 0;
    });
  }
  for (auto& t : ts) t.join();
  int owners = 0;
  for (int i = 0; i < 3; ++i) {
    owners += results[i].owner;
    EXPECT_TRUE(gone_on_return[i]) << "unregister " << i << " returned before the teardown finished";
    EXPECT_TRUE(results[i].status) << results[i].status.to_string();
    EXPECT_EQ(results[i].generation, r.generation);
    EXPECT_TRUE(results[i].drained);
    EXPECT_EQ(results[i].buffers_released, 2u);
  }
  EXPECT_EQ(owners, 1);
  EXPECT_EQ(concurrent.load(), 2);
}

TEST_F(registry, a_join_that_runs_out_of_time_leaks_the_buffers_instead_of_freeing_them_under_the_worker) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts(50ms));
  auto r = make(reg, "a", {0});
  hooks h;
  gate stuck, release;
  std::atomic<bool> first{true};
  h.on("registry/worker/task", [&] {
    if (first.exchange(false)) {
      stuck.open();
      release.wait();
    }
    return points::outcome{};
  });
  std::vector<operation> ops;
  for (std::uint64_t k = 0; k < 4; ++k) ops.push_back(*reg.save("a", save_of(r, 0, k * 16 * kib, 16 * kib, k)));
  ASSERT_TRUE(stuck.wait());
  auto u = reg.unregister_instance("a");
  EXPECT_EQ(u.status.code(), errc::timeout) << u.status.to_string();
  EXPECT_NE(u.status.message().find("leaked rather than freed"), std::string::npos) << u.status.message();
  EXPECT_FALSE(u.drained);
  EXPECT_TRUE(u.removed);
  EXPECT_EQ(u.buffers_leaked, 1u);
  EXPECT_EQ(u.bytes_leaked, 64 * kib);
  EXPECT_EQ(u.buffers_released, 0u);
  EXPECT_EQ(u.tasks_abandoned, 3u);
  EXPECT_EQ(tracked.outstanding_count(), 1u);  // still allocated: the stuck copy reads it
  EXPECT_EQ(reg.stats().bytes_leaked, 64 * kib);
  EXPECT_EQ(reg.find("a").code(), errc::not_found);
  for (std::size_t i = 1; i < ops.size(); ++i) EXPECT_EQ(ops[i].wait().code(), errc::timeout);
  // The stuck worker finishes its copy from memory that is still there, then ends at its barrier.
  release.open();
  EXPECT_TRUE(ops[0].wait()) << ops[0].wait().to_string();
  EXPECT_TRUE(eventually([&] { return reg.stats().workers_running == 0; }));
}

TEST_F(registry, unregister_all_under_load_tears_every_instance_down_and_leaves_the_registry_empty) {
  instance_registry reg(opts());
  std::vector<registration> regs;
  for (int i = 0; i < 3; ++i) regs.push_back(make(reg, "kv-" + std::to_string(i), {i % 2}, 128 * kib));
  ASSERT_TRUE(reg.save("kv-1", save_of(regs[1], 0, 0, 4 * kib, 1000, 128 * kib))->wait());
  ASSERT_TRUE(reg.acquire_lease("kv-1", 1000));
  std::atomic<bool> go{false};
  std::vector<std::vector<operation>> ops(3);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] {
      const std::string id = "kv-" + std::to_string(i);
      for (std::uint64_t k = 0;; ++k) {
        auto op = reg.save(id, save_of(regs[i], 0, k % 16 * 8 * kib, 8 * kib, i * 10000 + k, 128 * kib));
        if (!op) {
          EXPECT_TRUE(op.code() == errc::refused || op.code() == errc::not_found) << op.error().to_string();
          return;
        }
        ops[i].push_back(*op);
        if (k == 8) go = true;
        if (ops[i].size() > 32) (void)ops[i][ops[i].size() - 32].wait();
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return go.load(); }));
  auto all = reg.unregister_all();
  for (auto& t : clients) t.join();
  EXPECT_TRUE(all.status) << all.status.to_string();
  EXPECT_EQ(all.results.size(), 3u);
  EXPECT_EQ(all.remaining, 0u);
  for (const auto& u : all.results) {
    EXPECT_TRUE(u.owner);
    EXPECT_TRUE(u.drained);
    EXPECT_EQ(u.buffers_released, 1u);
  }
  for (const auto& per : ops) {
    for (const auto& op : per) EXPECT_TRUE(op.wait()) << op.wait().to_string();
  }
  EXPECT_TRUE(reg.instances().empty());
  EXPECT_EQ(tracked.outstanding_count(), 0u);
  const auto s = reg.stats();
  EXPECT_EQ(s.leases_outstanding, 0u);
  EXPECT_EQ(s.checksum_mismatches, 0u);
  EXPECT_EQ(s.workers_running, 0u);
}

TEST_F(registry, leases_pin_blocks_and_go_with_their_generation) {
  instance_registry reg(opts());
  auto a = make(reg, "a");
  make(reg, "b");
  ASSERT_TRUE(reg.save("a", save_of(a, 0, 0, 4 * kib, 7))->wait());
  EXPECT_EQ(reg.acquire_lease("a", 8).code(), errc::not_found);
  ASSERT_TRUE(reg.acquire_lease("a", 7));
  ASSERT_TRUE(reg.acquire_lease("a", 7));
  ASSERT_TRUE(reg.acquire_lease("b", 7));
  EXPECT_EQ(reg.block(7)->leases, 3u);
  EXPECT_EQ(reg.find("a")->leases, 2u);
  EXPECT_EQ(reg.erase_block(7).code(), errc::busy);
  EXPECT_TRUE(reg.release_lease("a", 7));
  EXPECT_EQ(reg.release_lease("a", 8).code(), errc::not_found);
  auto u = reg.unregister_instance("a");
  EXPECT_EQ(u.leases_released, 1u);
  EXPECT_EQ(reg.block(7)->leases, 1u);  // b's stays
  EXPECT_EQ(reg.erase_block(7).code(), errc::busy);
  EXPECT_TRUE(reg.release_lease("b", 7));
  EXPECT_TRUE(reg.erase_block(7));
  EXPECT_EQ(reg.block(7).code(), errc::not_found);
}

TEST_F(registry, replaced_and_erased_blocks_give_their_host_buffers_to_later_saves_of_that_size) {
  options o = opts();
  o.host_cache_bytes = 32 * kib;
  instance_registry reg(o);
  auto r = make(reg, "a");
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 0, 16 * kib, 1))->wait());
  EXPECT_EQ(reg.stats().host_bytes_cached, 0u);
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 16 * kib, 16 * kib, 1))->wait());  // replaces block 1
  EXPECT_EQ(reg.stats().host_bytes_cached, 16 * kib);
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 0, 16 * kib, 2))->wait());  // takes it
  EXPECT_EQ(reg.stats().host_bytes_cached, 0u);
  ASSERT_TRUE(reg.erase_block(1));
  ASSERT_TRUE(reg.erase_block(2));
  EXPECT_EQ(reg.stats().host_bytes_cached, 32 * kib);
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 0, 8 * kib, 3))->wait());  // another size: fresh memory
  ASSERT_TRUE(reg.erase_block(3));
  EXPECT_EQ(reg.stats().host_bytes_cached, 32 * kib);  // over the bound: freed, not kept
  // Recycled buffers carry old bytes; what is stored is still exactly what was copied.
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 32 * kib, 16 * kib, 4))->wait());
  auto p = pattern(64 * kib, r.generation * 100);
  EXPECT_EQ(*reg.read_block(4), std::vector<std::byte>(p.begin() + 32 * kib, p.begin() + 48 * kib));
}

// --- bug points -------------------------------------------------------------------------------------

// bug/registry/release-before-drain with the address reused by another client: the queued save
// copies the other client's bytes, and the checksum catches it.
TEST_F(registry_bug, release_before_drain_makes_a_queued_save_copy_reused_memory_and_the_checksum_catches_it) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "a", {0}, 64 * kib);
  void* old_ptr = reg.buffer("a", r.buffers[0])->ptr;
  hooks h;
  h.bug("bug/registry/release-before-drain");
  gate released;
  std::atomic<bool> first{true};
  h.on("registry/worker/task", [&] {
    if (first.exchange(false)) released.wait();
    return points::outcome{};
  });
  std::vector<std::byte> other(64 * kib, std::byte{0x5a});
  h.on("registry/unregister/joining", [&] {
    // The buffer is already back; another client's data lands where it was (the non-strict sim
    // keeps freed memory mapped, as a caching allocator would).
    std::memcpy(old_ptr, other.data(), other.size());
    released.open();
    return points::outcome{};
  });
  std::vector<operation> ops;
  for (std::uint64_t k = 0; k < 4; ++k) ops.push_back(*reg.save("a", save_of(r, 0, k * 16 * kib, 16 * kib, k)));
  auto u = reg.unregister_instance("a");
  int corrupt = 0;
  for (const auto& op : ops) corrupt += op.wait().code() == errc::corrupt;
  EXPECT_EQ(corrupt, 4);
  EXPECT_EQ(reg.stats().checksum_mismatches, 4u);
  EXPECT_EQ(u.buffers_released, 1u);
}

void let_children_die_of_segv() {
  for (const char* var : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* old = std::getenv(var);
    std::string value = old != nullptr ? old : "";
    if (value.find("handle_segv=0") != std::string::npos) continue;
    if (!value.empty()) value += ':';
    value += "handle_segv=0";
    setenv(var, value.c_str(), 1);
  }
}

// The child: strict sim (freed pages unmapped), the bug on, the saves held until the buffer is back.
void child_release_before_drain_on_strict_sim() {
  device::sim_set_strict(true);
  alloc::device_resource upstream(device::sim());
  options o;
  o.backend = &device::sim();
  o.resource = &upstream;
  instance_registry reg(o);
  auto r = reg.register_instance("a", {{0}, {{0, 256 * kib}}});
  if (!r) std::_Exit(3);
  hooks h;
  h.bug("bug/registry/release-before-drain");
  gate released;
  h.on("registry/unregister/joining", [&] {
    released.open();
    return points::outcome{};
  });
  h.on("registry/worker/task", [&] {
    released.wait();
    return points::outcome{};
  });
  for (std::uint64_t k = 0; k < 4; ++k) {
    (void)reg.save("a", raw_save(r->buffers[0], 32 * kib + k * 32 * kib, 32 * kib, k));
  }
  (void)reg.unregister_instance("a");
  std::_Exit(0);  // not reached: the queued copy faults on the sim's stream worker
}

TEST_F(registry_bug, release_before_drain_on_a_strict_sim_is_a_sigsegv_in_the_queued_copy) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  let_children_die_of_segv();
  EXPECT_EXIT(child_release_before_drain_on_strict_sim(), ::testing::KilledBySignal(SIGSEGV), "");
}

TEST_F(registry_bug, cleanup_by_id_releases_the_newer_generation_and_leaks_the_old_one) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  make(reg, "a", {0});
  hooks h;
  h.bug("bug/registry/cleanup-by-id");
  result<registration> fresh = status(errc::internal, "not registered");
  h.on("registry/unregister/joining", [&] {
    fresh = reg.register_instance("a", {{0}, {{0, 32 * kib}}});
    return points::outcome{};
  });
  auto u = reg.unregister_instance("a");
  ASSERT_TRUE(fresh) << fresh.error().to_string();
  // The symptoms the fixed registry never shows: the newer registration is gone, its buffer
  // freed under it, and the old generation's buffer is still allocated.
  EXPECT_EQ(reg.find("a").code(), errc::not_found);
  EXPECT_EQ(reg.buffer("a", fresh->buffers[0]).code(), errc::not_found);
  ASSERT_EQ(tracked.outstanding_count(), 1u);
  EXPECT_EQ(tracked.outstanding()[0].bytes, 64 * kib);
  EXPECT_EQ(u.bytes_released, 32 * kib);
  // The newer generation's entry went without a teardown, but its workers were still joined when
  // it was dropped: none is left running to destroy its stream while the process exits (a worker
  // detached here made this test die of SIGSEGV after it passed, 1 run in 100).
  EXPECT_EQ(reg.stats().workers_running, 0u);
}

TEST_F(registry_bug, early_return_on_worker_error_leaks_the_buffers_and_leases_of_a_removed_instance) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "a", {0, 1});
  ASSERT_TRUE(reg.save("a", save_of(r, 0, 0, 4 * kib, 1))->wait());
  ASSERT_TRUE(reg.acquire_lease("a", 1));
  hooks h;
  h.bug("bug/registry/early-return-on-worker-error");
  h.on("registry/worker/drain", [] { return points::outcome{true, EIO}; });
  auto u = reg.unregister_instance("a");
  EXPECT_FALSE(u.worker_error);
  EXPECT_EQ(u.buffers_released, 0u);
  EXPECT_EQ(reg.find("a").code(), errc::not_found);
  EXPECT_EQ(tracked.outstanding_count(), 2u);
  EXPECT_EQ(reg.stats().leases_outstanding, 1u);
}

TEST_F(registry_bug, an_unsynchronized_second_unregister_returns_while_the_first_is_still_tearing_down) {
  if (!points_compiled_in) GTEST_SKIP() << "fault points compiled out";
  instance_registry reg(opts());
  auto r = make(reg, "a");
  hooks h;
  h.bug("bug/registry/unsynchronized-concurrent-unregister");
  gate owner_joined, second_returned;
  h.on("registry/unregister/after-join", [&] {
    owner_joined.open();
    second_returned.wait();
    return points::outcome{};
  });
  unregister_result first;
  std::thread owner([&] { first = reg.unregister_instance("a"); });
  if (!owner_joined.wait()) {
    second_returned.open();
    owner.join();
    FAIL() << "the owner never reached after-join";
  }
  auto second = reg.unregister_instance("a");
  auto still = reg.find("a");
  const std::size_t outstanding = tracked.outstanding_count();
  second_returned.open();
  owner.join();
  EXPECT_TRUE(second.status);
  EXPECT_FALSE(second.owner);
  ASSERT_TRUE(still);  // it claimed the instance was gone, but it was not
  EXPECT_EQ(still->generation, r.generation);
  EXPECT_EQ(still->state, instance_state::drained);
  EXPECT_EQ(outstanding, 1u);
  EXPECT_TRUE(first.status);
}

}  // namespace
}  // namespace faultline::core::registry
