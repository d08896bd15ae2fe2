// The progress line a long campaign prints on stderr (after Go's cmd/stress): runs so far,
// failures, failure percentage, elapsed time and an estimate of the time left.
//
// On a terminal the line is rewritten in place (carriage return) at most ten times a second;
// elsewhere (CI logs) one line is printed every five seconds, so a log stays readable, and the
// final line only when it says something the last one did not.
//
// A resumed campaign counts its runs and its failures alike, the resumed ones included, so the
// rate is that of the runs counted; the estimate of the time left is made from this
// invocation's runs alone ("5/10 runs (2 resumed), 3 failures (60.0%)").
//
//   harness::progress_meter p(&std::cerr, isatty(2), total_runs, interval, resumed_runs);
//   p.update(done, failures);   // from any thread: runs recorded so far, resumed ones included
//   p.finish();
//
// Thread safety: update and finish may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>

namespace faultline::harness {

/// A progress line on a stream.
class progress_meter {
 public:
  /// `out` may be null (no output). `total` 0 means unknown (no estimate). `resumed`: the runs
  /// (of `total`) an earlier invocation recorded, counted in every `done` and `failures`.
  progress_meter(std::ostream* out, bool tty, std::uint64_t total,
                 std::chrono::milliseconds interval = std::chrono::seconds(5), std::uint64_t resumed = 0);
  /// Records the current counts (runs and failures recorded so far, resumed ones included) and
  /// prints when it is time to.
  void update(std::uint64_t done, std::uint64_t failures);
  /// Prints the final line (and ends the in-place line on a terminal).
  void finish();
  /// Runs `write`, which prints whole lines to the meter's stream (a warning), with the meter
  /// held still: on a terminal the in-place line is cleared first and drawn again after, so
  /// that the two never mix.
  void interject(const std::function<void()>& write);
  /// Text appended to every line from now on (", 12m of 8h budget"); called under the meter's lock.
  void set_suffix(std::function<std::string()> suffix);
  /// The text of the line for the given counts and elapsed time (no newline); `resumed` of
  /// `done` were recorded before this invocation started, `elapsed` ago.
  static std::string line(std::uint64_t done, std::uint64_t failures, std::uint64_t total,
                          std::chrono::milliseconds elapsed, std::uint64_t resumed = 0);

 private:
  void print_locked(bool final);
  std::mutex mu_;
  std::ostream* out_;
  bool tty_;
  std::uint64_t total_, resumed_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_, last_print_;
  std::uint64_t done_ = 0, failures_ = 0;
  std::uint64_t printed_done_ = 0, printed_failures_ = 0;  // the counts of the last line printed
  std::size_t last_width_ = 0;
  bool printed_ = false;
  std::function<std::string()> suffix_;
};

}  // namespace faultline::harness
