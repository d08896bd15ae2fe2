// The progress line: its content, and that off a terminal it is printed only every interval.
#include "harness/campaign/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <thread>

namespace faultline::harness {
namespace {

TEST(progress_meter, line_reports_runs_failures_rate_elapsed_and_estimate) {
  EXPECT_EQ(progress_meter::line(20, 1, 100, std::chrono::seconds(10)),
            "faultline: 20/100 runs, 1 failure (5.0%), 10s elapsed, ~40s left");
  EXPECT_EQ(progress_meter::line(3, 0, 0, std::chrono::seconds(2)), "faultline: 3 runs, 0 failures (0.0%), 2s elapsed");
  EXPECT_EQ(progress_meter::line(1, 0, 2, std::chrono::milliseconds(400)),
            "faultline: 1/2 runs, 0 failures (0.0%), 0s elapsed, ~0s left");
  EXPECT_EQ(progress_meter::line(10, 0, 20, std::chrono::seconds(90)),
            "faultline: 10/20 runs, 0 failures (0.0%), 1m30s elapsed, ~1m30s left");
}

TEST(progress_meter, off_a_terminal_prints_at_most_once_per_interval) {
  std::ostringstream out;
  progress_meter p(&out, false, 10, std::chrono::hours(1));
  for (int i = 1; i <= 10; ++i) p.update(static_cast<std::uint64_t>(i), 0);
  EXPECT_EQ(out.str(), "");  // nothing within the interval
  progress_meter q(&out, false, 10, std::chrono::milliseconds(0));
  q.update(1, 1);
  q.update(2, 1);
  q.finish();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(progress_meter, on_a_terminal_rewrites_one_line) {
  std::ostringstream out;
  progress_meter p(&out, true, 4);
  p.finish();
  const std::string text = out.str();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.front(), '\r');
  EXPECT_EQ(text.back(), '\n');
}

TEST(progress_meter, interjected_lines_do_not_mix_with_the_line_on_a_terminal) {
  std::ostringstream out;
  progress_meter p(&out, true, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // past the terminal's 100 ms
  p.update(1, 0);
  ASSERT_NE(out.str().find("faultline: 1/4 runs"), std::string::npos);
  p.interject([&] { out << "faultline: warning: w\n"; });
  const std::string text = out.str();
  const auto warning = text.find("faultline: warning: w\n");
  ASSERT_NE(warning, std::string::npos) << text;
  // The warning starts at the beginning of a cleared line, and the progress line is drawn again.
  EXPECT_EQ(text[warning - 1], '\r');
  EXPECT_NE(text.find("faultline: 1/4 runs", warning), std::string::npos) << text;
}

TEST(progress_meter, interjected_lines_off_a_terminal_are_printed_as_they_are) {
  std::ostringstream out;
  progress_meter p(&out, false, 4, std::chrono::hours(1));
  p.update(1, 0);
  p.interject([&] { out << "warning\n"; });
  EXPECT_EQ(out.str(), "warning\n");
}

}  // namespace
}  // namespace faultline::harness
