// Text helpers: whatever bytes a program under test printed come out as valid UTF-8 with every
// control character visible, and nothing printable is changed. Numbers read the way the
// reports print them.
#include "reports/detail/text.h"

#include <gtest/gtest.h>

namespace faultline::reports::detail {
namespace {

TEST(printable, keeps_text_that_needs_nothing) {
  EXPECT_EQ(printable("SIGSEGV: pool::~pool | main"), "SIGSEGV: pool::~pool | main");
  EXPECT_EQ(printable("tab\tline\nreturn\r"), "tab\tline\nreturn\r");
  EXPECT_EQ(printable("naïve → ✓ 𝄞"), "naïve → ✓ 𝄞");  // 2-, 3- and 4-byte sequences
}

TEST(printable, escapes_control_characters_visibly) {
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(printable("\xc2\x85"), "\\u{85}");  // C1 control NEL
  EXPECT_EQ(printable("\xef\xbf\xbe\xef\xbf\xbf"), "\\u{FFFE}\\u{FFFF}");
}

TEST(printable, escapes_every_byte_that_is_not_utf8) {
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");              // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");      // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable("ok\xe2\x82"), "ok\\xe2\\x82");            // truncated sequence at the end
  EXPECT_EQ(printable("\xe2\x82x"), "\\xe2\\x82x");               // interrupted sequence
}

TEST(one_line, turns_line_breaks_and_tabs_into_spaces) {
  EXPECT_EQ(one_line("a\r\nb\nc\rd\te"), "a b c d e");
  EXPECT_EQ(one_line("x\x01"), "x\\x01");
}

TEST(percent, never_rounds_to_zero_or_a_hundred) {
  EXPECT_EQ(percent(0), "0%");
  EXPECT_EQ(percent(1), "100%");
  EXPECT_EQ(percent(0.0312), "3.1%");
  EXPECT_EQ(percent(0.005), "0.50%");
  EXPECT_EQ(percent(0.0000334), "0.0033%");
  EXPECT_EQ(percent(0.9996), "99.96%");
  EXPECT_EQ(percent(0.999999), ">99.99%");
}

TEST(p_value, is_short_and_never_zero) {
  EXPECT_EQ(p_value(0.0126974), "p = 0.0127");
  EXPECT_EQ(p_value(0.00052), "p = 0.00052");
  EXPECT_EQ(p_value(0), "p < 1e-12");
}

TEST(thousands, groups_digits) {
  EXPECT_EQ(thousands(0), "0");
  EXPECT_EQ(thousands(999), "999");
  EXPECT_EQ(thousands(1000), "1,000");
  EXPECT_EQ(thousands(1234567), "1,234,567");
}

TEST(counted, is_singular_only_for_one) {
  EXPECT_EQ(counted(1, "variant"), "1 variant");
  EXPECT_EQ(counted(0, "variant"), "0 variants");
  EXPECT_EQ(counted(12345, "run"), "12,345 runs");
  EXPECT_EQ(counted(2, "process", "processes"), "2 processes");
  EXPECT_EQ(counted(1, "process", "processes"), "1 process");
}

TEST(iso_time, round_trips_the_harness_format) {
  const std::int64_t ms = parse_iso_utc_ms("2024-11-21T19:30:00.123Z");
  EXPECT_EQ(ms, 1732217400123);
  EXPECT_EQ(iso_utc_ms(ms), "2024-11-21T19:30:00.123Z");
  EXPECT_EQ(parse_iso_utc_ms("2024-11-21T19:30:00Z"), 1732217400000);
  EXPECT_EQ(parse_iso_utc_ms("2024-11-21T19:30:00.5"), 1732217400500);
  EXPECT_EQ(parse_iso_utc_ms(""), -1);
  EXPECT_EQ(parse_iso_utc_ms("yesterday"), -1);
  EXPECT_EQ(parse_iso_utc_ms("2024-13-21T19:30:00Z"), -1);
  EXPECT_EQ(parse_iso_utc_ms("2024-11-21T19:30:00.123Zjunk"), -1);
}

}  // namespace
}  // namespace faultline::reports::detail
