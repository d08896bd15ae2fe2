// A run's output, captured as CI runners capture it: through a pipe that the harness drains at
// once (DESIGN.md §8.2).
//
// Where a program's stdout and stderr go changes how its exit races end: a write to a regular
// file is slower than one into a pipe, and a program that writes at exit keeps its other threads
// running longer (measured on an H100: an exit race crashing in 51/60 runs through a pipe crashed
// in 28/60 with its output going to a file). CTest, pytest and CI runners read a pipe, so the
// harness does too: one pipe for stdout and stderr (in the order they were written, as
// `prog 2>&1 | cat` gives them), drained by a thread of its own into the run's log so the program
// never waits on a full pipe while the harness is busy elsewhere (a hang's stack capture, say).
//
// The run ends when its process ends, not when the pipe closes: a grandchild that keeps the pipe
// open does not hold the run. `finish` drains what is left for a short grace and then drops the
// rest, saying so in the log. The log is bounded: past `limit_bytes` it keeps the first and the
// last half of the limit, and a line in between says how much was dropped.
//
// The log file is written once the run is over and its owner says to keep it (commit), or not at
// all (discard): a campaign of short passing runs keeps few of their logs, and a file created and
// removed again per run costs more than such a run (measured: 70-130 us per file on ext4). Output
// past output_spill_bytes, or still coming output_spill_after into the run, goes to the file as it
// comes, so a long run's log can be followed live.
//
//   auto out = harness::output_capture::open("out/logs/run.log", 4 << 20);
//   if (!out) return out.error();
//   spawn_options so; so.stdout_fd = out->write_fd();   // stdout and stderr
//   auto c = spawn(so);
//   out->close_write_end();                             // the run's processes hold it now
//   ...                                                 // wait for the run
//   harness::output_stats s = out->finish(std::chrono::milliseconds(100));
//   out->commit();                                      // or discard(): no log file
//
// Thread safety: one owner; the drain thread is internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "harness/detail/defaults.h"  // default_log_limit_bytes
#include "core/status.h"

namespace faultline::harness {

/// What a run wrote.
struct output_stats {
  std::uint64_t bytes = 0;          ///< everything read from the pipe
  std::uint64_t bytes_dropped = 0;  ///< cut from the middle of the log (over the limit)
  bool still_open = false;          ///< the pipe was still open when finish's grace ran out
};

/// Output held in memory before the log file is written (see the header).
inline constexpr std::size_t output_spill_bytes = std::size_t{1} << 20;
inline constexpr std::chrono::milliseconds output_spill_after{1000};

class output_capture {
 public:
  /// Creates (truncates) the log at `log_path` and a pipe whose read end a thread drains into it.
  /// `limit_bytes` bounds the log (0: no bound). Errors: io_error when the file or the pipe
  /// cannot be made, or the thread cannot be started.
  static core::result<output_capture> open(const std::filesystem::path& log_path,
                                           std::uint64_t limit_bytes = default_log_limit_bytes);

  output_capture(output_capture&&) noexcept;
  output_capture& operator=(output_capture&&) noexcept;
  output_capture(const output_capture&) = delete;
  output_capture& operator=(const output_capture&) = delete;
  /// Finishes with no grace if finish was not called.
  ~output_capture();

  /// The pipe's write end (close-on-exec): give it to the child as stdout (and stderr).
  [[nodiscard]] int write_fd() const noexcept;

  /// Closes the harness's copy of the write end; call once the child holds it, or the pipe
  /// never reports its end.
  void close_write_end() noexcept;

  /// Drains what the pipe still holds, waiting at most `grace` for its last writer to close it,
  /// and completes the log's text (its tail, what was dropped). Idempotent: later calls return
  /// the first answer.
  output_stats finish(std::chrono::milliseconds grace);

  /// Writes the log file (finishing first, with no grace, if finish was not called) and closes
  /// it. False when it could not be written. Destroying an output_capture that was neither
  /// committed nor discarded commits it. Idempotent.
  bool commit();

  /// No log file: removes what was spilled already. Idempotent; after commit it removes the file.
  void discard();

  struct state;

 private:
  explicit output_capture(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> s_;
};

}  // namespace faultline::harness
