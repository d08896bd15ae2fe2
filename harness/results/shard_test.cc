// Sharding: the flag, the schedulers' environment conventions (GoogleTest, Kubernetes Indexed
// Jobs, Slurm job arrays), and the property that makes sharding correct — every run lands in
// exactly one shard. The environment is a fake getenv over a map, so each case states exactly
// which variables a scheduler would set.
#include "harness/results/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

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

// The error message of shard_from_scheduler under `env`, or "" when it succeeds.
std::string scheduler_error(std::map<std::string, std::string> env) {
  fake_env = std::move(env);
  auto s = shard_from_scheduler(fake_getenv);
  if (s) return "";
  EXPECT_EQ(s.error().code(), core::errc::invalid_argument);
  return s.error().message();
}

shard scheduled(std::map<std::string, std::string> env) {
  fake_env = std::move(env);
  auto s = shard_from_scheduler(fake_getenv);
  EXPECT_TRUE(s) << s.error().message();
  if (!s || !s->has_value()) {
    ADD_FAILURE() << "no shard";
    return {};
  }
  return (*s)->part;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(shard_from_scheduler, finds_nothing_when_no_scheduler_variable_is_set) {
  fake_env = {{"PATH", "/usr/bin"}, {"SLURM_JOB_ID", "17"}};
  auto s = shard_from_scheduler(fake_getenv);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->has_value());
}

TEST(shard_from_scheduler, follows_the_gtest_variables_and_names_them) {
  fake_env = {{"GTEST_TOTAL_SHARDS", "4"}, {"GTEST_SHARD_INDEX", "3"}, {"PATH", "/usr/bin"}};
  auto s = shard_from_scheduler(fake_getenv);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->part.to_string(), "3/4");
  EXPECT_EQ((*s)->source, "GTEST_SHARD_INDEX=3 of GTEST_TOTAL_SHARDS=4");
  EXPECT_EQ(std::set<std::string>((*s)->consumed.begin(), (*s)->consumed.end()),
            (std::set<std::string>{"GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX"}));
}

TEST(shard_from_scheduler, takes_a_kubernetes_completion_index_with_the_count_the_manifest_sets) {
  fake_env = {{"JOB_COMPLETION_INDEX", "5"}, {"FAULTLINE_SHARD_COUNT", "8"}};
  auto s = shard_from_scheduler(fake_getenv);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->part.to_string(), "5/8");
  EXPECT_EQ((*s)->source, "JOB_COMPLETION_INDEX=5 of FAULTLINE_SHARD_COUNT=8");
  EXPECT_EQ(std::set<std::string>((*s)->consumed.begin(), (*s)->consumed.end()),
            (std::set<std::string>{"JOB_COMPLETION_INDEX", "FAULTLINE_SHARD_COUNT"}));
}

TEST(shard_from_scheduler, asks_for_faultline_shard_count_when_kubernetes_gives_only_the_index) {
  auto m = scheduler_error({{"JOB_COMPLETION_INDEX", "2"}});
  EXPECT_TRUE(contains(m, "JOB_COMPLETION_INDEX=2")) << m;
  EXPECT_TRUE(contains(m, "set FAULTLINE_SHARD_COUNT")) << m;
  EXPECT_TRUE(contains(m, "spec.completions")) << m;
  m = scheduler_error({{"FAULTLINE_SHARD_COUNT", "8"}});
  EXPECT_TRUE(contains(m, "FAULTLINE_SHARD_COUNT=8 is set but JOB_COMPLETION_INDEX is not")) << m;
}

TEST(shard_from_scheduler, maps_every_task_of_a_slurm_range_onto_one_shard) {
  struct array {
    const char* spec;  // what sbatch --array was given, for the failure message
    std::uint64_t min, step, count;
  };
  for (const array a : {array{"0-7", 0, 1, 8}, array{"1-8", 1, 1, 8}, array{"0-15:2", 0, 2, 8}, array{"3-9:3", 3, 3, 3}}) {
    std::set<std::uint64_t> indexes;
    for (std::uint64_t k = 0; k < a.count; ++k) {
      const std::uint64_t id = a.min + k * a.step;
      shard s = scheduled({{"SLURM_ARRAY_TASK_ID", std::to_string(id)},
                           {"SLURM_ARRAY_TASK_COUNT", std::to_string(a.count)},
                           {"SLURM_ARRAY_TASK_MIN", std::to_string(a.min)},
                           {"SLURM_ARRAY_TASK_MAX", std::to_string(a.min + (a.count - 1) * a.step)},
                           {"SLURM_ARRAY_TASK_STEP", std::to_string(a.step)}});
      EXPECT_EQ(s.count, a.count) << "--array=" << a.spec << ", task " << id;
      indexes.insert(s.index);
    }
    EXPECT_EQ(indexes.size(), a.count) << "--array=" << a.spec;
    EXPECT_EQ(*indexes.rbegin(), a.count - 1) << "--array=" << a.spec;
  }
}

TEST(shard_from_scheduler, reads_a_slurm_array_without_step_or_max_as_a_unit_step_range) {
  EXPECT_EQ(scheduled({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "1"}})
                .to_string(),
            "3/8");
  fake_env = {{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "1"},
              {"SLURM_ARRAY_TASK_STEP", "2"}, {"SLURM_ARRAY_JOB_ID", "77"}};
  auto s = shard_from_scheduler(fake_getenv);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->part.to_string(), "2/8");
  EXPECT_EQ((*s)->source,
            "SLURM_ARRAY_TASK_ID=5 of SLURM_ARRAY_TASK_COUNT=8 (SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_STEP=2)");
  EXPECT_EQ(std::count((*s)->consumed.begin(), (*s)->consumed.end(), "SLURM_ARRAY_JOB_ID"), 0);
}

TEST(shard_from_scheduler, refuses_a_slurm_id_list_and_suggests_the_flag) {
  // --array=1,3,7: Slurm sets COUNT=3, MIN=1, MAX=7; whatever STEP it reports, no task may guess
  // its index, so every task refuses rather than two of them running the same shard.
  for (const char* id : {"1", "3", "7"}) {
    for (const char* step : {"1", "2"}) {
      auto m = scheduler_error({{"SLURM_ARRAY_TASK_ID", id}, {"SLURM_ARRAY_TASK_COUNT", "3"},
                                {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_MAX", "7"},
                                {"SLURM_ARRAY_TASK_STEP", step}});
      EXPECT_TRUE(contains(m, "not evenly spaced")) << id << " step " << step << ": " << m;
      EXPECT_TRUE(contains(m, "--shard i/n")) << m;
    }
  }
  // Without MAX, the id itself gives the list away when it is off the step or past the count.
  auto m = scheduler_error({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "3"},
                            {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_STEP", "2"}});
  EXPECT_TRUE(contains(m, "SLURM_ARRAY_TASK_ID=4")) << m;
  m = scheduler_error({{"SLURM_ARRAY_TASK_ID", "7"}, {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_ARRAY_TASK_MIN", "1"}});
  EXPECT_TRUE(contains(m, "not below the shard count 3")) << m;
}

TEST(shard_from_scheduler, refuses_a_slurm_task_id_without_the_array_count) {
  auto m = scheduler_error({{"SLURM_ARRAY_TASK_ID", "3"}});
  EXPECT_TRUE(contains(m, "SLURM_ARRAY_TASK_ID=3 is set but SLURM_ARRAY_TASK_COUNT is not")) << m;
  EXPECT_TRUE(contains(m, "--shard i/n")) << m;
}

TEST(shard_from_scheduler, names_a_malformed_variable_with_its_value) {
  struct bad {
    std::map<std::string, std::string> env;
    const char* named;
  };
  for (const auto& b : {
           bad{{{"JOB_COMPLETION_INDEX", "x"}, {"FAULTLINE_SHARD_COUNT", "8"}}, "JOB_COMPLETION_INDEX='x'"},
           bad{{{"JOB_COMPLETION_INDEX", "1"}, {"FAULTLINE_SHARD_COUNT", ""}}, "FAULTLINE_SHARD_COUNT=''"},
           bad{{{"GTEST_TOTAL_SHARDS", "4"}, {"GTEST_SHARD_INDEX", "-1"}}, "GTEST_SHARD_INDEX='-1'"},
           bad{{{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "8 "}, {"SLURM_ARRAY_TASK_MIN", "0"}},
               "SLURM_ARRAY_TASK_COUNT='8 '"},
           bad{{{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                {"SLURM_ARRAY_TASK_STEP", "0"}},
               "SLURM_ARRAY_TASK_STEP=0"},
           bad{{{"JOB_COMPLETION_INDEX", "8"}, {"FAULTLINE_SHARD_COUNT", "8"}}, "not below the shard count 8"},
           bad{{{"JOB_COMPLETION_INDEX", "0"}, {"FAULTLINE_SHARD_COUNT", "0"}}, "at least 1"},
       }) {
    auto m = scheduler_error(b.env);
    EXPECT_TRUE(contains(m, b.named)) << b.named << ": " << m;
  }
}

TEST(shard_from_scheduler, accepts_schedulers_that_agree) {
  fake_env = {{"GTEST_TOTAL_SHARDS", "3"}, {"GTEST_SHARD_INDEX", "1"},       {"SLURM_ARRAY_TASK_ID", "2"},
              {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_MAX", "3"}};
  auto s = shard_from_scheduler(fake_getenv);
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->part.to_string(), "1/3");
  EXPECT_TRUE(contains((*s)->source, "GTEST_SHARD_INDEX=1")) << (*s)->source;
  EXPECT_TRUE(contains((*s)->source, "SLURM_ARRAY_TASK_ID=2")) << (*s)->source;
  EXPECT_EQ((*s)->consumed.size(), 6u);
}

TEST(shard_from_scheduler, refuses_schedulers_that_disagree_naming_both) {
  auto m = scheduler_error({{"GTEST_TOTAL_SHARDS", "3"}, {"GTEST_SHARD_INDEX", "1"},
                            {"JOB_COMPLETION_INDEX", "2"}, {"FAULTLINE_SHARD_COUNT", "3"}});
  EXPECT_TRUE(contains(m, "GTEST_SHARD_INDEX=1 of GTEST_TOTAL_SHARDS=3")) << m;
  EXPECT_TRUE(contains(m, "JOB_COMPLETION_INDEX=2 of FAULTLINE_SHARD_COUNT=3")) << m;
  // Same index, different counts: still two different partitions of the runs.
  m = scheduler_error({{"JOB_COMPLETION_INDEX", "0"}, {"FAULTLINE_SHARD_COUNT", "4"}, {"SLURM_ARRAY_TASK_ID", "0"},
                       {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "0"}});
  EXPECT_TRUE(contains(m, "shard 0/4")) << m;
  EXPECT_TRUE(contains(m, "shard 0/8")) << m;
}

TEST(shard_from_env, still_reads_only_the_gtest_variables) {
  fake_env = {{"JOB_COMPLETION_INDEX", "1"}, {"FAULTLINE_SHARD_COUNT", "2"}};
  auto s = shard_from_env(fake_getenv);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->has_value());
}

}  // namespace
}  // namespace faultline::harness
