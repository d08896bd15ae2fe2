// pool_resource: the pool's placement rules (alignment, best fit, coalescing, never across
// upstream blocks), its growth (doubling, maximum, halving on refusal), stream-ordered reuse
// (observed through a recording backend, and end to end on the sim's stream workers), what it
// does when memory runs short (another stream's block, merged lists, free upstream blocks
// returned; each ordered after the work that used the memory), release, and its invariants under
// seeded random and concurrent alloc/free sequences. Every test runs on the process's backend
// (the sim here); an upstream that records and refuses requests, or a byte limit standing in for
// a full device, makes the growth rules observable.
#include "core/alloc/pool_resource.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "core/alloc/alloc_test_util.h"
#include "core/alloc/device_resource.h"
#include "core/alloc/limiting_adaptor.h"
#include "core/device/sim/sim_backend.h"

namespace faultline::core::alloc {

namespace detail {
// Plants broken states so the invariant checker can be seen to catch them.
struct pool_test_access {
  // A free block that belongs to no upstream block's chain.
  static void plant_free_block(pool_resource& pool, device::stream s, std::uintptr_t address, std::size_t bytes,
                               std::uint64_t upstream_id) {
    std::lock_guard lock(pool.mu_);
    block_node* n = pool.nodes_.acquire();
    n->address = address;
    n->bytes = bytes;
    n->upstream_id = upstream_id;
    pool.state_for_locked(s).free.insert_uncoalesced_for_testing(n);
  }
  // Splits 256 bytes off the best fit on `s`'s list and files them back unmerged.
  static void split_without_merging(pool_resource& pool, device::stream s) {
    std::lock_guard lock(pool.mu_);
    auto& list = pool.state_for_locked(s).free;
    block_node* n = list.take_best_fit(256, pool.nodes_);
    list.insert_uncoalesced_for_testing(n);
  }
  static void add_pool_bytes(pool_resource& pool, std::size_t bytes) {
    std::lock_guard lock(pool.mu_);
    pool.pool_bytes_ += bytes;
  }
  static std::uint64_t any_upstream_id(pool_resource& pool) {
    std::lock_guard lock(pool.mu_);
    return pool.upstream_blocks_.begin()->first;
  }
};
}  // namespace detail

namespace {

using testing::recorded_call;
using testing::recording_backend;
using testing::seeded_rng;
using testing::test_upstream;
using testing::dev;

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * 1024;

pool_options options_with(std::size_t initial, std::size_t maximum = 0) {
  pool_options o;
  o.initial_size_bytes = initial;
  o.maximum_size_bytes = maximum;
  o.device = 0;
  return o;
}

std::uintptr_t addr(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

class streams {
 public:
  explicit streams(int n, device::backend& b = dev()) : backend_(b) {
    for (int i = 0; i < n; ++i) {
      auto s = b.create_stream();
      EXPECT_TRUE(s) << s.error().to_string();
      if (s) list_.push_back(*s);
    }
  }
  ~streams() {
    for (auto s : list_) (void)backend_.destroy_stream(s);
  }
  device::stream operator[](std::size_t i) const { return list_.at(i); }

 private:
  device::backend& backend_;
  std::vector<device::stream> list_;
};

TEST(pool_resource, rounds_sizes_up_to_256_bytes_and_aligns_every_pointer) {
  device_resource upstream;
  pool_resource pool(upstream, options_with(mib));
  const std::size_t sizes[] = {1, 255, 256, 257, 1000, 4096 + 1};
  std::size_t expected_live = 0;
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t bytes : sizes) {
    auto p = pool.allocate(bytes);
    ASSERT_TRUE(p) << p.error().to_string();
    EXPECT_EQ(addr(*p) % pool_resource::alignment_bytes, 0u) << bytes;
    expected_live += (bytes + 255) / 256 * 256;
    live.emplace_back(*p, bytes);
  }
  EXPECT_EQ(pool.statistics().live_bytes, expected_live);
  for (auto [p, bytes] : live) ASSERT_TRUE(pool.deallocate(p, bytes));
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
}

TEST(pool_resource, best_fit_takes_the_smallest_free_block_that_holds_the_request) {
  device_resource upstream;
  pool_resource pool(upstream, options_with(64 * kib));
  // a(4K) sep b(1K) sep c(2K) sep, then the tail of the upstream block (the largest).
  void* a = *pool.allocate(4 * kib);
  void* sep1 = *pool.allocate(256);
  void* b = *pool.allocate(1 * kib);
  void* sep2 = *pool.allocate(256);
  void* c = *pool.allocate(2 * kib);
  void* sep3 = *pool.allocate(256);
  ASSERT_TRUE(pool.deallocate(a, 4 * kib));
  ASSERT_TRUE(pool.deallocate(b, 1 * kib));
  ASSERT_TRUE(pool.deallocate(c, 2 * kib));
  ASSERT_EQ(pool.statistics().free_blocks, 4u);

  auto fits_c = pool.allocate(1 * kib + 1);  // 1280 bytes: too big for b, smallest fit is c
  ASSERT_TRUE(fits_c);
  EXPECT_EQ(*fits_c, c);
  auto fits_b = pool.allocate(1 * kib);
  ASSERT_TRUE(fits_b);
  EXPECT_EQ(*fits_b, b);
  auto fits_a = pool.allocate(3 * kib);
  ASSERT_TRUE(fits_a);
  EXPECT_EQ(*fits_a, a);
  EXPECT_EQ(pool.statistics().upstream_allocations, 1u);
  for (auto [p, n] : {std::pair{*fits_c, 1 * kib + 1}, {*fits_b, 1 * kib}, {*fits_a, 3 * kib}, {sep1, 256ul},
                      {sep2, 256ul}, {sep3, 256ul}}) {
    ASSERT_TRUE(pool.deallocate(p, n));
  }
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
}

TEST(pool_resource, best_fit_prefers_the_lowest_address_among_equal_sizes) {
  device_resource upstream;
  pool_resource pool(upstream, options_with(64 * kib));
  void* x = *pool.allocate(kib);
  void* s1 = *pool.allocate(256);
  void* y = *pool.allocate(kib);
  void* s2 = *pool.allocate(256);
  ASSERT_LT(addr(x), addr(y));
  ASSERT_TRUE(pool.deallocate(y, kib));
  ASSERT_TRUE(pool.deallocate(x, kib));
  auto p = pool.allocate(kib);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, x);
  for (auto [q, n] : {std::pair{*p, kib}, {s1, 256ul}, {s2, 256ul}}) ASSERT_TRUE(pool.deallocate(q, n));
}

TEST(pool_resource, coalesces_freed_neighbours_into_one_block) {
  device_resource upstream;
  pool_resource pool(upstream, options_with(3 * kib));
  void* a = *pool.allocate(kib);
  void* b = *pool.allocate(kib);
  void* c = *pool.allocate(kib);
  EXPECT_EQ(addr(b), addr(a) + kib);
  EXPECT_EQ(addr(c), addr(b) + kib);
  ASSERT_TRUE(pool.deallocate(a, kib));
  ASSERT_TRUE(pool.deallocate(c, kib));
  EXPECT_EQ(pool.statistics().free_blocks, 2u);
  ASSERT_TRUE(pool.deallocate(b, kib));  // bridges a and c
  auto stats = pool.statistics();
  EXPECT_EQ(stats.free_blocks, 1u);
  EXPECT_EQ(stats.largest_free_block_bytes, 3 * kib);
  auto whole = pool.allocate(3 * kib);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, a);
  EXPECT_EQ(pool.statistics().upstream_allocations, 1u);  // served without growing
  ASSERT_TRUE(pool.deallocate(*whole, 3 * kib));
}

TEST(pool_resource, never_coalesces_across_upstream_blocks) {
  test_upstream upstream(dev());
  upstream.adjacent_arena_bytes = 64 * kib;  // consecutive upstream blocks touch
  pool_resource pool(upstream, options_with(kib));
  void* p1 = *pool.allocate(kib);
  void* p2 = *pool.allocate(kib);  // the pool is full: grows by another adjacent 1 KiB block
  ASSERT_EQ(pool.statistics().upstream_blocks, 2u);
  ASSERT_EQ(addr(p2), addr(p1) + kib) << "the test needs adjacent upstream blocks";
  ASSERT_TRUE(pool.deallocate(p1, kib));
  ASSERT_TRUE(pool.deallocate(p2, kib));
  auto stats = pool.statistics();
  EXPECT_EQ(stats.free_blocks, 2u);
  EXPECT_EQ(stats.largest_free_block_bytes, kib);
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();

  auto both = pool.allocate(2 * kib);  // must not straddle the boundary: grows instead
  ASSERT_TRUE(both);
  EXPECT_NE(*both, p1);
  EXPECT_EQ(pool.statistics().upstream_blocks, 3u);
  ASSERT_TRUE(pool.deallocate(*both, 2 * kib));
}

TEST(pool_resource, grows_by_doubling_from_the_initial_size) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib));
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t bytes : {mib, mib, 2 * mib, 4 * mib, 256ul}) {
    auto p = pool.allocate(bytes);
    ASSERT_TRUE(p) << p.error().to_string();
    live.emplace_back(*p, bytes);
  }
  // 1M first; then each growth adds what the pool already holds: +1M (2M), +2M (4M), +4M (8M);
  // every request filled the pool exactly, so the 256-byte one doubles it once more (+8M).
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{mib, mib, 2 * mib, 4 * mib, 8 * mib}));
  EXPECT_EQ(pool.statistics().pool_bytes, 16 * mib);
  for (auto [p, n] : live) ASSERT_TRUE(pool.deallocate(p, n));
}

TEST(pool_resource, first_growth_takes_the_request_when_it_exceeds_the_initial_size) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib));
  auto p = pool.allocate(3 * mib + 1);
  ASSERT_TRUE(p);
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{3 * mib + 256}));
  ASSERT_TRUE(pool.deallocate(*p, 3 * mib + 1));
}

TEST(pool_resource, growth_never_passes_the_maximum_size) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib, 3 * mib));
  std::vector<void*> live;
  for (int i = 0; i < 3; ++i) {
    auto p = pool.allocate(mib);
    ASSERT_TRUE(p) << p.error().to_string();
    live.push_back(*p);
  }
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{mib, mib, mib}));  // third: capped at 3M - 2M
  auto over = pool.allocate(256);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.code(), errc::out_of_memory);
  EXPECT_NE(over.error().message().find("maximum_size_bytes"), std::string::npos) << over.error().message();
  EXPECT_EQ(upstream.requests().size(), 3u);  // the maximum refused it without asking upstream
  for (void* p : live) ASSERT_TRUE(pool.deallocate(p, mib));
  auto again = pool.allocate(mib);  // free space is reused under the cap
  ASSERT_TRUE(again);
  ASSERT_TRUE(pool.deallocate(*again, mib));
  // 768 KiB live in each upstream block: 768 KiB are free, but in three 256 KiB pieces that
  // never merge, no upstream block is entirely free, and the cap forbids growth.
  live.clear();
  for (int i = 0; i < 3; ++i) {
    auto p = pool.allocate(768 * kib);
    ASSERT_TRUE(p) << p.error().to_string();
    live.push_back(*p);
  }
  auto spanning = pool.allocate(512 * kib);
  EXPECT_EQ(spanning.code(), errc::out_of_memory);
  EXPECT_EQ(upstream.requests().size(), 3u);
  EXPECT_EQ(upstream.deallocations(), 0u);
  for (void* p : live) ASSERT_TRUE(pool.deallocate(p, 768 * kib));
}

TEST(pool_resource, returns_entirely_free_upstream_blocks_when_the_maximum_stops_growth) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib, 3 * mib));
  std::vector<void*> live;
  for (int i = 0; i < 3; ++i) live.push_back(*pool.allocate(mib));
  for (void* p : live) ASSERT_TRUE(pool.deallocate(p, mib));
  // 3 MiB are free, but in three upstream blocks that never merge, and the cap forbids growth:
  // the pool gives the three back and takes one block that fits.
  auto spanning = pool.allocate(2 * mib);
  ASSERT_TRUE(spanning) << spanning.error().to_string();
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{mib, mib, mib, 2 * mib}));
  EXPECT_EQ(upstream.deallocations(), 3u);
  auto stats = pool.statistics();
  EXPECT_EQ(stats.upstream_blocks_returned, 3u);
  EXPECT_EQ(stats.upstream_blocks, 1u);
  EXPECT_EQ(stats.pool_bytes, 2 * mib);
  EXPECT_EQ(pool.upstream_bytes(), 2 * mib);
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
  ASSERT_TRUE(pool.deallocate(*spanning, 2 * mib));
}

TEST(pool_resource, returns_entirely_free_upstream_blocks_after_a_device_synchronisation_when_the_upstream_refuses) {
  recording_backend rb(dev());
  device_resource device(rb);
  limiting_adaptor upstream(device, 4 * mib);  // a device with 4 MiB
  pool_options o = options_with(mib);
  o.backend = &rb;
  pool_resource pool(upstream, o);
  // Upstream blocks of 1, 1 and 2 MiB (growth doubles): the device is full.
  const std::size_t sizes[] = {mib, mib, 2 * mib};
  std::vector<void*> live;
  for (std::size_t bytes : sizes) live.push_back(*pool.allocate(bytes));
  ASSERT_EQ(upstream.allocated_bytes(), 4 * mib);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.deallocate(live[i], sizes[i]));
  rb.clear();

  auto big = pool.allocate(3 * mib);  // no free block holds it, and the device refuses 4 and 3 MiB
  ASSERT_TRUE(big) << big.error().to_string();
  auto stats = pool.statistics();
  EXPECT_EQ(stats.upstream_refusals, 2u);
  EXPECT_EQ(stats.upstream_blocks_returned, 3u);
  EXPECT_EQ(stats.upstream_blocks, 1u);
  EXPECT_EQ(upstream.allocated_bytes(), 3 * mib);
  // Queued work may still use the freed blocks: the device is synchronised before any goes back.
  const auto calls = rb.calls();
  auto first = [&](const char* name) {
    return std::find_if(calls.begin(), calls.end(), [&](const recorded_call& c) { return c.name == name; });
  };
  ASSERT_NE(first("synchronize_device"), calls.end());
  ASSERT_NE(first("deallocate"), calls.end());
  EXPECT_LT(first("synchronize_device") - calls.begin(), first("deallocate") - calls.begin());
  EXPECT_EQ(rb.count("deallocate"), 3u);
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
  ASSERT_TRUE(pool.deallocate(*big, 3 * mib));
}

TEST(pool_resource, an_upstream_block_the_upstream_does_not_take_back_keeps_serving) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib, 2 * mib));
  void* a = *pool.allocate(mib);
  void* b = *pool.allocate(mib);
  ASSERT_TRUE(pool.deallocate(a, mib));
  ASSERT_TRUE(pool.deallocate(b, mib));
  upstream.fail_deallocate = true;
  auto spanning = pool.allocate(2 * mib);  // needs both blocks back, which the upstream refuses
  EXPECT_EQ(spanning.code(), errc::out_of_memory);
  auto stats = pool.statistics();
  EXPECT_EQ(stats.upstream_blocks_returned, 0u);
  EXPECT_EQ(stats.upstream_blocks, 2u);
  EXPECT_EQ(stats.free_bytes, 2 * mib);
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
  auto again = pool.allocate(mib);
  ASSERT_TRUE(again) << again.error().to_string();
  ASSERT_TRUE(pool.deallocate(*again, mib));
  upstream.fail_deallocate = false;
}

TEST(pool_resource, halves_the_growth_request_when_the_upstream_refuses) {
  test_upstream upstream(dev());
  upstream.refuse_above_bytes = 3 * mib;
  pool_resource pool(upstream, options_with(8 * mib));
  auto p = pool.allocate(mib);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{8 * mib, 4 * mib, 2 * mib}));
  auto stats = pool.statistics();
  EXPECT_EQ(stats.upstream_refusals, 2u);
  EXPECT_EQ(stats.pool_bytes, 2 * mib);
  ASSERT_TRUE(pool.deallocate(*p, mib));
}

TEST(pool_resource, reports_out_of_memory_once_halving_reaches_the_request) {
  test_upstream upstream(dev());
  upstream.refuse_above_bytes = mib;
  pool_resource pool(upstream, options_with(8 * mib));
  auto p = pool.allocate(2 * mib);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.code(), errc::out_of_memory);
  EXPECT_FALSE(p.error().injected());
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{8 * mib, 4 * mib, 2 * mib}));
  EXPECT_EQ(pool.statistics().pool_bytes, 0u);

  auto small = pool.allocate(512 * kib);  // 8M, 4M, 2M refused, 1M granted
  ASSERT_TRUE(small) << small.error().to_string();
  EXPECT_EQ(upstream.granted(), (std::vector<std::size_t>{mib}));
  ASSERT_TRUE(pool.deallocate(*small, 512 * kib));
  EXPECT_TRUE(pool.check_invariants());
}

TEST(pool_resource, upstream_errors_other_than_out_of_memory_are_returned_without_retry) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  recording_backend rb(dev());
  device_resource upstream(rb);
  pool_options o = options_with(mib);
  o.backend = &rb;
  o.device = 0;
  pool_resource pool(upstream, o);
  testing::arm_point("sim/allocate", EINVAL, 0, 1);  // the sim answers with an injected EINVAL
  auto p = pool.allocate(kib);
  const int fired = testing::fired_count("sim/allocate");
  testing::disarm_points();
  if (fired == 0) GTEST_SKIP() << "backend has no sim/allocate fault point";
  ASSERT_FALSE(p);
  EXPECT_TRUE(p.error().injected());
  EXPECT_EQ(rb.count("allocate"), 1u);  // no halving retry for a non-refusal
}

TEST(pool_resource, grow_fault_point_counts_as_an_upstream_refusal) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(4 * mib));
  testing::arm_point("alloc/pool/grow", ENOMEM, 0, 1);
  auto p = pool.allocate(mib);
  testing::disarm_points();
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(upstream.requests(), (std::vector<std::size_t>{2 * mib}));  // 4M was "refused" by the point
  EXPECT_EQ(pool.statistics().upstream_refusals, 1u);
  ASSERT_TRUE(pool.deallocate(*p, mib));
}

TEST(pool_resource, grow_fault_point_firing_every_time_yields_an_injected_out_of_memory) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(4 * mib));
  testing::arm_point("alloc/pool/grow", ENOMEM);
  auto p = pool.allocate(mib);
  testing::disarm_points();
  ASSERT_FALSE(p);
  EXPECT_EQ(p.code(), errc::out_of_memory);
  EXPECT_TRUE(p.error().injected());
  EXPECT_TRUE(upstream.requests().empty());
}

TEST(pool_resource, allocate_fault_point_fails_the_allocation_as_injected) {
  if (!testing::faults_compiled_in) GTEST_SKIP() << "fault points compiled out (FAULTLINE_FAULTS=OFF)";
  device_resource upstream;
  pool_resource pool(upstream, options_with(mib));
  testing::arm_point("alloc/pool/allocate", ENOMEM, 0, 1);
  auto failed = pool.allocate(kib);
  auto next = pool.allocate(kib);
  testing::disarm_points();
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.code(), errc::out_of_memory);
  EXPECT_TRUE(failed.error().injected());
  ASSERT_TRUE(next);
  ASSERT_TRUE(pool.deallocate(*next, kib));
}

TEST(pool_resource, same_stream_reuse_makes_no_event_calls) {
  recording_backend rb(dev());
  device_resource upstream(rb);
  pool_options o = options_with(mib);
  o.backend = &rb;
  pool_resource pool(upstream, o);
  streams s(1, rb);
  auto p = pool.allocate(64 * kib, s[0]);
  ASSERT_TRUE(p);
  ASSERT_TRUE(pool.deallocate(*p, 64 * kib, s[0]));
  rb.clear();
  auto q = pool.allocate(64 * kib, s[0]);
  ASSERT_TRUE(q);
  EXPECT_EQ(*q, *p);
  EXPECT_TRUE(rb.calls().empty()) << rb.calls().front().name;
  ASSERT_TRUE(pool.deallocate(*q, 64 * kib, s[0]));
}

TEST(pool_resource, cross_stream_reuse_waits_on_an_event_recorded_on_the_freeing_stream) {
  recording_backend rb(dev());
  device_resource upstream(rb);
  pool_options o = options_with(mib);
  o.backend = &rb;
  pool_resource pool(upstream, o);
  streams s(2, rb);
  const device::stream a = s[0];
  const device::stream b = s[1];
  // Fill the pool on A so B has nothing of its own, then free on A.
  auto p = pool.allocate(mib, a);
  ASSERT_TRUE(p);
  ASSERT_TRUE(pool.deallocate(*p, mib, a));
  rb.clear();

  auto q = pool.allocate(mib, b);
  ASSERT_TRUE(q);
  EXPECT_EQ(*q, *p);  // handed over rather than grown
  EXPECT_EQ(rb.count("allocate"), 0u);

  const auto calls = rb.calls();
  auto named = [&](const char* name) {
    return std::find_if(calls.begin(), calls.end(), [&](const recorded_call& c) { return c.name == name; });
  };
  auto record = named("record_event");
  auto wait = named("stream_wait_event");
  ASSERT_NE(record, calls.end());
  ASSERT_NE(wait, calls.end());
  EXPECT_LT(record - calls.begin(), wait - calls.begin()) << "the wait must follow the record";
  EXPECT_EQ(record->stream, a.native) << "event recorded on the freeing stream";
  EXPECT_EQ(wait->stream, b.native) << "the allocating stream waits";
  EXPECT_EQ(wait->event, record->event);
  EXPECT_EQ(pool.statistics().cross_stream_waits, 1u);
  ASSERT_TRUE(pool.deallocate(*q, mib, b));
}

struct ordering_probe {
  std::atomic<bool> a_done{false};
  std::atomic<int> b_saw_a_done{-1};
};

TEST(pool_resource, cross_stream_reuse_orders_the_new_owner_after_the_freeing_stream_work) {
  if (dev().kind() != device::backend_kind::sim) GTEST_SKIP() << "uses sim host functions as kernels";
  device_resource upstream;
  pool_resource pool(upstream, options_with(mib));
  streams s(2);
  ordering_probe probe;
  auto p = pool.allocate(mib, s[0]);
  ASSERT_TRUE(p);
  // A "kernel" on A still using the block when it is freed.
  ASSERT_TRUE(device::sim_launch_host_func(
      s[0],
      [](void* arg) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        static_cast<ordering_probe*>(arg)->a_done.store(true);
      },
      &probe));
  ASSERT_TRUE(pool.deallocate(*p, mib, s[0]));
  auto q = pool.allocate(mib, s[1]);
  ASSERT_TRUE(q);
  ASSERT_EQ(*q, *p);
  // The new owner's first work must not start before A's kernel finished.
  ASSERT_TRUE(device::sim_launch_host_func(
      s[1],
      [](void* arg) {
        auto* pr = static_cast<ordering_probe*>(arg);
        pr->b_saw_a_done.store(pr->a_done.load() ? 1 : 0);
      },
      &probe));
  ASSERT_TRUE(dev().synchronize_stream(s[1]));
  EXPECT_EQ(probe.b_saw_a_done.load(), 1);
  ASSERT_TRUE(pool.deallocate(*q, mib, s[1]));
  ASSERT_TRUE(dev().synchronize_stream(s[0]));
}

// Work queued on a stream that still uses a block when the block is freed there: it sleeps, then
// marks itself done. A watcher queued on the stream that reuses the block records whether every
// such work it must be ordered after had finished when it ran.
struct queued_work {
  std::atomic<bool> done{false};
};

struct watcher {
  std::vector<queued_work*> after;
  std::atomic<int> saw_all_done{-1};
};

void slow_work(void* arg) {
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  static_cast<queued_work*>(arg)->done.store(true);
}

void watch(void* arg) {
  auto* w = static_cast<watcher*>(arg);
  bool all = true;
  for (queued_work* q : w->after) all = all && q->done.load();
  w->saw_all_done.store(all ? 1 : 0);
}

// Four streams A, B, C, D each allocate from one 8 MiB upstream block, in address order
// A [0, 1M), B [1M, 5M), C [5M, 7M), D [7M, 8M), and each frees its block while slow work
// queued on it still runs: four free lists, one block each, neighbours that never coalesce
// across lists. The upstream is a device of `device_bytes` (`recorder` sees what it grants).
struct four_stream_setup {
  static constexpr std::size_t sizes[4] = {mib, 4 * mib, 2 * mib, mib};
  explicit four_stream_setup(std::size_t device_bytes = 64 * mib) : upstream(recorder, device_bytes) {}

  test_upstream recorder{dev()};
  limiting_adaptor upstream;
  pool_resource pool{upstream, options_with(8 * mib)};
  streams s{4};
  void* blocks[4] = {};
  queued_work work[4];
  pool_statistics before;

  void allocate_then_free_under_work() {
    for (int i = 0; i < 4; ++i) {
      auto p = pool.allocate(sizes[i], s[i]);
      ASSERT_TRUE(p) << p.error().to_string();
      blocks[i] = *p;
    }
    ASSERT_EQ(recorder.requests().size(), 1u);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(device::sim_launch_host_func(s[i], slow_work, &work[i]));
      ASSERT_TRUE(pool.deallocate(blocks[i], sizes[i], s[i]));
    }
    before = pool.statistics();  // B, C and D took their blocks from A's list
  }
  // Whether work queued on `on` now runs only after every work in `after` finished.
  int ordered_after(device::stream on, std::vector<queued_work*> after) {
    watcher w;
    w.after = std::move(after);
    EXPECT_TRUE(device::sim_launch_host_func(on, watch, &w));
    EXPECT_TRUE(dev().synchronize_stream(on));
    return w.saw_all_done.load();
  }
  ~four_stream_setup() {
    for (int i = 0; i < 4; ++i) (void)dev().synchronize_stream(s[i]);
  }
};

TEST(pool_resource, a_miss_takes_the_best_fit_another_stream_freed_ordered_after_its_work) {
  if (dev().kind() != device::backend_kind::sim) GTEST_SKIP() << "uses sim host functions as kernels";
  four_stream_setup f;
  f.allocate_then_free_under_work();
  if (HasFatalFailure()) return;
  auto q = f.pool.allocate(3 * mib, f.s[0]);  // fits only in B's block
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(*q, f.blocks[1]);
  EXPECT_EQ(f.recorder.requests().size(), 1u) << "served without growing";
  EXPECT_EQ(f.pool.statistics().cross_stream_waits - f.before.cross_stream_waits, 1u);
  EXPECT_EQ(f.ordered_after(f.s[0], {&f.work[1]}), 1) << "A used B's block before B's work on it finished";
  ASSERT_TRUE(f.pool.deallocate(*q, 3 * mib, f.s[0]));
  EXPECT_TRUE(f.pool.check_invariants()) << f.pool.check_invariants().to_string();
}

TEST(pool_resource, a_miss_no_single_list_holds_grows_while_the_upstream_has_room) {
  if (dev().kind() != device::backend_kind::sim) GTEST_SKIP() << "uses sim host functions as kernels";
  four_stream_setup f;
  f.allocate_then_free_under_work();
  if (HasFatalFailure()) return;
  auto q = f.pool.allocate(6 * mib, f.s[0]);
  ASSERT_TRUE(q) << q.error().to_string();
  auto stats = f.pool.statistics();
  EXPECT_EQ(stats.upstream_allocations, 2u);
  EXPECT_EQ(stats.free_list_merges, 0u);
  EXPECT_EQ(stats.cross_stream_waits, f.before.cross_stream_waits) << "no stream waits on another for growth";
  ASSERT_TRUE(f.pool.deallocate(*q, 6 * mib, f.s[0]));
}

TEST(pool_resource, a_refused_growth_merges_other_streams_lists_until_neighbours_coalesce_into_a_fit) {
  if (dev().kind() != device::backend_kind::sim) GTEST_SKIP() << "uses sim host functions as kernels";
  four_stream_setup f(8 * mib);  // the device is full
  f.allocate_then_free_under_work();
  if (HasFatalFailure()) return;
  // 6 MiB fits in no single list; A's [0, 1M) merged with B's [1M, 5M) and C's [5M, 7M) does.
  auto q = f.pool.allocate(6 * mib, f.s[0]);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(*q, f.blocks[0]);
  auto stats = f.pool.statistics();
  EXPECT_EQ(stats.upstream_allocations, 1u) << "served without growing";
  EXPECT_EQ(stats.upstream_blocks_returned, 0u);
  EXPECT_EQ(stats.free_list_merges, 2u) << "B's and C's lists; D's is not needed";
  EXPECT_EQ(stats.cross_stream_waits - f.before.cross_stream_waits, 2u);
  EXPECT_EQ(stats.free_blocks, 2u);  // A's [6M, 7M) and D's [7M, 8M)
  EXPECT_EQ(f.ordered_after(f.s[0], {&f.work[1], &f.work[2]}), 1)
      << "A used B's or C's memory before their work on it finished";
  EXPECT_TRUE(f.pool.check_invariants()) << f.pool.check_invariants().to_string();
  ASSERT_TRUE(f.pool.deallocate(*q, 6 * mib, f.s[0]));
}

TEST(pool_resource, a_refused_growth_skips_a_useless_merge_and_returns_free_blocks_after_their_work) {
  if (dev().kind() != device::backend_kind::sim) GTEST_SKIP() << "uses sim host functions as kernels";
  four_stream_setup f(12 * mib);  // room for 4 MiB more: less than the 9 MiB growth needs
  f.allocate_then_free_under_work();
  if (HasFatalFailure()) return;
  // 8 MiB are free in all, too few to merge for; the upstream block holding them is entirely
  // free, so it goes back and a 9 MiB one takes its place.
  auto q = f.pool.allocate(9 * mib, f.s[0]);
  ASSERT_TRUE(q) << q.error().to_string();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(f.work[i].done.load()) << "the block went upstream while stream " << i << "'s work used it";
  }
  auto stats = f.pool.statistics();
  EXPECT_EQ(stats.free_list_merges, 0u);
  EXPECT_EQ(stats.cross_stream_waits, f.before.cross_stream_waits) << "no stream waits on another for nothing";
  EXPECT_EQ(stats.upstream_blocks_returned, 1u);
  EXPECT_EQ(f.recorder.granted(), (std::vector<std::size_t>{8 * mib, 9 * mib}));
  EXPECT_EQ(f.recorder.deallocations(), 1u);
  EXPECT_TRUE(f.pool.check_invariants()) << f.pool.check_invariants().to_string();
  ASSERT_TRUE(f.pool.deallocate(*q, 9 * mib, f.s[0]));
}

TEST(pool_resource, four_streams_reuse_each_others_free_memory_once_the_device_is_full) {
  // RMM's random-allocations shape on four streams (the benchmark that found the pool failing
  // with the device full of its own free memory): sizes up to 8 MiB, at most 16 MiB live, blocks
  // freed on the stream that allocated them, on a device of 48 MiB. Every allocation succeeds.
  device_resource device;
  limiting_adaptor upstream(device, 48 * mib);
  pool_resource pool(upstream, options_with(2 * mib));
  streams s(4);
  seeded_rng rng(1);
  struct live_block {
    void* p;
    std::size_t bytes;
    int stream;
  };
  std::vector<live_block> live;
  std::size_t live_bytes = 0;
  int next_stream = 0;
  for (int op = 0; op < 2000; ++op) {
    const std::size_t bytes = rng.between(1, 8 * mib);
    if (live.empty() || (rng.between(0, 99) < 73 && live_bytes + bytes < 16 * mib)) {
      const int st = next_stream++ % 4;
      auto p = pool.allocate(bytes, s[st]);
      ASSERT_TRUE(p) << "op " << op << ": " << p.error().to_string();
      live.push_back({*p, bytes, st});
      live_bytes += bytes;
    } else {
      const std::size_t i = rng.between(0, live.size() - 1);
      ASSERT_TRUE(pool.deallocate(live[i].p, live[i].bytes, s[live[i].stream]));
      live_bytes -= live[i].bytes;
      live[i] = live.back();
      live.pop_back();
    }
    if (op % 101 == 0) {
      ASSERT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
    }
  }
  for (auto& b : live) ASSERT_TRUE(pool.deallocate(b.p, b.bytes, s[b.stream]));
  EXPECT_LE(upstream.allocated_bytes(), 48 * mib);
  EXPECT_GT(pool.statistics().cross_stream_waits, 0u);
  ASSERT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
}

TEST(pool_resource, release_returns_every_upstream_block) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib));
  std::vector<void*> live;
  for (int i = 0; i < 4; ++i) live.push_back(*pool.allocate(mib));
  const std::size_t grown = upstream.granted().size();
  ASSERT_GE(grown, 3u);
  for (void* p : live) ASSERT_TRUE(pool.deallocate(p, mib));
  auto st = pool.release();
  ASSERT_TRUE(st) << st.to_string();
  EXPECT_EQ(upstream.deallocations(), grown);
  EXPECT_EQ(upstream.live_bytes(), 0u);
  auto stats = pool.statistics();
  EXPECT_EQ(stats.pool_bytes, 0u);
  EXPECT_EQ(stats.upstream_blocks, 0u);
  // Usable again afterwards, starting over from the initial size.
  auto p = pool.allocate(kib);
  ASSERT_TRUE(p);
  EXPECT_EQ(upstream.requests().back(), mib);
  ASSERT_TRUE(pool.deallocate(*p, kib));
}

TEST(pool_resource, release_fails_clearly_while_blocks_are_live) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib));
  auto p = pool.allocate(kib);
  ASSERT_TRUE(p);
  auto st = pool.release();
  EXPECT_EQ(st.code(), errc::busy);
  EXPECT_NE(st.message().find("still allocated"), std::string::npos) << st.message();
  EXPECT_EQ(upstream.deallocations(), 0u);
  EXPECT_EQ(pool.statistics().pool_bytes, mib);
  ASSERT_TRUE(pool.deallocate(*p, kib));
  EXPECT_TRUE(pool.release());
}

TEST(pool_resource, destructor_returns_upstream_blocks) {
  test_upstream upstream(dev());
  {
    pool_resource pool(upstream, options_with(mib));
    void* p = *pool.allocate(2 * mib);
    ASSERT_TRUE(pool.deallocate(p, 2 * mib));
  }
  EXPECT_EQ(upstream.deallocations(), upstream.granted().size());
  EXPECT_EQ(upstream.live_bytes(), 0u);
}

TEST(pool_resource, destructor_reports_blocks_still_allocated) {
  test_upstream upstream(dev());
  ::testing::internal::CaptureStderr();
  {
    pool_resource pool(upstream, options_with(mib));
    ASSERT_TRUE(pool.allocate(1000));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("faultline: pool_resource destroyed with 1 block(s) (1024 bytes) still allocated"),
            std::string::npos)
      << err;
  EXPECT_EQ(upstream.live_bytes(), 0u);
}

TEST(pool_resource, deallocate_rejects_foreign_pointers_wrong_sizes_and_double_frees) {
  device_resource upstream;
  pool_resource pool(upstream, options_with(mib));
  auto p = pool.allocate(kib);
  ASSERT_TRUE(p);
  int local = 0;
  EXPECT_EQ(pool.deallocate(&local, kib).code(), errc::invalid_argument);
  auto wrong = pool.deallocate(*p, 4 * kib);
  EXPECT_EQ(wrong.code(), errc::invalid_argument);
  EXPECT_NE(wrong.message().find("holds 1024 bytes"), std::string::npos) << wrong.message();
  EXPECT_TRUE(pool.deallocate(*p, kib - 10));  // same size once rounded
  auto twice = pool.deallocate(*p, kib);
  EXPECT_EQ(twice.code(), errc::invalid_argument);
  EXPECT_NE(twice.message().find("already freed"), std::string::npos);
  EXPECT_EQ(pool.deallocate(nullptr, kib).code(), errc::invalid_argument);
  EXPECT_EQ(pool.deallocate(*p, 0).code(), errc::invalid_argument);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(pool_resource, rejects_zero_and_impossible_sizes_cleanly) {
  device_resource upstream;
  pool_resource pool(upstream, options_with(mib));
  EXPECT_EQ(pool.allocate(0).code(), errc::invalid_argument);
  EXPECT_EQ(pool.allocate(std::numeric_limits<std::size_t>::max()).code(), errc::out_of_memory);
  EXPECT_EQ(pool.allocate(std::numeric_limits<std::size_t>::max() / 2).code(), errc::out_of_memory);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(pool_resource, invalid_options_are_reported_by_validate_and_allocate) {
  pool_options bad = options_with(4 * mib, mib);
  auto v = pool_resource::validate(bad);
  EXPECT_EQ(v.code(), errc::invalid_argument);
  EXPECT_NE(v.message().find("maximum_size_bytes"), std::string::npos);
  device_resource upstream;
  pool_resource pool(upstream, bad);
  auto p = pool.allocate(kib);
  EXPECT_EQ(p.code(), errc::invalid_argument);
  EXPECT_EQ(pool_resource::validate(options_with(0)).code(), errc::invalid_argument);
  pool_options bad_device = options_with(mib);
  bad_device.device = -7;
  EXPECT_EQ(pool_resource::validate(bad_device).code(), errc::invalid_argument);
  EXPECT_TRUE(pool_resource::validate(options_with(mib, mib)));
}

TEST(pool_resource, random_alloc_free_sequences_keep_the_invariants) {
  for (std::uint64_t seed : {1ull, 2ull, 42ull}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    seeded_rng rng(seed);
    test_upstream upstream(dev());
    pool_resource pool(upstream, options_with(256 * kib));
    streams s(3);
    struct live_block {
      void* p;
      std::size_t bytes;
      int stream;
    };
    std::vector<live_block> live;
    for (int op = 0; op < 3000; ++op) {
      const bool do_alloc = live.empty() || (live.size() < 200 && rng.between(0, 99) < 55);
      if (do_alloc) {
        const std::size_t bytes = rng.between(0, 3) == 0 ? rng.between(1, 256 * kib) : rng.between(1, 8 * kib);
        const int st = static_cast<int>(rng.between(0, 2));
        auto p = pool.allocate(bytes, s[st]);
        ASSERT_TRUE(p) << p.error().to_string();
        live.push_back({*p, bytes, st});
      } else {
        const std::size_t i = rng.between(0, live.size() - 1);
        // Freed on a random stream: blocks migrate between the streams' lists.
        const int st = static_cast<int>(rng.between(0, 2));
        ASSERT_TRUE(pool.deallocate(live[i].p, live[i].bytes, s[st]));
        live[i] = live.back();
        live.pop_back();
      }
      if (op % 97 == 0) {
        ASSERT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
      }
    }
    for (auto& b : live) ASSERT_TRUE(pool.deallocate(b.p, b.bytes, s[b.stream]));
    ASSERT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
    auto stats = pool.statistics();
    EXPECT_EQ(stats.live_bytes, 0u);
    EXPECT_EQ(stats.free_bytes, stats.pool_bytes);
    EXPECT_GT(stats.cross_stream_waits, 0u);
    ASSERT_TRUE(pool.release());
    EXPECT_EQ(upstream.live_bytes(), 0u);
  }
}

TEST(pool_resource, concurrent_threads_on_their_own_streams_keep_the_invariants) {
  test_upstream upstream(dev());
  pool_resource pool(upstream, options_with(mib));
  constexpr int threads = 4;
  streams s(threads);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      seeded_rng rng(100 + t);
      std::vector<std::pair<void*, std::size_t>> live;
      for (int op = 0; op < 2000; ++op) {
        if (live.empty() || (live.size() < 32 && rng.between(0, 1) == 0)) {
          const std::size_t bytes = rng.between(1, 64 * kib);
          auto p = pool.allocate(bytes, s[t]);
          if (!p) {
            ++failures;
            continue;
          }
          live.emplace_back(*p, bytes);
        } else {
          const std::size_t i = rng.between(0, live.size() - 1);
          if (!pool.deallocate(live[i].first, live[i].second, s[t])) ++failures;
          live[i] = live.back();
          live.pop_back();
        }
      }
      for (auto [p, n] : live) {
        if (!pool.deallocate(p, n, s[t])) ++failures;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
  EXPECT_EQ(pool.statistics().live_bytes, 0u);
}

TEST(pool_resource, check_invariants_names_each_violated_invariant) {
  device_resource upstream;
  {
    pool_resource pool(upstream, options_with(64 * kib));
    void* p = *pool.allocate(4 * kib);
    // A free block planted over the live one.
    detail::pool_test_access::plant_free_block(pool, {}, addr(p), 256, detail::pool_test_access::any_upstream_id(pool));
    auto st = pool.check_invariants();
    EXPECT_EQ(st.code(), errc::internal);
    EXPECT_NE(st.message().find("'free and live blocks never overlap'"), std::string::npos) << st.message();
  }
  {
    pool_resource pool(upstream, options_with(64 * kib));
    (void)*pool.allocate(4 * kib);
    // The free tail split in two touching blocks left unmerged on one list.
    detail::pool_test_access::split_without_merging(pool, {});
    auto st = pool.check_invariants();
    EXPECT_EQ(st.code(), errc::internal);
    EXPECT_NE(st.message().find("'free lists address-ordered and coalesced'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("not coalesced"), std::string::npos) << st.message();
  }
  {
    pool_resource pool(upstream, options_with(64 * kib));
    void* p = *pool.allocate(4 * kib);
    // A block on another list (stand-in stream key 0x2) over the free tail [p + 4K, p + 64K).
    detail::pool_test_access::plant_free_block(pool, device::stream{reinterpret_cast<void*>(0x2)}, addr(p) + 8 * kib,
                                               4 * kib, detail::pool_test_access::any_upstream_id(pool));
    auto st = pool.check_invariants();
    EXPECT_EQ(st.code(), errc::internal);
    EXPECT_NE(st.message().find("'free blocks never overlap'"), std::string::npos) << st.message();
  }
  {
    pool_resource pool(upstream, options_with(64 * kib));
    (void)*pool.allocate(4 * kib);
    // A free block in no upstream block (pool size adjusted so that only containment fails).
    static char host[512];
    detail::pool_test_access::plant_free_block(pool, {}, addr(host), 256,
                                               detail::pool_test_access::any_upstream_id(pool));
    detail::pool_test_access::add_pool_bytes(pool, 256);
    auto st = pool.check_invariants();
    EXPECT_EQ(st.code(), errc::internal);
    EXPECT_NE(st.message().find("'every block inside exactly one upstream block'"), std::string::npos) << st.message();
  }
  {
    pool_resource pool(upstream, options_with(64 * kib));
    (void)*pool.allocate(4 * kib);
    detail::pool_test_access::add_pool_bytes(pool, 4 * kib);
    auto st = pool.check_invariants();
    EXPECT_EQ(st.code(), errc::internal);
    EXPECT_NE(st.message().find("'free + live = pool size'"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace faultline::core::alloc
