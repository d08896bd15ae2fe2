// detail::free_list, the pool's per-stream free list over boundary-tagged block chains: exact
// best fit with a deterministic tie-break, splitting in place, merging with both physical
// neighbours but never across chains (upstream blocks) or lists (streams) until one list absorbs
// another, size classes that keep order, and a self-check that catches a list left uncoalesced.
// Pure host bookkeeping: addresses are numbers.
#include "core/alloc/detail/free_list.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

#include "core/alloc/alloc_test_util.h"

namespace faultline::core::alloc::detail {
namespace {

// A chain of blocks tiling [base, base + sum(sizes)) of one upstream block, all live.
std::vector<block_node*> make_chain(node_pool& pool, std::uintptr_t base, std::initializer_list<std::size_t> sizes,
                                    std::uint64_t upstream_id = 1) {
  std::vector<block_node*> chain;
  for (std::size_t bytes : sizes) {
    block_node* n = pool.acquire();
    n->address = base;
    n->bytes = bytes;
    n->upstream_id = upstream_id;
    if (!chain.empty()) {
      n->phys_prev = chain.back();
      chain.back()->phys_next = n;
    }
    chain.push_back(n);
    base += bytes;
  }
  return chain;
}

TEST(free_list, take_best_fit_splits_the_smallest_fitting_block_and_keeps_the_rest_in_place) {
  node_pool pool;
  free_list list;
  auto c = make_chain(pool, 0x10000, {4096, 256, 1024, 256, 2048, 256});
  list.insert(c[0], pool);
  list.insert(c[2], pool);
  list.insert(c[4], pool);
  block_node* b = list.take_best_fit(1536, pool);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b, c[4]);
  EXPECT_EQ(b->bytes, 1536u);
  EXPECT_EQ(b->owner, nullptr);
  block_node* rest = b->phys_next;
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->address, c[4]->address + 1536);
  EXPECT_EQ(rest->bytes, 512u);
  EXPECT_EQ(rest->owner, &list);
  EXPECT_EQ(rest->phys_next, c[5]);
  EXPECT_EQ(c[5]->phys_prev, rest);
  EXPECT_EQ(list.total_bytes(), 4096u + 1024 + 512);
  EXPECT_EQ(list.block_count(), 3u);
  EXPECT_EQ(list.check(), "");
}

TEST(free_list, take_best_fit_picks_the_lowest_address_among_equal_sizes_and_fails_when_nothing_fits) {
  node_pool pool;
  free_list list;
  auto c = make_chain(pool, 0x40000, {1024, 256, 1024, 256});
  list.insert(c[2], pool);
  list.insert(c[0], pool);
  EXPECT_EQ(list.best_fit_bytes(1024), 1024u);
  EXPECT_EQ(list.best_fit_bytes(1280), 0u);
  EXPECT_EQ(list.take_best_fit(2048, pool), nullptr);
  block_node* b = list.take_best_fit(1024, pool);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->address, 0x40000u);
}

TEST(free_list, best_fit_looks_past_smaller_blocks_of_the_same_size_class) {
  node_pool pool;
  free_list list;
  // 40 and 41 granules share a size class; the request needs 41.
  auto c = make_chain(pool, 0x100000, {40 * 256, 256, 41 * 256, 256, 64 * 256, 256});
  ASSERT_EQ(free_list::bin_of(40 * 256), free_list::bin_of(41 * 256));
  list.insert(c[0], pool);
  list.insert(c[2], pool);
  list.insert(c[4], pool);
  block_node* b = list.take_best_fit(41 * 256, pool);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b, c[2]);
  EXPECT_EQ(b->bytes, 41u * 256);
}

TEST(free_list, insert_merges_with_both_physical_neighbours) {
  node_pool pool;
  free_list list;
  auto c = make_chain(pool, 0x1000, {256, 256, 256});
  list.insert(c[0], pool);
  list.insert(c[2], pool);
  EXPECT_EQ(list.block_count(), 2u);
  block_node* merged = list.insert(c[1], pool);
  ASSERT_EQ(list.block_count(), 1u);
  EXPECT_EQ(merged, c[0]);
  EXPECT_EQ(merged->address, 0x1000u);
  EXPECT_EQ(merged->bytes, 768u);
  EXPECT_EQ(merged->phys_next, nullptr);
  EXPECT_EQ(list.largest_bytes(), 768u);
  EXPECT_EQ(list.check(), "");
}

TEST(free_list, blocks_of_different_upstream_blocks_never_merge_even_when_adjacent) {
  node_pool pool;
  free_list list;
  auto first = make_chain(pool, 0x1000, {256}, 1);
  auto second = make_chain(pool, 0x1100, {256}, 2);  // starts where the first ends
  list.insert(first[0], pool);
  list.insert(second[0], pool);
  EXPECT_EQ(list.block_count(), 2u);
  EXPECT_EQ(list.take_best_fit(512, pool), nullptr);
  EXPECT_EQ(list.check(), "");
}

TEST(free_list, blocks_on_different_lists_never_merge) {
  node_pool pool;
  free_list stream_a;
  free_list stream_b;
  auto c = make_chain(pool, 0x1000, {256, 256});
  stream_a.insert(c[0], pool);
  stream_b.insert(c[1], pool);
  EXPECT_EQ(stream_a.block_count(), 1u);
  EXPECT_EQ(stream_b.block_count(), 1u);
  EXPECT_EQ(stream_a.check(), "");
  EXPECT_EQ(stream_b.check(), "");
}

TEST(free_list, absorb_moves_every_block_and_coalesces_neighbours_across_the_two_lists) {
  node_pool pool;
  free_list stream_a;
  free_list stream_b;
  // a b a _ b b: the two lists interleave in one chain; the last two touch on b's list already.
  auto c = make_chain(pool, 0x1000, {256, 512, 256, 256, 1024, 256});
  stream_a.insert(c[0], pool);
  stream_b.insert(c[1], pool);
  stream_a.insert(c[2], pool);
  stream_b.insert(c[4], pool);
  stream_b.insert(c[5], pool);
  ASSERT_EQ(stream_a.block_count(), 2u);
  ASSERT_EQ(stream_b.block_count(), 2u);
  stream_a.absorb(stream_b, pool);
  EXPECT_TRUE(stream_b.empty());
  EXPECT_EQ(stream_b.total_bytes(), 0u);
  EXPECT_EQ(stream_b.check(), "");
  // [0x1000, +1024) from a, b, a; then c[3] (live) keeps [c4, c5] apart.
  EXPECT_EQ(stream_a.block_count(), 2u);
  EXPECT_EQ(stream_a.total_bytes(), 256u + 512 + 256 + 1024 + 256);
  EXPECT_EQ(c[0]->bytes, 1024u);
  EXPECT_EQ(c[0]->phys_next, c[3]);
  EXPECT_EQ(stream_a.largest_bytes(), 1280u);
  EXPECT_EQ(stream_a.check(), "");
}

TEST(free_list, remove_takes_one_block_off_without_touching_its_neighbours) {
  node_pool pool;
  free_list list;
  auto c = make_chain(pool, 0x1000, {256, 256, 512, 256});
  list.insert(c[0], pool);
  list.insert(c[2], pool);
  list.remove(c[2]);
  EXPECT_EQ(c[2]->owner, nullptr);
  EXPECT_EQ(c[2]->bytes, 512u);
  EXPECT_EQ(c[1]->phys_next, c[2]);
  EXPECT_EQ(list.block_count(), 1u);
  EXPECT_EQ(list.total_bytes(), 256u);
  EXPECT_EQ(list.best_fit_bytes(512), 0u);
  EXPECT_EQ(list.check(), "");
}

TEST(free_list, check_reports_touching_blocks_left_unmerged) {
  node_pool pool;
  free_list list;
  auto c = make_chain(pool, 0x1000, {256, 256});
  list.insert_uncoalesced_for_testing(c[0]);
  list.insert_uncoalesced_for_testing(c[1]);
  EXPECT_NE(list.check().find("not coalesced"), std::string::npos) << list.check();
}

TEST(free_list, size_classes_keep_size_order_and_are_exact_for_small_blocks) {
  std::uint32_t last = 0;
  for (std::size_t granules = 1; granules < (std::size_t{1} << 20); granules += 1 + granules / 64) {
    const std::uint32_t b = free_list::bin_of(granules * 256);
    EXPECT_GE(b, last) << granules;
    last = b;
    if (granules < 32) {
      EXPECT_EQ(b, granules);
    }
  }
  EXPECT_LT(free_list::bin_of(free_list::max_block_bytes - 256), free_list::bin_count);
}

TEST(free_list, random_takes_and_returns_stay_consistent_and_end_in_one_block) {
  testing::seeded_rng rng(7);
  node_pool pool;
  free_list list;
  // One upstream block of 1024 granules, handed out and returned in random order.
  auto whole = make_chain(pool, 0x100000, {1024 * 256});
  list.insert(whole[0], pool);
  std::vector<block_node*> taken;
  for (int i = 0; i < 5000; ++i) {
    if (taken.empty() || rng.between(0, 1) == 0) {
      if (block_node* b = list.take_best_fit(rng.between(1, 16) * 256, pool)) taken.push_back(b);
    } else {
      const std::size_t k = rng.between(0, taken.size() - 1);
      list.insert(taken[k], pool);
      taken[k] = taken.back();
      taken.pop_back();
    }
    if (i % 250 == 0) {
      ASSERT_EQ(list.check(), "") << "after op " << i;
    }
  }
  for (block_node* b : taken) list.insert(b, pool);
  EXPECT_EQ(list.check(), "");
  ASSERT_EQ(list.block_count(), 1u);
  EXPECT_EQ(list.total_bytes(), 1024u * 256);
}

}  // namespace
}  // namespace faultline::core::alloc::detail
