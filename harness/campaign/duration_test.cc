// Durations as typed on the command line: every unit, fractions, and a clear error for each
// malformed form.
#include "harness/campaign/duration.h"

#include <gtest/gtest.h>

namespace faultline::harness {
namespace {

using std::chrono::milliseconds;

TEST(parse_duration, accepts_each_unit) {
  EXPECT_EQ(*parse_duration("500ms"), milliseconds(500));
  EXPECT_EQ(*parse_duration("10s"), milliseconds(10'000));
  EXPECT_EQ(*parse_duration("2m"), milliseconds(120'000));
  EXPECT_EQ(*parse_duration("1h"), milliseconds(3'600'000));
  EXPECT_EQ(*parse_duration("0s"), milliseconds(0));
}

TEST(parse_duration, accepts_fractions) {
  EXPECT_EQ(*parse_duration("1.5s"), milliseconds(1500));
  EXPECT_EQ(*parse_duration("0.25m"), milliseconds(15'000));
}

TEST(parse_duration, rejects_a_number_without_unit) {
  auto r = parse_duration("30");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), core::errc::invalid_argument);
  EXPECT_NE(r.error().message().find("missing unit"), std::string::npos);
}

TEST(parse_duration, rejects_malformed_text_naming_the_problem) {
  EXPECT_NE(parse_duration("10x").error().message().find("unknown unit 'x'"), std::string::npos);
  EXPECT_NE(parse_duration("-1s").error().message().find("negative"), std::string::npos);
  EXPECT_NE(parse_duration("s").error().message().find("not a number"), std::string::npos);
  EXPECT_NE(parse_duration("").error().message().find("not a number"), std::string::npos);
  EXPECT_NE(parse_duration("1.2.3s").error().message().find("not a number"), std::string::npos);
  EXPECT_NE(parse_duration("10000h").error().message().find("longer than a year"), std::string::npos);
}

TEST(format_duration, picks_the_unit_that_reads_best_and_parses_back) {
  struct {
    long long ms;
    const char* text;
  } cases[] = {{0, "0ms"},  {250, "250ms"}, {1000, "1s"},     {1500, "1.5s"},
               {1234, "1234ms"}, {59'000, "59s"}, {120'000, "2m"}, {3'600'000, "1h"}};
  for (const auto& c : cases) {
    EXPECT_EQ(format_duration(milliseconds(c.ms)), c.text);
    auto back = parse_duration(c.text);
    ASSERT_TRUE(back) << c.text;
    EXPECT_EQ(back->count(), c.ms) << c.text;
  }
  EXPECT_EQ(format_duration(milliseconds(5'400'000)), "1h30m");  // compound: for reading only
}

}  // namespace
}  // namespace faultline::harness
