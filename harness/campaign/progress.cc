#include "harness/campaign/progress.h"

#include <algorithm>
#include <cstdio>

#include "harness/campaign/duration.h"

namespace faultline::harness {

progress_meter::progress_meter(std::ostream* out, bool tty, std::uint64_t total, std::chrono::milliseconds interval,
                               std::uint64_t resumed)
    : out_(out),
      tty_(tty),
      total_(total),
      resumed_(resumed),
      interval_(tty ? std::chrono::milliseconds(100) : interval),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

namespace {

// Whole seconds: a progress line does not need milliseconds.
std::string seconds_text(std::chrono::milliseconds d) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(d);
  return s.count() < 60 ? std::to_string(s.count()) + "s" : format_duration(s);
}

}  // namespace

std::string progress_meter::line(std::uint64_t done, std::uint64_t failures, std::uint64_t total,
                                 std::chrono::milliseconds elapsed, std::uint64_t resumed) {
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", done ? 100.0 * static_cast<double>(failures) / static_cast<double>(done) : 0.0);
  std::string s = "faultline: " + std::to_string(done) + (total ? "/" + std::to_string(total) : std::string()) +
                  (done == 1 && !total ? " run" : " runs") + (resumed ? " (" + std::to_string(resumed) + " resumed)" : std::string()) +
                  ", " + std::to_string(failures) + (failures == 1 ? " failure (" : " failures (") + pct + "), " +
                  seconds_text(elapsed) + " elapsed";
  // Time left from this invocation's pace: the resumed runs took none of `elapsed`.
  const std::uint64_t now = done - std::min(done, resumed);
  if (total && now && done < total) {
    auto left = elapsed * static_cast<long long>(total - done) / static_cast<long long>(now);
    s += ", ~" + seconds_text(left) + " left";
  }
  return s;
}

void progress_meter::set_suffix(std::function<std::string()> suffix) {
  std::lock_guard lock(mu_);
  suffix_ = std::move(suffix);
}

void progress_meter::update(std::uint64_t done, std::uint64_t failures) {
  std::lock_guard lock(mu_);
  done_ = done;
  failures_ = failures;
  if (std::chrono::steady_clock::now() - last_print_ >= interval_) print_locked(false);
}

void progress_meter::finish() {
  std::lock_guard lock(mu_);
  // A short campaign off a terminal prints nothing: its summary says it all; nor does one whose
  // last line already gave the final counts (the same line twice reads as two campaigns).
  if (tty_ || (printed_ && (done_ != printed_done_ || failures_ != printed_failures_))) print_locked(true);
}

void progress_meter::interject(const std::function<void()>& write) {
  std::lock_guard lock(mu_);
  const bool redraw = out_ && tty_ && printed_;
  if (redraw) *out_ << '\r' << std::string(last_width_, ' ') << '\r';
  write();
  if (redraw) {
    last_width_ = 0;
    print_locked(false);
  } else if (out_) {
    out_->flush();
  }
}

void progress_meter::print_locked(bool final) {
  if (!out_) return;
  auto now = std::chrono::steady_clock::now();
  last_print_ = now;
  printed_ = true;
  printed_done_ = done_;
  printed_failures_ = failures_;
  std::string s = line(done_, failures_, total_, std::chrono::duration_cast<std::chrono::milliseconds>(now - start_), resumed_);
  if (suffix_) s += suffix_();
  if (tty_) {
    std::size_t width = s.size();
    if (width < last_width_) s += std::string(last_width_ - width, ' ');
    last_width_ = width;
    *out_ << '\r' << s;
    if (final) *out_ << '\n';
  } else {
    *out_ << s << '\n';
  }
  out_->flush();
}

}  // namespace faultline::harness
