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
  EXPECT_EQ(progress_meter::line(1, 0, 0, std::chrono::seconds(1)), "faultline: 1 run, 0 failures (0.0%), 1s elapsed");
}

// A resumed campaign: the runs an earlier invocation recorded count in `done` as their failures
// count in `failures`, and took none of the elapsed time, so the estimate is made from the rest.
TEST(progress_meter, a_resumed_campaign_counts_the_resumed_runs_and_estimates_from_the_others) {
  EXPECT_EQ(progress_meter::line(5, 5, 10, std::chrono::seconds(30), 2),
            "faultline: 5/10 runs (2 resumed), 5 failures (100.0%), 30s elapsed, ~50s left");
  EXPECT_EQ(progress_meter::line(2, 1, 10, std::chrono::seconds(3), 2),
            "faultline: 2/10 runs (2 resumed), 1 failure (50.0%), 3s elapsed");
}

// Issue 38 (11): off a terminal the final line repeated the last one printed, word for word.
TEST(progress_meter, the_final_line_is_not_a_repeat_of_the_last_one) {
  std::ostringstream out;
  progress_meter p(&out, false, 10, std::chrono::milliseconds(0));
  p.update(1, 1);
  p.update(2, 1);
  p.finish();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.find("faultline: 2/10 runs"), text.rfind("faultline: 2/10 runs")) << text;
  std::ostringstream later;
  progress_meter q(&later, false, 10, std::chrono::hours(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  q.update(1, 0);
  q.finish();  // printed nothing yet: a short campaign's summary says it all
  EXPECT_EQ(later.str(), "");
}

TEST(progress_meter, off_a_terminal_prints_at_most_once_per_interval) {
  std::ostringstream out;
  progress_meter p(&out, false, 10, std::chrono::hours(1));
  for (int i = 1; i <= 10; ++i) p.update(static_cast<std::uint64_t>(i), 0);
  EXPECT_EQ(out.str(), "");  // nothing within the interval
  progress_meter q(&out, false, 10, std::chrono::milliseconds(0));
  q.update(1, 1);
  q.update(2, 1);
  q.finish();  // nothing new to say
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
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
