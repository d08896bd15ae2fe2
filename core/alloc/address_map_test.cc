// detail::address_map, the pool's live-block index: a hash table of chains threaded through the
// live nodes themselves. Checked against std::unordered_map under a seeded random mix of inserts
// and erases that forces growth and shared buckets.
#include "core/alloc/detail/address_map.h"

#include <gtest/gtest.h>

#include <unordered_map>
#include <vector>

#include "core/alloc/alloc_test_util.h"

namespace faultline::core::alloc::detail {
namespace {

// Nodes for the keys a test uses, at stable addresses.
class nodes {
 public:
  block_node* at(std::uintptr_t address) {
    block_node*& n = by_address_[address];
    if (n == nullptr) {
      n = pool_.acquire();
      n->address = address;
    }
    return n;
  }

 private:
  node_pool pool_;
  std::unordered_map<std::uintptr_t, block_node*> by_address_;
};

TEST(address_map, finds_what_was_inserted_and_forgets_what_was_erased) {
  nodes tag;
  address_map map;
  EXPECT_EQ(map.find(0x1000), nullptr);
  EXPECT_FALSE(map.erase(0x1000));
  map.insert(tag.at(0x1000));
  map.insert(tag.at(0x2000));
  EXPECT_EQ(map.find(0x1000), tag.at(0x1000));
  EXPECT_EQ(map.find(0x2000), tag.at(0x2000));
  EXPECT_EQ(map.size(), 2u);
  EXPECT_TRUE(map.erase(0x1000));
  EXPECT_EQ(map.find(0x1000), nullptr);
  EXPECT_EQ(map.find(0x2000), tag.at(0x2000));
  map.clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.find(0x2000), nullptr);
}

TEST(address_map, agrees_with_a_reference_map_under_random_inserts_and_erases) {
  testing::seeded_rng rng(11);
  nodes tag;
  address_map map;
  std::unordered_map<std::uintptr_t, block_node*> reference;
  std::vector<std::uintptr_t> keys;
  for (int i = 0; i < 20000; ++i) {
    if (keys.empty() || rng.between(0, 99) < 60) {
      // 256-aligned addresses in a narrow range: many share buckets.
      const std::uintptr_t key = 0x7f0000000000ULL + rng.between(1, 4096) * 256;
      if (reference.count(key) != 0) continue;
      map.insert(tag.at(key));
      reference[key] = tag.at(key);
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
