// Sharding a campaign of runs across machines.
//
// Runs are numbered globally (0, 1, 2, ... across every scenario and repetition of one
// invocation) and run k belongs to shard k mod n, so n machines given the same arguments and
// shard indexes 0..n-1 together perform every run exactly once. The shard comes from
// `--shard i/n`, or from the variables a scheduler sets in each of its tasks:
//
//   GoogleTest / CTest      GTEST_SHARD_INDEX of GTEST_TOTAL_SHARDS
//   Kubernetes Indexed Job  JOB_COMPLETION_INDEX of FAULTLINE_SHARD_COUNT (Kubernetes does not
//                           tell a pod its Job's completion count: the manifest sets it equal to
//                           spec.completions)
//   Slurm job array         (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP
//                           of SLURM_ARRAY_TASK_COUNT (--array=0-7, 1-8, 0-15:2; not a list of
//                           ids such as 1,3,7, whose ids are not evenly spaced)
//
//   auto s = harness::parse_shard("1/4");        // index 1 of 4
//   if (s->owns(run_number)) run(...);
//   auto from = harness::shard_from_scheduler(); // e.g. 3/8 from "JOB_COMPLETION_INDEX=3 of ..."
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace faultline::harness {

/// One shard of n: the runs whose global number is congruent to `index` modulo `count`.
struct shard {
  std::uint64_t index = 0;
  std::uint64_t count = 1;

  /// True when run number `run` belongs to this shard.
  [[nodiscard]] bool owns(std::uint64_t run) const noexcept { return run % count == index; }
  /// "i/n".
  [[nodiscard]] std::string to_string() const;
};

/// The runs of `total` that `part` owns, counted.
std::uint64_t owned_runs(std::uint64_t total, const shard& part);

/// Parses "i/n" with 0 <= i < n. Errors: errc::invalid_argument naming the problem.
core::result<shard> parse_shard(std::string_view text);

/// Reads GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX through `getenv_fn` (std::getenv by default).
/// Returns nullopt when neither is set; an error when only one is set or either is malformed.
/// The GoogleTest convention only; shard_from_scheduler reads every scheduler's.
core::result<std::optional<shard>> shard_from_env(const char* (*getenv_fn)(const char*) = nullptr);

/// A shard taken from a scheduler's environment variables.
struct scheduled_shard {
  shard part;
  /// The variables and values it came from, for the campaign header and messages:
  /// "SLURM_ARRAY_TASK_ID=3 of SLURM_ARRAY_TASK_COUNT=8"; sources that agree are joined by "; ".
  std::string source;
  /// Every sharding variable that was set and read; the runner removes them from the runs'
  /// environment so that a program under test does not shard itself a second time.
  std::vector<std::string> consumed;
};

/// Reads the sharding variables of GoogleTest, Kubernetes Indexed Jobs and Slurm job arrays (see
/// the table above) through `getenv_fn` (std::getenv by default). Returns nullopt when none is
/// set. Several schedulers' variables may be set at once when they name the same shard.
/// Errors (errc::invalid_argument, naming the variables and their values): a malformed value; an
/// index without its count (JOB_COMPLETION_INDEX without FAULTLINE_SHARD_COUNT, and the reverse;
/// half of the GoogleTest pair; SLURM_ARRAY_TASK_ID without SLURM_ARRAY_TASK_COUNT or _MIN); an
/// index not below its count; a Slurm array whose task ids are not MIN, MIN+STEP, ...,
/// MIN+(COUNT-1)*STEP (checked against SLURM_ARRAY_TASK_MAX when set; STEP is 1 when unset); two
/// schedulers naming different shards. Where the variables cannot give a shard, the message
/// suggests `--shard i/n`: callers read no variable when the flag is given.
core::result<std::optional<scheduled_shard>> shard_from_scheduler(const char* (*getenv_fn)(const char*) = nullptr);

}  // namespace faultline::harness
