// Sharding: the flag and the GoogleTest environment convention, and the property that makes
// sharding correct — every run lands in exactly one shard.
#include "harness/shard.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "harness/campaign.h"

namespace faultline::harness {
namespace {

TEST(shard, every_run_lands_in_exactly_one_shard) {
  for (std::uint64_t n : {1u, 2u, 3u, 7u, 16u}) {
    for (std::uint64_t run = 0; run < 1000; ++run) {
      int owners = 0;
      for (std::uint64_t i = 0; i < n; ++i) owners += shard{i, n}.owns(run) ? 1 : 0;
      EXPECT_EQ(owners, 1) << "run " << run << " of " << n << " shards";
    }
  }
}

TEST(shard, owned_runs_add_up_to_the_total) {
  for (std::uint64_t n : {1u, 3u, 4u, 10u}) {
    for (std::uint64_t total : {0u, 1u, 5u, 99u, 100u}) {
      std::uint64_t sum = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        std::uint64_t counted = 0;
        for (std::uint64_t k = 0; k < total; ++k) counted += shard{i, n}.owns(k);
        EXPECT_EQ(owned_runs(total, shard{i, n}), counted);
        sum += counted;
      }
      EXPECT_EQ(sum, total);
    }
  }
}

TEST(parse_shard, reads_index_and_count) {
  auto s = parse_shard("2/5");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->index, 2u);
  EXPECT_EQ(s->count, 5u);
  EXPECT_EQ(s->to_string(), "2/5");
}

TEST(parse_shard, rejects_bad_forms_naming_the_problem) {
  EXPECT_NE(parse_shard("5/5").error().message().find("not below the shard count"), std::string::npos);
  EXPECT_NE(parse_shard("0/0").error().message().find("at least 1"), std::string::npos);
  EXPECT_NE(parse_shard("1").error().message().find("INDEX/COUNT"), std::string::npos);
  EXPECT_NE(parse_shard("a/2").error().message().find("INDEX/COUNT"), std::string::npos);
  EXPECT_NE(parse_shard("-1/2").error().message().find("INDEX/COUNT"), std::string::npos);
}

std::map<std::string, std::string> fake_env;
const char* fake_getenv(const char* name) {
  auto it = fake_env.find(name);
  return it == fake_env.end() ? nullptr : it->second.c_str();
}

TEST(shard_from_env, follows_the_gtest_variables) {
  fake_env = {};
  auto none = shard_from_env(fake_getenv);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());

  fake_env = {{"GTEST_TOTAL_SHARDS", "4"}, {"GTEST_SHARD_INDEX", "3"}};
  auto s = shard_from_env(fake_getenv);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->index, 3u);
  EXPECT_EQ((*s)->count, 4u);
}

TEST(shard_from_env, rejects_half_or_malformed_settings) {
  fake_env = {{"GTEST_TOTAL_SHARDS", "4"}};
  EXPECT_FALSE(shard_from_env(fake_getenv));
  fake_env = {{"GTEST_TOTAL_SHARDS", "4"}, {"GTEST_SHARD_INDEX", "4"}};
  EXPECT_FALSE(shard_from_env(fake_getenv));
  fake_env = {{"GTEST_TOTAL_SHARDS", "four"}, {"GTEST_SHARD_INDEX", "0"}};
  EXPECT_FALSE(shard_from_env(fake_getenv));
}

}  // namespace
}  // namespace faultline::harness
