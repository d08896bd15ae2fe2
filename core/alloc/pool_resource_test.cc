// pool_resource: the pool's placement rules (alignment, best fit, coalescing, never across
// upstream blocks), its growth (doubling, maximum, halving on refusal), stream-ordered reuse
// (observed through a recording backend, and end to end on the sim's stream workers), release,
// and its invariants under seeded random and concurrent alloc/free sequences. Every test runs on
// the process's backend (the sim here); an upstream that records and refuses requests makes the
// growth rules observable.
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

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * 1024;

device::backend& dev() { return device::current(); }

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
  // 3 MiB are free, but in three upstream blocks that never merge, and the cap forbids growth.
  auto spanning = pool.allocate(2 * mib);
  EXPECT_EQ(spanning.code(), errc::out_of_memory);
  EXPECT_EQ(upstream.requests().size(), 3u);
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
