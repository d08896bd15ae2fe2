#include "harness/shard.h"

#include <charconv>
#include <cstdlib>

namespace faultline::harness {
namespace {

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

core::result<shard> make(std::uint64_t index, std::uint64_t count, std::string_view what) {
  if (count == 0) return core::status(core::errc::invalid_argument, std::string(what) + ": shard count must be at least 1");
  if (index >= count)
    return core::status(core::errc::invalid_argument,
                        std::string(what) + ": shard index " + std::to_string(index) +
                            " is not below the shard count " + std::to_string(count));
  return shard{index, count};
}

}  // namespace

std::string shard::to_string() const { return std::to_string(index) + "/" + std::to_string(count); }

core::result<shard> parse_shard(std::string_view text) {
  std::string what = "--shard '" + std::string(text) + "'";
  auto slash = text.find('/');
  std::uint64_t i = 0, n = 0;
  if (slash == std::string_view::npos || !parse_u64(text.substr(0, slash), i) || !parse_u64(text.substr(slash + 1), n))
    return core::status(core::errc::invalid_argument, what + ": expected INDEX/COUNT, e.g. 0/4");
  return make(i, n, what);
}

core::result<std::optional<shard>> shard_from_env(const char* (*getenv_fn)(const char*)) {
  auto get = [&](const char* name) -> const char* {
    return getenv_fn ? getenv_fn(name) : std::getenv(name);
  };
  const char* total = get("GTEST_TOTAL_SHARDS");
  const char* index = get("GTEST_SHARD_INDEX");
  if (!total && !index) return std::optional<shard>();
  if (!total || !index)
    return core::status(core::errc::invalid_argument,
                        "GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX must be set together");
  std::uint64_t n = 0, i = 0;
  if (!parse_u64(total, n) || !parse_u64(index, i))
    return core::status(core::errc::invalid_argument,
                        std::string("malformed GTEST_TOTAL_SHARDS='") + total + "' / GTEST_SHARD_INDEX='" + index + "'");
  auto s = make(i, n, "GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS");
  if (!s) return s.error();
  return std::optional<shard>(*s);
}

}  // namespace faultline::harness
