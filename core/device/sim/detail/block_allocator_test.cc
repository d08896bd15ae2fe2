// The sim arena allocator on its own: exact fit decisions, coalescing, record exhaustion, and a
// seeded random workload checked against a reference model (no overlap, exact accounting, the
// whole arena free again at the end).
#include "core/device/sim/detail/block_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

namespace faultline::core::device::detail {
namespace {

struct arena {
  explicit arena(std::uint32_t granules, std::uint32_t records = 0)
      : record_store(records != 0 ? records : granules + 1), owner(granules) {
    alloc.init(record_store.data(), static_cast<std::uint32_t>(record_store.size()), owner.data(), granules);
  }
  std::vector<block_record> record_store;
  std::vector<std::uint32_t> owner;
  block_allocator alloc;
};

TEST(block_allocator, hands_out_address_ordered_blocks_from_a_fresh_arena) {
  arena a(1024);
  EXPECT_EQ(a.alloc.allocate(3), 0u);
  EXPECT_EQ(a.alloc.allocate(5), 3u);
  EXPECT_EQ(a.alloc.allocate(1), 8u);
  EXPECT_EQ(a.alloc.granules_in_use(), 9u);
  EXPECT_EQ(a.alloc.state_at(3), block_state::live);
  EXPECT_EQ(a.alloc.size_at(3), 5u);
  EXPECT_EQ(a.alloc.state_at(4), block_state::unused);  // inside a block is not a block
}

TEST(block_allocator, zero_and_oversized_requests_get_no_block) {
  arena a(64);
  EXPECT_EQ(a.alloc.allocate(0), block_allocator::no_block);
  EXPECT_EQ(a.alloc.allocate(65), block_allocator::no_block);
  EXPECT_EQ(a.alloc.allocate(64), 0u);  // the whole arena is one fitting block
  EXPECT_EQ(a.alloc.allocate(1), block_allocator::no_block);
}

TEST(block_allocator, release_coalesces_both_neighbours_into_one_block) {
  arena a(300);
  const auto x = a.alloc.allocate(100);
  const auto y = a.alloc.allocate(100);
  const auto z = a.alloc.allocate(100);
  a.alloc.release(x);
  a.alloc.release(z);
  const auto merged = a.alloc.release(y);
  EXPECT_EQ(merged.start, 0u);
  EXPECT_EQ(merged.size, 300u);
  EXPECT_EQ(a.alloc.allocate(300), 0u);  // only possible if all three merged
}

TEST(block_allocator, fit_inside_a_size_class_is_found_rather_than_reported_out_of_memory) {
  // 101 granules lies strictly inside the class [100, 104): the rounded search starts at the
  // next class, so a lone free block of 102 granules must still be found by scanning its class.
  arena a(302);
  const auto x = a.alloc.allocate(102);
  const auto guard = a.alloc.allocate(200);
  ASSERT_NE(guard, block_allocator::no_block);
  a.alloc.release(x);
  EXPECT_EQ(a.alloc.allocate(101), x);
  EXPECT_EQ(a.alloc.allocate(2), block_allocator::no_block);  // 1 granule left, no fit
}

TEST(block_allocator, freed_block_is_reused_by_the_next_allocation_of_its_size) {
  arena a(4096);
  const auto x = a.alloc.allocate(40);
  a.alloc.allocate(40);
  a.alloc.release(x);
  EXPECT_EQ(a.alloc.allocate(40), x);
}

TEST(block_allocator, without_spare_records_the_whole_free_block_is_handed_out) {
  arena a(100, /*records=*/3);  // index 0 unused, the arena's block, one spare
  const auto x = a.alloc.allocate(10);
  ASSERT_EQ(x, 0u);
  const auto y = a.alloc.allocate(10);  // no record left to split the remainder
  EXPECT_EQ(y, 10u);
  EXPECT_EQ(a.alloc.size_at(y), 90u);
  EXPECT_EQ(a.alloc.granules_in_use(), 100u);
}

TEST(block_allocator, pending_blocks_are_not_live_and_release_like_live_ones) {
  arena a(64);
  const auto x = a.alloc.allocate(8);
  EXPECT_TRUE(a.alloc.mark_pending(x));
  EXPECT_FALSE(a.alloc.mark_pending(x));
  EXPECT_EQ(a.alloc.state_at(x), block_state::pending_free);
  EXPECT_EQ(a.alloc.granules_in_use(), 8u);
  a.alloc.release(x);
  EXPECT_EQ(a.alloc.granules_in_use(), 0u);
  EXPECT_EQ(a.alloc.state_at(x), block_state::unused);
}

TEST(block_allocator, free_after_names_the_free_remainder_behind_a_block) {
  arena a(64);
  const auto x = a.alloc.allocate(8);
  const auto next = a.alloc.free_after(x);
  EXPECT_EQ(next.start, 8u);
  EXPECT_EQ(next.size, 56u);
  a.alloc.allocate(56);
  EXPECT_EQ(a.alloc.free_after(x).size, 0u);
}

TEST(block_allocator, random_workload_never_overlaps_and_accounts_exactly) {
  constexpr std::uint32_t granules = 1 << 16;
  arena a(granules);
  std::uint64_t seed = 0x5eed5eedULL;
  auto next = [&seed] {  // splitmix64: a fixed sequence on every platform
    std::uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::map<std::uint32_t, std::uint32_t> live;  // start -> size
  std::uint64_t expected_in_use = 0;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || next() % 100 < 55) {
      // Mostly small, sometimes large requests, across many size classes.
      const auto size = static_cast<std::uint32_t>(next() % 8 == 0 ? 1 + next() % 4096 : 1 + next() % 64);
      const auto start = a.alloc.allocate(size);
      if (start == block_allocator::no_block) continue;
      const std::uint32_t got = a.alloc.size_at(start);
      ASSERT_GE(got, size);
      auto after = live.lower_bound(start);
      if (after != live.end()) {
        ASSERT_LE(start + got, after->first) << "overlaps the next live block";
      }
      if (after != live.begin()) {
        auto before = std::prev(after);
        ASSERT_LE(before->first + before->second, start) << "overlaps the previous live block";
      }
      live[start] = got;
      expected_in_use += got;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(next() % live.size()));
      a.alloc.release(it->first);
      expected_in_use -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(a.alloc.granules_in_use(), expected_in_use);
  }
  for (const auto& [start, size] : live) a.alloc.release(start);
  EXPECT_EQ(a.alloc.granules_in_use(), 0u);
  EXPECT_EQ(a.alloc.allocate(granules), 0u) << "everything must have coalesced back into one block";
}

}  // namespace
}  // namespace faultline::core::device::detail
