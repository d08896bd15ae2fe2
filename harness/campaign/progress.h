// The progress line a long campaign prints on stderr (after Go's cmd/stress): runs so far,
// failures, failure percentage, elapsed time and an estimate of the time left.
//
// On a terminal the line is rewritten in place (carriage return) at most ten times a second;
// elsewhere (CI logs) one line is printed every five seconds, so a log stays readable.
//
//   harness::progress_meter p(&std::cerr, isatty(2), total_runs);
//   p.update(done, failures);   // from any thread
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
  /// `out` may be null (no output). `total` 0 means unknown (no estimate).
  progress_meter(std::ostream* out, bool tty, std::uint64_t total,
                 std::chrono::milliseconds interval = std::chrono::seconds(5));
  /// Records the current counts and prints when it is time to.
  void update(std::uint64_t done, std::uint64_t failures);
  /// Prints the final line (and ends the in-place line on a terminal).
  void finish();
  /// Runs `write`, which prints whole lines to the meter's stream (a warning), with the meter
  /// held still: on a terminal the in-place line is cleared first and drawn again after, so
  /// that the two never mix.
  void interject(const std::function<void()>& write);
  /// Text appended to every line from now on (", 12m of 8h budget"); called under the meter's lock.
  void set_suffix(std::function<std::string()> suffix);
  /// The text of the line for the given counts and elapsed time (no newline).
  static std::string line(std::uint64_t done, std::uint64_t failures, std::uint64_t total,
                          std::chrono::milliseconds elapsed);

 private:
  void print_locked(bool final);
  std::mutex mu_;
  std::ostream* out_;
  bool tty_;
  std::uint64_t total_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_, last_print_;
  std::uint64_t done_ = 0, failures_ = 0;
  std::size_t last_width_ = 0;
  bool printed_ = false;
  std::function<std::string()> suffix_;
};

}  // namespace faultline::harness
