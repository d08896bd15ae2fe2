// Goal: the fault-spec grammar accepts exactly what DESIGN.md §6.2 describes and rejects everything
// else with a message that names the 1-based column and what was expected. Method: parse good
// specs and check every field of the result; parse a table of bad specs and compare the whole
// message; check that format() is canonical and that parse(format(s)) == s.
#include "faults/spec.h"

#include <cerrno>
#include <initializer_list>

#include <gtest/gtest.h>

#include "faults/bug_points.h"

namespace faultline::faults {
namespace {

using namespace std::chrono_literals;

spec parse_ok(std::string_view text) {
  auto s = parse(text);
  EXPECT_TRUE(s.has_value()) << text << " -> " << s.error().to_string();
  return s ? *s : spec{};
}

TEST(spec, parses_the_design_example) {
  spec s = parse_ok(
      "accounting/lock/held=1*kill;registry/unregister/after-remove=delay(50ms);sim/*=5%fail(ENOMEM)");
  ASSERT_EQ(s.items.size(), 3u);

  EXPECT_EQ(s.items[0].point, "accounting/lock/held");
  EXPECT_FALSE(s.items[0].is_wildcard());
  ASSERT_EQ(s.items[0].terms.size(), 1u);
  EXPECT_EQ(s.items[0].terms[0].count, 1u);
  EXPECT_FALSE(s.items[0].terms[0].probability_ppb.has_value());
  EXPECT_EQ(s.items[0].terms[0].action.kind, action_kind::kill);

  EXPECT_EQ(s.items[1].point, "registry/unregister/after-remove");
  EXPECT_EQ(s.items[1].terms[0].action.kind, action_kind::delay);
  EXPECT_EQ(s.items[1].terms[0].action.duration, 50ms);
  EXPECT_FALSE(s.items[1].terms[0].count.has_value());

  EXPECT_EQ(s.items[2].point, "sim/*");
  EXPECT_TRUE(s.items[2].is_wildcard());
  EXPECT_EQ(s.items[2].prefix(), "sim/");
  EXPECT_EQ(s.items[2].terms[0].probability_ppb, 50'000'000u);
  EXPECT_EQ(s.items[2].terms[0].action.kind, action_kind::fail);
  EXPECT_EQ(s.items[2].terms[0].action.code, ENOMEM);
}

TEST(spec, parses_a_chain_with_probability_and_count_in_order) {
  spec s = parse_ok("a/b=5%3*fail(EIO)->10%delay(2s)->off");
  ASSERT_EQ(s.items.size(), 1u);
  const auto& t = s.items[0].terms;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].probability_ppb, 50'000'000u);
  EXPECT_EQ(t[0].count, 3u);
  EXPECT_EQ(t[0].action.code, EIO);
  EXPECT_EQ(t[1].probability_ppb, 100'000'000u);
  EXPECT_FALSE(t[1].count.has_value());
  EXPECT_EQ(t[1].action.duration, 2s);
  EXPECT_EQ(t[2].action.kind, action_kind::off);
}

TEST(spec, allows_whitespace_around_every_token) {
  spec s = parse_ok("  a/b = 5 % 3 * fail ( EIO ) -> off ;\tc = pause ( rv , 2s )\n");
  EXPECT_EQ(format(s), "a/b=5%3*fail(EIO)->off;c=pause(rv, 2s)");
}

TEST(spec, gives_every_action_its_arguments_and_defaults) {
  spec s = parse_ok("a=fail;b=fail(7);c=fail(EAGAIN);d=pause(x.y-z_1);e=pause(q, 250ms);f=teardown(3);"
                    "g=print;h=abort;i=kill;j=off;k=delay(0ns);l=delay(7us)");
  ASSERT_EQ(s.items.size(), 12u);
  EXPECT_EQ(s.items[0].terms[0].action.code, 1);
  EXPECT_EQ(s.items[1].terms[0].action.code, 7);
  EXPECT_EQ(s.items[2].terms[0].action.code, EAGAIN);
  EXPECT_EQ(s.items[3].terms[0].action.rendezvous, "x.y-z_1");
  EXPECT_EQ(s.items[3].terms[0].action.timeout, default_pause_timeout);
  EXPECT_EQ(s.items[3].terms[0].action.timeout, 10s);
  EXPECT_EQ(s.items[4].terms[0].action.timeout, 250ms);
  EXPECT_EQ(s.items[5].terms[0].action.kind, action_kind::teardown);
  EXPECT_EQ(s.items[5].terms[0].action.device, 3);
  EXPECT_EQ(s.items[6].terms[0].action.kind, action_kind::print);
  EXPECT_EQ(s.items[7].terms[0].action.kind, action_kind::abort);
  EXPECT_EQ(s.items[8].terms[0].action.kind, action_kind::kill);
  EXPECT_EQ(s.items[9].terms[0].action.kind, action_kind::off);
  EXPECT_EQ(s.items[10].terms[0].action.duration, 0ns);
  EXPECT_EQ(s.items[11].terms[0].action.duration, 7us);
}

TEST(spec, reads_cuda_error_names_and_the_current_device) {
  auto s = parse("cuda/cuMemFree_v2=fail(CUDA_ERROR_LAUNCH_FAILED)->teardown(device)");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->items[0].terms[0].action.code, 719);
  EXPECT_EQ(s->items[0].terms[1].action.device, current_device);
  EXPECT_EQ(format(s->items[0]), "cuda/cuMemFree_v2=fail(719)->teardown(device)");
  auto bad = parse("cuda/x=teardown(gpu)");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("'device'"), std::string::npos) << bad.error().message();
}

TEST(spec, reads_a_program_filter_after_the_point) {
  auto s = parse("process/start@python3*=delay(1s);spawn/parent@true=fail(EAGAIN);spawn/parent=print");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->items[0].point, "process/start");
  EXPECT_EQ(s->items[0].filter, "python3*");
  EXPECT_EQ(s->items[0].written(), "process/start@python3*");
  EXPECT_EQ(s->items[2].filter, "");
  EXPECT_EQ(format(*s), "process/start@python3*=delay(1s);spawn/parent@true=fail(EAGAIN);spawn/parent=print");
  auto twice = parse("spawn/parent@true=print;spawn/parent@true=kill");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message().find("named twice"), std::string::npos);
}

// @rank=N (nccl/): the '=' after "rank" is the filter's, the next one starts the terms.
TEST(spec, reads_a_rank_filter_whose_equals_sign_is_its_own) {
  auto s = parse("nccl/ncclAllReduce@rank=1=3*off->stop; nccl/ncclCommInitRank@rank=0=fail(ncclSystemError)");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->items.size(), 2u);
  EXPECT_EQ(s->items[0].point, "nccl/ncclAllReduce");
  EXPECT_EQ(s->items[0].filter, "rank=1");
  ASSERT_EQ(s->items[0].terms.size(), 2u);
  EXPECT_EQ(s->items[0].terms[0].count, 3u);
  EXPECT_EQ(s->items[0].terms[1].action.kind, action_kind::stop);
  EXPECT_EQ(s->items[1].terms[0].action.code, 2);  // ncclSystemError
  EXPECT_EQ(format(*s), "nccl/ncclAllReduce@rank=1=3*off->stop;nccl/ncclCommInitRank@rank=0=fail(ncclSystemError)");
  EXPECT_EQ(item_name_end("nccl/ncclAllReduce@rank=12=stop"), 26u);
  EXPECT_EQ(item_name_end("process/start@python3=stop"), 21u);
  for (const char* bad : {"nccl/ncclAllReduce@rank==stop", "nccl/ncclAllReduce@rank=x=stop"}) {
    auto refused = parse(bad);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message().find("expected a rank number after '@rank='"), std::string::npos)
        << refused.error().message();
  }
}

TEST(spec, reads_percentages_to_parts_per_billion) {
  auto ppb = [](std::string_view text) {
    spec s = parse_ok("p=" + std::string(text) + "fail");
    return s.items.empty() ? 0u : s.items[0].terms[0].probability_ppb.value_or(12345u);
  };
  EXPECT_EQ(ppb("0%"), 0u);
  EXPECT_EQ(ppb("100%"), 1'000'000'000u);
  EXPECT_EQ(ppb("100.0%"), 1'000'000'000u);
  EXPECT_EQ(ppb("0.5%"), 5'000'000u);
  EXPECT_EQ(ppb("12.345%"), 123'450'000u);
  EXPECT_EQ(ppb("0.0000001%"), 1u);
  EXPECT_EQ(ppb("007%"), 70'000'000u);
}

TEST(spec, treats_empty_and_blank_specs_and_empty_items_as_nothing) {
  EXPECT_TRUE(parse_ok("").empty());
  EXPECT_TRUE(parse_ok("   \t ").empty());
  EXPECT_TRUE(parse_ok(";;").empty());
  EXPECT_EQ(parse_ok("a=off;").items.size(), 1u);
  EXPECT_EQ(parse_ok(";a=off;;b=off ; ").items.size(), 2u);
}

TEST(spec, accepts_known_bug_points_by_exact_name) {
  for (const auto& info : bug_points()) {
    spec s = parse_ok(std::string(info.name) + "=print");
    ASSERT_EQ(s.items.size(), 1u);
    EXPECT_EQ(s.items[0].point, info.name);
  }
  // A name that merely contains "bug" elsewhere is an ordinary point.
  EXPECT_EQ(parse_ok("sim/bug/x=fail;debug/*=print").items.size(), 2u);
}

struct bad_case {
  const char* text;
  const char* message;
};

// Each malformed spec is refused with its column and what was expected there.
void expect_spec_rejections(std::initializer_list<bad_case> cases) {
  for (const auto& c : cases) {
    auto s = parse(c.text);
    ASSERT_FALSE(s.has_value()) << c.text;
    EXPECT_EQ(s.code(), core::errc::invalid_argument) << c.text;
    EXPECT_EQ(s.error().message(), c.message) << "spec: " << c.text;
  }
}

// An action that is not one of the grammar's, or none where one must stand.
TEST(spec, rejects_a_misspelt_or_missing_action) {
  expect_spec_rejections({
      {"accounting/lock=fial",
       "faults spec: column 17: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found 'fial'"},
      {"a=fial(ENOMEM)",
       "faults spec: column 3: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found 'fial'"},
      {"a=FAIL",
       "faults spec: column 3: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found 'FAIL'"},
      {"a=fail2",
       "faults spec: column 3: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found 'fail2'"},
      {"a=",
       "faults spec: column 3: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found end of spec"},
      {"a=fail->",
       "faults spec: column 9: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found end of spec"},
      {"a=->fail",
       "faults spec: column 3: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found '->'"},
      {"a=1*",
       "faults spec: column 5: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found end of spec"},
      {"a=3*5%fail",
       "faults spec: column 5: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found '5'"},
      {"a=fail;b=fial",
       "faults spec: column 10: expected an action (off, fail, delay, pause, kill, abort, teardown, print, stop), "
       "found 'fial'"},
  });
}

// The point name and the '=' after it.
TEST(spec, rejects_a_missing_point_name_or_equals_sign) {
  expect_spec_rejections({
      {"=fail", "faults spec: column 1: expected a point name, found '='"},
      {"a fail", "faults spec: column 3: expected '=' after point name 'a', found 'fail'"},
      {"a", "faults spec: column 2: expected '=' after point name 'a', found end of spec"},
      {"a!=fail", "faults spec: column 2: expected '=' after point name 'a', found '!'"},
      {"*=fail", "faults spec: column 1: expected a point name, found '*'"},
  });
}

// What may follow an item: '->', ';' or the end.
TEST(spec, rejects_text_after_a_complete_item) {
  expect_spec_rejections({
      {"a=fail fail", "faults spec: column 8: expected '->', ';' or end of spec, found 'fail'"},
      {"a=fail)", "faults spec: column 7: expected '->', ';' or end of spec, found ')'"},
  });
}

// N% and N* before an action.
TEST(spec, rejects_malformed_probabilities_and_counts) {
  expect_spec_rejections({
      {"a=5fail", "faults spec: column 4: expected '%' or '*' after the number '5', found 'fail'"},
      {"a=150%fail", "faults spec: column 3: a probability must be at most 100%, found '150%'"},
      {"a=100.5%fail", "faults spec: column 3: a probability must be at most 100%, found '100.5%'"},
      {"a=1.2.3%fail", "faults spec: column 3: expected a percentage like 5% or 0.5%, found '1.2.3%'"},
      {"a=.5%fail", "faults spec: column 3: expected a percentage like 5% or 0.5%, found '.5%'"},
      {"a=0.00000001%fail",
       "faults spec: column 3: a probability has at most 7 decimal places, found '0.00000001%'"},
      {"a=0*fail", "faults spec: column 3: a count must be a positive integer, found '0'"},
      {"a=1.5*fail", "faults spec: column 3: a count must be a positive integer, found '1.5'"},
      {"a=99999999999999999999*fail",
       "faults spec: column 3: a count must be a positive integer, found '99999999999999999999'"},
      {"a=5%3fail", "faults spec: column 6: expected '*' after the count '3', found 'fail'"},
  });
}

// Actions that take no arguments, and those that must have them.
TEST(spec, rejects_arguments_where_none_or_some_are_due) {
  expect_spec_rejections({
      {"a=kill(9)", "faults spec: column 7: 'kill' takes no arguments, found '('"},
      {"a=print ()", "faults spec: column 9: 'print' takes no arguments, found '('"},
      {"a=delay", "faults spec: column 8: expected '(' after 'delay' (usage: delay(50ms)), found end of spec"},
      {"a=pause;b=off",
       "faults spec: column 8: expected '(' after 'pause' (usage: pause(name) or pause(name, 5s)), found ';'"},
      {"a=teardown", "faults spec: column 11: expected '(' after 'teardown' (usage: teardown(0)), found end of spec"},
  });
}

// Delay's and pause's durations.
TEST(spec, rejects_malformed_durations) {
  expect_spec_rejections({
      {"a=delay(50)",
       "faults spec: column 9: expected a duration like 50ms (a whole number with unit ns, us, ms or s), found '50'"},
      {"a=delay(5min)",
       "faults spec: column 9: expected a duration like 50ms (a whole number with unit ns, us, ms or s), found '5min'"},
      {"a=delay(1.5s)",
       "faults spec: column 9: expected a duration like 50ms (a whole number with unit ns, us, ms or s), found '1.5s'"},
      {"a=delay(ms)",
       "faults spec: column 9: expected a duration like 50ms (a whole number with unit ns, us, ms or s), found 'ms'"},
      {"a=delay(10000000000s)", "faults spec: column 9: a duration must be below 292 years, found '10000000000s'"},
      {"a=delay(50ms", "faults spec: column 13: expected ')' to close 'delay(', found end of spec"},
      {"a=pause(x, 0s)", "faults spec: column 12: a pause timeout must be positive, found '0s'"},
      {"a=pause(x,)",
       "faults spec: column 11: expected a duration like 50ms (a whole number with unit ns, us, ms or s), found ')'"},
  });
}

// Fail's code, pause's name and teardown's device.
TEST(spec, rejects_malformed_failure_codes_rendezvous_names_and_devices) {
  expect_spec_rejections({
      {"a=fail(EIO", "faults spec: column 11: expected ')' to close 'fail(', found end of spec"},
      {"a=fail(ENOMEN)",
       "faults spec: column 8: expected an errno name (ENOMEM, EIO, ...), a CUDA driver error name (CUDA_ERROR_INVALID_VALUE, ...), an ncclResult_t name (ncclSystemError, ...) or a positive integer, found 'ENOMEN'"},
      {"a=fail()", "faults spec: column 8: expected an errno name (ENOMEM, EIO, ...), a CUDA driver error name (CUDA_ERROR_INVALID_VALUE, ...), an ncclResult_t name (ncclSystemError, ...) or a positive integer, found ')'"},
      {"a=fail(-1)", "faults spec: column 8: expected an errno name (ENOMEM, EIO, ...), a CUDA driver error name (CUDA_ERROR_INVALID_VALUE, ...), an ncclResult_t name (ncclSystemError, ...) or a positive integer, found '-'"},
      {"a=fail(0)", "faults spec: column 8: a failure code must be a positive integer or an errno name, found '0'"},
      {"a=fail(2147483648)",
       "faults spec: column 8: a failure code must be a positive integer or an errno name, found '2147483648'"},
      {"a=pause()", "faults spec: column 9: expected a rendezvous name (letters, digits, '_', '.', '-'), found ')'"},
      {"a=pause(x y)", "faults spec: column 11: expected ')' to close 'pause(', found 'y'"},
      {"a=pause(x/y)", "faults spec: column 10: expected ')' to close 'pause(', found '/'"},
      {"a=teardown(x)", "faults spec: column 12: expected a device number, or 'device' (the calling thread's current device), found 'x'"},
      {"a=teardown(99999)", "faults spec: column 12: expected a device number, or 'device' (the calling thread's current device), found '99999'"},
  });
}

// '*' only at the end of a point name.
TEST(spec, rejects_a_wildcard_that_does_not_end_the_name) {
  expect_spec_rejections({
      {"sim/*x=fail", "faults spec: column 6: a wildcard '*' must end the point name, found 'x'"},
      {"sim/**=fail", "faults spec: column 6: a wildcard '*' must end the point name, found '*'"},
  });
}

// The first naming's column in the message.
TEST(spec, rejects_a_point_named_twice) {
  expect_spec_rejections({
      {"a=fail;a=delay(1ms)", "faults spec: column 8: point 'a' is named twice (first at column 1)"},
      {"x/*=off; y=off;x/*=print", "faults spec: column 16: point 'x/*' is named twice (first at column 1)"},
  });
}

// Bug points are named exactly.
TEST(spec, rejects_unknown_bug_points_and_wildcards_over_them) {
  expect_spec_rejections({
      {"bug/alloc/no-exit-gaurd=print",
       "faults spec: column 1: unknown bug point 'bug/alloc/no-exit-gaurd' (the known ones are listed in "
       "faults/bug_points.h)"},
      {"bug/*=print", "faults spec: column 1: wildcard 'bug/*' covers bug points; name each bug point exactly"},
      {"b*=print", "faults spec: column 1: wildcard 'b*' covers bug points; name each bug point exactly"},
      {"x=off;bug/alloc/*=print",
       "faults spec: column 7: wildcard 'bug/alloc/*' covers bug points; name each bug point exactly"},
  });
}

TEST(spec, rejects_a_rendezvous_name_longer_than_the_limit) {
  std::string text = "a=pause(" + std::string(max_rendezvous_name_size + 1, 'r') + ")";
  auto s = parse(text);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().message(), "faults spec: column 9: a rendezvous name has at most 128 characters, found one of 129");
  EXPECT_TRUE(parse("a=pause(" + std::string(max_rendezvous_name_size, 'r') + ")").has_value());
}

TEST(spec, formats_canonically) {
  EXPECT_EQ(format(parse_ok("a=0.5000%delay(1500ms)")), "a=0.5%delay(1500ms)");
  EXPECT_EQ(format(parse_ok("a=delay(2000ms)->delay(3000000ns)->delay(0s)")), "a=delay(2s)->delay(3ms)->delay(0ns)");
  EXPECT_EQ(format(parse_ok("a=fail(12)")), "a=fail(ENOMEM)");
  EXPECT_EQ(format(parse_ok("a=fail(1)")), "a=fail");
  EXPECT_EQ(format(parse_ok("a=fail(4000)")), "a=fail(4000)");
  EXPECT_EQ(format(parse_ok("a=pause(rv, 10s)")), "a=pause(rv)");
  EXPECT_EQ(format(parse_ok("a=pause(rv,5s)")), "a=pause(rv, 5s)");
  EXPECT_EQ(format(parse_ok("a=100%1*teardown( 2 )")), "a=100%1*teardown(2)");
  EXPECT_EQ(format(parse_ok("")), "");
}

TEST(spec, round_trips_through_format) {
  const char* specs[] = {
      "accounting/lock/held=1*kill;registry/unregister/after-remove=delay(50ms);sim/*=5%fail(ENOMEM)",
      "a=0.0000001%2*fail(EIO)->33.3333333%delay(1us)->off;b/*=print;bug/alloc/no-drain=1*print",
      "x=pause(left, 1ms)->abort;y=teardown(0)->fail(77)",
  };
  for (const char* text : specs) {
    spec s = parse_ok(text);
    auto again = parse(format(s));
    ASSERT_TRUE(again.has_value()) << format(s);
    EXPECT_EQ(*again, s) << text;
    EXPECT_EQ(format(*again), format(s));
  }
}

TEST(spec, maps_errno_names_both_ways) {
  EXPECT_EQ(errno_from_name("ENOMEM"), ENOMEM);
  EXPECT_EQ(errno_from_name("EIO"), EIO);
  EXPECT_EQ(errno_from_name("ETIMEDOUT"), ETIMEDOUT);
  EXPECT_EQ(errno_from_name("EWOULDBLOCK"), EAGAIN);
  EXPECT_EQ(errno_from_name("ENOTSUP"), ENOTSUP);
  EXPECT_FALSE(errno_from_name("ENOPE").has_value());
  EXPECT_FALSE(errno_from_name("enomem").has_value());
  EXPECT_EQ(errno_name(ENOMEM), "ENOMEM");
  EXPECT_EQ(errno_name(EBUSY), "EBUSY");
  EXPECT_EQ(errno_name(0), "");
  EXPECT_EQ(errno_name(4000), "");
}

TEST(spec, names_every_action) {
  EXPECT_EQ(to_string(action_kind::off), "off");
  EXPECT_EQ(to_string(action_kind::fail), "fail");
  EXPECT_EQ(to_string(action_kind::delay), "delay");
  EXPECT_EQ(to_string(action_kind::pause), "pause");
  EXPECT_EQ(to_string(action_kind::kill), "kill");
  EXPECT_EQ(to_string(action_kind::abort), "abort");
  EXPECT_EQ(to_string(action_kind::teardown), "teardown");
  EXPECT_EQ(to_string(action_kind::print), "print");
  EXPECT_EQ(to_string(action_kind::stop), "stop");
}

TEST(bug_points, catalog_holds_the_seeded_alloc_bugs) {
  ASSERT_NE(find_bug_point("bug/alloc/no-exit-guard"), nullptr);
  ASSERT_NE(find_bug_point("bug/alloc/no-drain"), nullptr);
  ASSERT_NE(find_bug_point("bug/alloc/no-epoch-guard"), nullptr);
  EXPECT_EQ(find_bug_point("bug/alloc/nope"), nullptr);
  for (const auto& info : bug_points()) EXPECT_FALSE(info.description.empty()) << info.name;
}

}  // namespace
}  // namespace faultline::faults
