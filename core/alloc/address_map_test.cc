// detail::address_map, the pool's live-block index: an open-addressing hash map whose deletions
// shift entries back instead of leaving tombstones. Checked against std::unordered_map under a
// seeded random mix of inserts and erases that forces growth and long probe runs.
#include "core/alloc/detail/address_map.h"

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "core/alloc/alloc_test_util.h"

namespace faultline::core::alloc::detail {
namespace {

block_node* tag(std::uintptr_t v) { return reinterpret_cast<block_node*>(v * 8); }

TEST(address_map, finds_what_was_inserted_and_forgets_what_was_erased) {
  address_map map;
  EXPECT_EQ(map.find(0x1000), nullptr);
  EXPECT_FALSE(map.erase(0x1000));
  map.insert(0x1000, tag(1));
  map.insert(0x2000, tag(2));
  EXPECT_EQ(map.find(0x1000), tag(1));
  EXPECT_EQ(map.find(0x2000), tag(2));
  EXPECT_EQ(map.size(), 2u);
  EXPECT_TRUE(map.erase(0x1000));
  EXPECT_EQ(map.find(0x1000), nullptr);
  EXPECT_EQ(map.find(0x2000), tag(2));
  map.clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.find(0x2000), nullptr);
}

TEST(address_map, agrees_with_a_reference_map_under_random_inserts_and_erases) {
  testing::seeded_rng rng(11);
  address_map map;
  std::unordered_map<std::uintptr_t, block_node*> reference;
  std::vector<std::uintptr_t> keys;
  for (int i = 0; i < 20000; ++i) {
    if (keys.empty() || rng.between(0, 99) < 60) {
      // 256-aligned addresses in a narrow range: many share home slots.
      const std::uintptr_t key = 0x7f0000000000ULL + rng.between(1, 4096) * 256;
      if (reference.count(key) != 0) continue;
      map.insert(key, tag(key));
      reference[key] = tag(key);
      keys.push_back(key);
    } else {
      const std::size_t k = rng.between(0, keys.size() - 1);
      ASSERT_TRUE(map.erase(keys[k]));
      reference.erase(keys[k]);
      keys[k] = keys.back();
      keys.pop_back();
    }
    if (i % 1000 == 0) {
      ASSERT_EQ(map.size(), reference.size());
      for (const auto& [key, value] : reference) ASSERT_EQ(map.find(key), value) << key;
      std::size_t seen = 0;
      map.for_each([&](std::uintptr_t key, block_node* value) {
        ++seen;
        EXPECT_EQ(reference.at(key), value);
      });
      ASSERT_EQ(seen, reference.size());
    }
  }
}

}  // namespace
}  // namespace faultline::core::alloc::detail
