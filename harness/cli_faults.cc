#include "harness/cli_faults.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace faultline::harness {
namespace {

// Whether a spec item covers names starting with `prefix` ("cuda/cuda": runtime functions), or
// the name `point` exactly when given.
bool covers_prefix(const faults::item& item, std::string_view prefix) {
  const std::string_view p = item.prefix();
  return item.is_wildcard() ? (prefix.starts_with(p) || p.starts_with(prefix)) : std::string_view(item.point).starts_with(prefix);
}

}  // namespace

bool names_cuda_runtime(const faults::spec& spec) {
  return std::any_of(spec.items.begin(), spec.items.end(), [](const faults::item& i) { return covers_prefix(i, "cuda/cuda"); });
}

bool names_lock_points(const faults::spec& spec) {
  return std::any_of(spec.items.begin(), spec.items.end(), [](const faults::item& i) { return covers_prefix(i, "lock/"); });
}

bool names_posix_points(const faults::spec& spec) {
  return std::any_of(spec.items.begin(), spec.items.end(),
                     [](const faults::item& i) { return covers_prefix(i, "posix/") || covers_prefix(i, "libc/"); });
}

// The preloaded agent's own points act where the fault engine does not reach: exit/start and
// exit/end at process exit (off, delay, abort, kill, print), cuda/<API> before a CUDA call
// (those and fail, teardown; faults/preload/cuda_points.h), process/start in each new process
// (the first five) and spawn/parent before a spawn (and fail; faults/preload/spawn_points.h). What they cannot do is refused up
// front rather than silently ignored.
void check_agent_points(const faults::spec& spec) {
  using faults::action_kind;
  for (const auto& item : spec.items) {
    const bool exit_point = item.is_wildcard() ? (std::string_view("exit/start").starts_with(item.prefix()) ||
                                                  std::string_view("exit/end").starts_with(item.prefix()))
                                               : (item.point == "exit/start" || item.point == "exit/end");
    const bool cuda_point = covers_prefix(item, "cuda/");
    const bool start_point = covers_prefix(item, "process/start");
    const bool spawn_point = covers_prefix(item, "spawn/parent");
    const bool lock_point = covers_prefix(item, "lock/");
    const bool lock_wait = lock_point && std::string_view(item.point).ends_with("/wait");
    const bool posix_point = std::string_view(item.point).starts_with("posix/") || std::string_view(item.point).starts_with("libc/");
    const bool fn_point = std::string_view(item.point).starts_with("fn/");
    if (fn_point && item.is_wildcard())
      throw usage_error{"--faults: " + item.point + ": fn/ points name one function exactly (fn/lock_shrreg)"};
    if (fn_point) {
      const std::string_view name = std::string_view(item.point).substr(3);
      const std::size_t plus = name.find('+');
      std::string_view off = plus == std::string_view::npos ? std::string_view{} : name.substr(plus + 1);
      const bool hex = off.starts_with("0x") || off.starts_with("0X");
      if (hex) off.remove_prefix(2);
      const bool digits = std::all_of(off.begin(), off.end(), [&](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || (hex && std::isxdigit(static_cast<unsigned char>(c)));
      });
      if (plus == 0 || (plus != std::string_view::npos && (off.empty() || !digits)))
        throw usage_error{"--faults: " + item.point +
                          ": an fn/ point is fn/SYMBOL or fn/SYMBOL+OFFSET, a byte offset in decimal or 0x hex"};
    }
    if (!item.filter.empty() && !start_point && !spawn_point && !lock_point)
      throw usage_error{"--faults: " + item.written() +
                        ": an @filter is for process/start and spawn/parent (a program) and lock/ (a function)"};
    // fail is refused where the item names runtime calls only; a wider one (cuda/*) fails the
    // driver calls it covers.
    const bool runtime_point = std::string_view(item.is_wildcard() ? item.prefix() : item.point).starts_with("cuda/cuda");
    for (const auto& t : item.terms) {
      const action_kind k = t.action.kind;
      const bool basic = k == action_kind::off || k == action_kind::delay || k == action_kind::abort ||
                         k == action_kind::kill || k == action_kind::print || k == action_kind::stop;
      if (exit_point && !basic)
        throw usage_error{"--faults: " + item.point + " takes off, delay, abort, kill, print or stop, not " +
                          std::string(faults::to_string(k))};
      if (start_point && !basic)
        throw usage_error{"--faults: " + item.written() + " takes off, delay, abort, kill, print or stop, not " +
                          std::string(faults::to_string(k))};
      if (spawn_point && !basic && k != action_kind::fail)
        throw usage_error{"--faults: " + item.written() + " takes off, delay, abort, kill, print, stop or fail(ERRNO), not " +
                          std::string(faults::to_string(k))};
      if (lock_point && !basic && !(lock_wait && k == action_kind::fail))
        throw usage_error{"--faults: " + item.written() + " takes off, delay, abort, kill, print or stop" +
                          (lock_wait ? ", or fail(ERRNO)" : "") + ", not " + std::string(faults::to_string(k))};
      if (fn_point && !basic)
        throw usage_error{"--faults: " + item.point + " takes off, delay, abort, kill, print or stop, not " +
                          std::string(faults::to_string(k))};
      if (posix_point && !basic && k != action_kind::fail)
        throw usage_error{"--faults: " + item.written() + " takes off, delay, abort, kill, print, stop or fail(ERRNO), not " +
                          std::string(faults::to_string(k))};
      if (cuda_point && k == action_kind::pause)
        throw usage_error{"--faults: " + item.point + " takes off, delay, abort, kill, print, stop, fail or teardown, not pause"};
      if (runtime_point && k == action_kind::fail)
        throw usage_error{"--faults: " + item.point +
                          ": a CUDA runtime call cannot be failed (CUPTI's callbacks cannot change its result); fail "
                          "the driver call it makes instead, e.g. cuda/cuMemFree_v2=fail(CUDA_ERROR_LAUNCH_FAILED) "
                          "for cudaFree"};
      if (!cuda_point && k == action_kind::teardown && t.action.device == faults::current_device)
        throw usage_error{"--faults: " + item.point + ": teardown(device) is for cuda/ points; name a device (teardown(0))"};
    }
  }
}

}  // namespace faultline::harness
