// The sim backend's memory, contexts, streams and events, on this process's sim (device 1 reset
// to a fresh context per test): arena reuse and coalescing, OOM, strict poisoning, stream order,
// events, stream-ordered free. Ordering tests hold a stream inside a host function until the
// test opens a gate, so they never depend on timing (see sim_backend_test.cc).
#include "core/device/sim/sim_backend.h"

#include <gtest/gtest.h>

#include "core/device/sim/sim_backend_test_support.h"

namespace faultline::core::device {
namespace {

using namespace sim_test_support;

// --- memory and contexts (this process, device 1 reset to a fresh context per test) -----------

class sim_device_one : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(s_.set_device(1).is_ok());
    ASSERT_TRUE(s_.reset_context(1).is_ok());
    auto m = s_.memory(1);
    ASSERT_TRUE(m.has_value());
    total_ = m->bytes_total;
  }
  void TearDown() override {
    sim_set_strict(false);
    ASSERT_TRUE(s_.set_device(0).is_ok());
  }
  std::size_t bytes_free() {
    auto m = s_.memory(1);
    return m ? m->bytes_free : 0;
  }

  backend& s_ = the_sim();
  std::size_t total_ = 0;
};

TEST_F(sim_device_one, allocations_are_aligned_host_addressable_and_reused_after_free) {
  auto a = s_.allocate(1000);
  auto b = s_.allocate(1000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*b) % 256, 0u);
  EXPECT_NE(*a, *b);
  std::memset(*a, 0x3c, 1000);
  EXPECT_EQ(static_cast<unsigned char*>(*a)[999], 0x3c);
  ASSERT_TRUE(s_.deallocate(*a).is_ok());
  auto c = s_.allocate(1000);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, *a) << "a freed range is silently reused, as on CUDA";
  EXPECT_EQ(static_cast<unsigned char*>(*c)[0], 0x3c) << "and keeps its old bytes outside strict mode";
  EXPECT_TRUE(s_.deallocate(*b).is_ok());
  EXPECT_TRUE(s_.deallocate(*c).is_ok());
}

TEST_F(sim_device_one, freed_neighbours_coalesce_into_one_larger_allocation) {
  constexpr std::size_t mib = 1 << 20;
  auto a = s_.allocate(mib);
  auto b = s_.allocate(mib);
  auto c = s_.allocate(mib);
  ASSERT_TRUE(a && b && c);
  ASSERT_TRUE(s_.deallocate(*a).is_ok());
  ASSERT_TRUE(s_.deallocate(*c).is_ok());
  ASSERT_TRUE(s_.deallocate(*b).is_ok());
  auto big = s_.allocate(3 * mib);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big, *a);
  EXPECT_TRUE(s_.deallocate(*big).is_ok());
}

TEST_F(sim_device_one, out_of_memory_is_an_error_value_and_memory_reports_use) {
  EXPECT_EQ(s_.allocate(total_ + 1).code(), errc::out_of_memory);
  auto whole = s_.allocate(total_);  // reserved address space: nothing is touched
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(bytes_free(), 0u);
  auto more = s_.allocate(256);
  EXPECT_EQ(more.code(), errc::out_of_memory);
  EXPECT_NE(more.error().message().find("out of memory"), std::string::npos);
  EXPECT_FALSE(more.error().injected());
  ASSERT_TRUE(s_.deallocate(*whole).is_ok());
  EXPECT_EQ(bytes_free(), total_);
  auto p = s_.allocate(1000);  // rounded to whole 256-byte granules
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(bytes_free(), total_ - 1024);
  EXPECT_TRUE(s_.deallocate(*p).is_ok());
}

TEST_F(sim_device_one, deallocate_rejects_what_is_not_a_live_allocation) {
  int on_stack = 0;
  auto p = s_.allocate(4096);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(s_.allocate(0).code(), errc::invalid_argument);
  EXPECT_EQ(s_.deallocate(&on_stack).code(), errc::invalid_argument);
  EXPECT_EQ(s_.deallocate(static_cast<char*>(*p) + 256).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.deallocate(nullptr).is_ok());
  EXPECT_TRUE(s_.deallocate(*p).is_ok());
  EXPECT_EQ(s_.deallocate(*p).code(), errc::invalid_argument) << "double free";
}

TEST_F(sim_device_one, reset_frees_every_allocation_and_bumps_the_epoch_once) {
  auto p = s_.allocate(1 << 20);
  ASSERT_TRUE(p.has_value());
  const std::uint64_t before = s_.context_epoch(1);
  ASSERT_NE(before, 0u);
  const std::uint64_t resets = sim_get_counters().context_resets;
  ASSERT_TRUE(s_.reset_context(1).is_ok());
  EXPECT_EQ(s_.context_epoch(1), before + 1);
  EXPECT_EQ(sim_get_counters().context_resets, resets + 1);
  EXPECT_TRUE(s_.reset_context(1).is_ok()) << "no context now: a no-op";
  EXPECT_EQ(s_.context_epoch(1), before + 1);
  EXPECT_EQ(bytes_free(), total_) << "the next call builds a fresh, empty context";
  EXPECT_EQ(s_.context_epoch(1), before + 1) << "which keeps the epoch the reset set";
  EXPECT_EQ(s_.deallocate(*p).code(), errc::invalid_argument) << "the reset freed it";
  auto q = s_.allocate(1 << 20);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(*q, *p) << "the address is reused";
  EXPECT_TRUE(s_.deallocate(*q).is_ok());
}

TEST_F(sim_device_one, strict_mode_poisons_freed_bytes_on_pages_still_in_use) {
  sim_set_strict(true);
  auto a = s_.allocate(256);
  auto b = s_.allocate(256);  // same page as a, which stays live
  ASSERT_TRUE(a && b);
  std::memset(*b, 0x11, 256);
  ASSERT_TRUE(s_.deallocate(*b).is_ok());
  const auto* bytes = static_cast<const unsigned char*>(*b);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(bytes[i], sim_poison_byte) << "byte " << i;
  auto c = s_.allocate(8192);  // pages freed in strict mode become usable again
  ASSERT_TRUE(c.has_value());
  std::memset(*c, 0x22, 8192);
  EXPECT_TRUE(s_.deallocate(*c).is_ok());
  EXPECT_TRUE(s_.deallocate(*a).is_ok());
}

TEST_F(sim_device_one, concurrent_allocations_from_many_threads_never_overlap) {
  const std::size_t start_free = bytes_free();
  std::atomic<int> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &corrupt] {
      if (!s_.set_device(1).is_ok()) corrupt.fetch_add(1);
      std::uint64_t seed = 0x1234 + static_cast<std::uint64_t>(t);
      auto next = [&seed] {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return seed >> 33;
      };
      struct held {
        unsigned char* p;
        std::size_t n;
      };
      std::vector<held> live;
      const auto tag = static_cast<unsigned char>(0x40 + t);
      auto release = [&](std::size_t i) {
        for (std::size_t k = 0; k < live[i].n; k += 97) {
          if (live[i].p[k] != tag) corrupt.fetch_add(1);
        }
        if (!s_.deallocate(live[i].p).is_ok()) corrupt.fetch_add(1);
        live[i] = live.back();
        live.pop_back();
      };
      for (int i = 0; i < 3000; ++i) {
        if (live.size() < 32 && next() % 3 != 0) {
          const std::size_t n = 1 + next() % (64 << 10);
          auto p = s_.allocate(n);
          if (!p) {
            corrupt.fetch_add(1);
            continue;
          }
          std::memset(*p, tag, n);
          live.push_back({static_cast<unsigned char*>(*p), n});
        } else if (!live.empty()) {
          release(next() % live.size());
        }
      }
      while (!live.empty()) release(0);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(bytes_free(), start_free);
}

// --- streams and events ------------------------------------------------------------------------

TEST_F(sim_device_one, ops_on_one_stream_run_in_queue_order) {
  auto st = s_.create_stream();
  auto src = s_.allocate(4096);
  auto dst = s_.allocate(4096 * 50);
  ASSERT_TRUE(st && src && dst);
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());  // everything below queues
  auto* out = static_cast<unsigned char*>(*dst);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(s_.fill_async(*src, i, 4096, *st).is_ok());
    ASSERT_TRUE(s_.copy_async(out + 4096 * i, *src, 4096, *st).is_ok());
  }
  g.open();
  ASSERT_TRUE(s_.synchronize_stream(*st).is_ok());
  for (int i = 0; i < 50; ++i) ASSERT_EQ(out[4096 * i + 4095], i) << "copy " << i;
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, default_stream_is_a_real_stream_with_its_own_worker) {
  static std::thread::id ran_on;
  auto e = s_.create_event();
  ASSERT_TRUE(e.has_value());
  gate g;
  ASSERT_TRUE(sim_launch_host_func(stream{}, &gate::hold, &g).is_ok());
  ASSERT_TRUE(sim_launch_host_func(stream{}, +[](void*) { ran_on = std::this_thread::get_id(); }, nullptr).is_ok());
  ASSERT_TRUE(s_.record_event(*e, stream{}).is_ok());
  ASSERT_TRUE(g.wait_entered());
  EXPECT_EQ(s_.query_event(*e).code(), errc::not_ready);
  g.open();
  ASSERT_TRUE(s_.synchronize_stream(stream{}).is_ok());
  EXPECT_TRUE(s_.query_event(*e).is_ok());
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(s_.destroy_stream(stream{}).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.destroy_event(*e).is_ok());
}

TEST_F(sim_device_one, event_is_not_ready_until_the_work_it_captured_completes) {
  auto st = s_.create_stream();
  auto e = s_.create_event();
  auto later = s_.create_event();
  ASSERT_TRUE(st && e && later);
  EXPECT_TRUE(s_.query_event(*e).is_ok()) << "never recorded: complete, as on CUDA";
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  ASSERT_TRUE(s_.record_event(*e, *st).is_ok());
  ASSERT_TRUE(g.wait_entered());
  EXPECT_EQ(s_.query_event(*e).code(), errc::not_ready);
  std::thread opener = open_later(g);
  EXPECT_TRUE(s_.synchronize_event(*e).is_ok());
  opener.join();
  EXPECT_TRUE(s_.query_event(*e).is_ok());
  ASSERT_TRUE(s_.record_event(*later, *st).is_ok());  // an idle stream: complete at once
  EXPECT_TRUE(s_.query_event(*later).is_ok());
  EXPECT_TRUE(s_.destroy_event(*e).is_ok());
  EXPECT_EQ(s_.query_event(*e).code(), errc::invalid_argument) << "destroyed";
  EXPECT_EQ(s_.query_event(event{}).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.destroy_event(*later).is_ok());
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, stream_wait_event_holds_later_work_until_the_other_stream_gets_there) {
  auto a = s_.create_stream();
  auto b = s_.create_stream();
  auto a_done = s_.create_event();
  auto b_done = s_.create_event();
  auto src = s_.allocate(4096);
  auto dst = s_.allocate(4096);
  ASSERT_TRUE(a && b && a_done && b_done && src && dst);
  std::memset(*src, 0, 4096);
  std::memset(*dst, 0, 4096);
  gate slow;
  ASSERT_TRUE(sim_launch_host_func(*a, &gate::hold, &slow).is_ok());  // A's slow op
  ASSERT_TRUE(s_.fill_async(*src, 0x5a, 4096, *a).is_ok());
  ASSERT_TRUE(s_.record_event(*a_done, *a).is_ok());
  ASSERT_TRUE(s_.stream_wait_event(*b, *a_done).is_ok());
  ASSERT_TRUE(s_.copy_async(*dst, *src, 4096, *b).is_ok());
  ASSERT_TRUE(s_.record_event(*b_done, *b).is_ok());
  ASSERT_TRUE(slow.wait_entered());
  std::this_thread::sleep_for(50ms);  // room for a broken B to run ahead
  EXPECT_EQ(s_.query_event(*b_done).code(), errc::not_ready);
  EXPECT_EQ(static_cast<unsigned char*>(*dst)[0], 0);
  slow.open();
  ASSERT_TRUE(s_.synchronize_stream(*b).is_ok());
  EXPECT_EQ(static_cast<unsigned char*>(*dst)[4095], 0x5a) << "B copied after A's fill";
  EXPECT_TRUE(s_.destroy_stream(*a).is_ok());
  EXPECT_TRUE(s_.destroy_stream(*b).is_ok());
}

TEST_F(sim_device_one, destroy_stream_completes_queued_work_first) {
  auto st = s_.create_stream();
  auto buf = s_.allocate(4096);
  ASSERT_TRUE(st && buf);
  std::memset(*buf, 0, 4096);
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  ASSERT_TRUE(s_.fill_async(*buf, 7, 4096, *st).is_ok());
  std::thread opener = open_later(g);
  ASSERT_TRUE(s_.destroy_stream(*st).is_ok());
  opener.join();
  EXPECT_EQ(static_cast<unsigned char*>(*buf)[4095], 7);
  EXPECT_EQ(s_.synchronize_stream(*st).code(), errc::invalid_argument) << "destroyed";
  EXPECT_TRUE(s_.deallocate(*buf).is_ok());
}

TEST_F(sim_device_one, synchronize_device_waits_for_every_stream) {
  auto a = s_.create_stream();
  auto b = s_.create_stream();
  auto buf = s_.allocate(8192);
  ASSERT_TRUE(a && b && buf);
  std::memset(*buf, 0, 8192);
  gate ga;
  gate gb;
  auto* bytes = static_cast<unsigned char*>(*buf);
  ASSERT_TRUE(sim_launch_host_func(*a, &gate::hold, &ga).is_ok());
  ASSERT_TRUE(sim_launch_host_func(*b, &gate::hold, &gb).is_ok());
  ASSERT_TRUE(s_.fill_async(bytes, 1, 4096, *a).is_ok());
  ASSERT_TRUE(s_.fill_async(bytes + 4096, 2, 4096, *b).is_ok());
  std::thread open_a = open_later(ga);
  std::thread open_b = open_later(gb);
  ASSERT_TRUE(s_.synchronize_device().is_ok());
  open_a.join();
  open_b.join();
  EXPECT_EQ(bytes[4095], 1);
  EXPECT_EQ(bytes[8191], 2);
  EXPECT_TRUE(s_.destroy_stream(*a).is_ok());
  EXPECT_TRUE(s_.destroy_stream(*b).is_ok());
}

TEST_F(sim_device_one, event_and_stream_of_different_devices_cannot_be_recorded_together) {
  auto e = s_.create_event();  // device 1
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(s_.set_device(0).is_ok());
  auto st = s_.create_stream();  // device 0
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(s_.record_event(*e, *st).code(), errc::invalid_argument);
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
  EXPECT_TRUE(s_.destroy_event(*e).is_ok());
}

TEST_F(sim_device_one, deallocate_async_releases_memory_only_when_the_stream_gets_there) {
  constexpr std::size_t mib = 1 << 20;
  auto st = s_.create_stream();
  ASSERT_TRUE(st.has_value());
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  auto p = s_.allocate_async(mib, *st);
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(s_.deallocate_async(*p, *st).is_ok());
  EXPECT_EQ(s_.deallocate_async(*p, *st).code(), errc::invalid_argument) << "already queued";
  EXPECT_EQ(bytes_free(), total_ - mib) << "still held: the stream has not reached the free";
  auto other = s_.allocate(mib);
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(*other, *p);
  g.open();
  ASSERT_TRUE(s_.synchronize_stream(*st).is_ok());
  EXPECT_EQ(bytes_free(), total_ - mib);
  auto again = s_.allocate(mib);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, *p) << "released and reusable now";
  EXPECT_TRUE(s_.deallocate(*again).is_ok());
  EXPECT_TRUE(s_.deallocate(*other).is_ok());
  EXPECT_EQ(s_.deallocate_async(&g, *st).code(), errc::invalid_argument) << "not device memory";
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, deallocate_waits_for_work_queued_on_the_device) {
  static std::atomic<bool> done{false};
  done.store(false);
  auto st = s_.create_stream();
  auto p = s_.allocate(4096);
  ASSERT_TRUE(st && p);
  gate g;
  ASSERT_TRUE(sim_launch_host_func(*st, &gate::hold, &g).is_ok());
  ASSERT_TRUE(sim_launch_host_func(*st, +[](void*) { done.store(true); }, nullptr).is_ok());
  std::thread opener = open_later(g);
  ASSERT_TRUE(s_.deallocate(*p).is_ok());
  EXPECT_TRUE(done.load());
  opener.join();
  EXPECT_TRUE(s_.destroy_stream(*st).is_ok());
}

TEST_F(sim_device_one, reset_from_a_host_function_on_the_same_device_completes) {
  static std::atomic<int> outcome{-1};
  outcome.store(-1);
  const std::uint64_t before = s_.context_epoch(1);
  auto st = s_.create_stream();
  ASSERT_TRUE(st.has_value());
  // The worker running this cannot join itself: it must detach and leave without touching its
  // (now unmapped) stream slot.
  ASSERT_TRUE(sim_launch_host_func(*st, +[](void*) { outcome.store(static_cast<int>(the_sim().reset_context(1).code())); }, nullptr).is_ok());
  ASSERT_TRUE(eventually([] { return outcome.load() != -1; }));
  EXPECT_EQ(outcome.load(), static_cast<int>(errc::ok));
  EXPECT_EQ(s_.context_epoch(1), before + 1);
  EXPECT_EQ(bytes_free(), total_) << "a fresh context works";
}

}  // namespace
}  // namespace faultline::core::device
