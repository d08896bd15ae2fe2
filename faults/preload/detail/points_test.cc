// The agent's reader of its own points in FAULTLINE_FAULTS: which item applies to exit/start,
// exit/end or a cuda/ name, how terms parse (the grammar subset of faults/spec.h), and fail(9) evaluation.
#include "faults/preload/detail/points.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace faultline::agent::detail {
namespace {

std::uint64_t zero_draw() { return 0; }            // a draw of 0: every probability passes
std::uint64_t max_draw() { return UINT64_MAX; }    // just under 1: only 100% passes

TEST(agent_points, finds_its_item_among_others_and_reads_a_delay) {
  point_plan plan;
  plan_point("sim/*=5%fail(ENOMEM); exit/end = delay(100ms) ;bug/x=print", "exit/end", plan);
  ASSERT_TRUE(plan.enabled);
  EXPECT_STREQ(plan.pattern, "exit/end");
  ASSERT_EQ(plan.term_count, 1u);
  EXPECT_EQ(plan.terms[0].action, point_action::delay);
  EXPECT_EQ(plan.terms[0].delay_ns, 100'000'000u);
  point_plan other;
  plan_point("sim/*=5%fail(ENOMEM); exit/end=delay(100ms)", "exit/start", other);
  EXPECT_FALSE(other.enabled);
}

TEST(agent_points, reads_fail_codes_and_teardown_devices_of_cuda_points) {
  point_plan plan;
  plan_point("cuda/cuMemFree_v2=fail(CUDA_ERROR_LAUNCH_FAILED)->fail(42)->fail->teardown(device)->teardown(2)",
             "cuda/cuMemFree_v2", plan);
  ASSERT_TRUE(plan.enabled);
  ASSERT_EQ(plan.term_count, 5u);
  EXPECT_EQ(plan.terms[0].action, point_action::fail);
  EXPECT_EQ(plan.terms[0].code, 719);
  EXPECT_EQ(plan.terms[1].code, 42);
  EXPECT_EQ(plan.terms[2].code, 1);
  EXPECT_EQ(plan.terms[3].action, point_action::teardown);
  EXPECT_EQ(plan.terms[3].device, current_device);
  EXPECT_EQ(plan.terms[4].device, 2);
  for (const char* bad : {"cuda/x=fail(CUDA_ERROR_NOPE)", "cuda/x=fail(0)", "cuda/x=teardown", "cuda/x=teardown(gpu)"}) {
    point_plan p;
    plan_point(bad, "cuda/x", p);
    EXPECT_FALSE(p.enabled) << bad;
  }
}

TEST(agent_points, reads_errno_names_and_filters_by_program) {
  const char* python[] = {"python3.12", "python3", nullptr};
  const char* bash[] = {"bash", nullptr};
  const char* spec = "spawn/parent=fail(EAGAIN);spawn/parent@python3*=delay(1ms)";
  point_plan any, filtered;
  plan_point(spec, "spawn/parent", any, bash);
  ASSERT_TRUE(any.enabled);
  EXPECT_STREQ(any.pattern, "spawn/parent");
  EXPECT_EQ(any.terms[0].code, EAGAIN);
  plan_point(spec, "spawn/parent", filtered, python);  // the matching filter wins
  ASSERT_TRUE(filtered.enabled);
  EXPECT_STREQ(filtered.pattern, "spawn/parent@python3*");
  point_plan none;
  plan_point("process/start@python3=kill", "process/start", none, bash);
  EXPECT_FALSE(none.enabled);
  plan_point("process/start@python3=kill", "process/start", none, nullptr);
  EXPECT_FALSE(none.enabled);
  plan_point("process/start@python3=kill", "process/start", none, python);
  EXPECT_TRUE(none.enabled);
  point_plan stop;
  plan_point("fn/f=2*stop", "fn/f", stop);
  ASSERT_TRUE(stop.enabled);
  EXPECT_EQ(stop.terms[0].action, point_action::stop);
}

TEST(agent_points, exact_name_beats_wildcard_and_longer_wildcard_beats_shorter) {
  point_plan plan;
  plan_point("exit/*=print;exit/end=kill", "exit/end", plan);
  ASSERT_TRUE(plan.enabled);
  EXPECT_STREQ(plan.pattern, "exit/end");
  EXPECT_EQ(plan.terms[0].action, point_action::kill);
  plan_point("e*=kill;exit/*=abort", "exit/start", plan);
  ASSERT_TRUE(plan.enabled);
  EXPECT_STREQ(plan.pattern, "exit/*");
  EXPECT_EQ(plan.terms[0].action, point_action::abort);
}

TEST(agent_points, reads_probability_count_and_chains) {
  point_plan plan;
  plan_point("exit/start=12.5%2*delay(3us)->off->print", "exit/start", plan);
  ASSERT_TRUE(plan.enabled);
  ASSERT_EQ(plan.term_count, 3u);
  EXPECT_EQ(plan.terms[0].probability_ppb, 125'000'000u);
  EXPECT_TRUE(plan.terms[0].limited);
  EXPECT_EQ(plan.terms[0].remaining, 2u);
  EXPECT_EQ(plan.terms[0].delay_ns, 3'000u);
  EXPECT_EQ(plan.terms[1].action, point_action::off);
  EXPECT_EQ(plan.terms[2].action, point_action::print);
}

TEST(agent_points, an_item_it_cannot_read_is_not_enabled) {
  for (const char* spec : {"exit/end=fail(ENOPE)", "exit/end=pause(r)", "exit/end=delay(5)",
                           "exit/end=delay(5ms", "exit/end=101%print", "exit/end=0*print",
                           "exit/end=", "exit/end=abort(1)", "exit/end=1.12345678%print"}) {
    point_plan plan;
    plan_point(spec, "exit/end", plan);
    EXPECT_FALSE(plan.enabled) << spec;
  }
}

TEST(agent_points, evaluation_follows_fail9_counts_and_draws) {
  point_plan plan;
  plan_point("exit/end=2*print->abort", "exit/end", plan);
  EXPECT_EQ(evaluate_plan(plan, &zero_draw).action, point_action::print);
  EXPECT_EQ(evaluate_plan(plan, &zero_draw).action, point_action::print);
  EXPECT_EQ(evaluate_plan(plan, &zero_draw).action, point_action::abort);  // count used up

  plan_point("exit/end=50%kill", "exit/end", plan);
  EXPECT_EQ(evaluate_plan(plan, &zero_draw).action, point_action::kill);
  EXPECT_EQ(evaluate_plan(plan, &max_draw).action, point_action::off);  // draw failed
}

TEST(agent_points, seeds_parse_like_the_fault_engine) {
  std::uint64_t v = 0;
  EXPECT_TRUE(parse_seed_text("42", v));
  EXPECT_EQ(v, 42u);
  EXPECT_TRUE(parse_seed_text("0xff", v));
  EXPECT_EQ(v, 255u);
  EXPECT_FALSE(parse_seed_text("", v));
  EXPECT_FALSE(parse_seed_text("12a", v));
  EXPECT_FALSE(parse_seed_text("99999999999999999999999", v));
}

}  // namespace
}  // namespace faultline::agent::detail
