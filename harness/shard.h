// Sharding a campaign of runs across machines.
//
// Runs are numbered globally (0, 1, 2, ... across every scenario and repetition of one
// invocation) and run k belongs to shard k mod n, so n machines given the same arguments and
// shard indexes 0..n-1 together perform every run exactly once. The shard comes from
// `--shard i/n`, or from the GoogleTest convention GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX that
// cluster schedulers and CTest already set.
//
//   auto s = harness::parse_shard("1/4");        // index 1 of 4
//   if (s->owns(run_number)) run(...);
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

/// Parses "i/n" with 0 <= i < n. Errors: errc::invalid_argument naming the problem.
core::result<shard> parse_shard(std::string_view text);

/// Reads GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX through `getenv_fn` (std::getenv by default).
/// Returns nullopt when neither is set; an error when only one is set or either is malformed.
core::result<std::optional<shard>> shard_from_env(const char* (*getenv_fn)(const char*) = nullptr);

}  // namespace faultline::harness
