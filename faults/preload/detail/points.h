// The preloaded agent's own fault points — exit/start and exit/end (preload.cc), cuda/<API>
// (cuda_points.cc) — read from FAULTLINE_FAULTS without the fault engine: the agent must run in
// any program and needs nothing but libc. This is the subset of the grammar of faults/spec.h
// that such a point can use — `[P%][N*]action[(args)]` terms chained with `->`, actions off,
// delay(duration), abort, kill, print, stop, fail(code) and teardown(device) — found among the spec's
// items by exact name or trailing-`*` wildcard. The harness rejects actions a point cannot take
// before anything runs, so here an item this parser does not understand is skipped whole.
// Private to the agent; allocation-free and async-signal-safe where noted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "faults/families.h"

namespace faultline::agent::detail {

enum class point_action : std::uint8_t { off, delay, abort, kill, print, fail, teardown, stop };

/// teardown(device): the calling thread's current device.
inline constexpr int current_device = -1;

struct point_term {
  std::uint32_t probability_ppb = 1'000'000'000;  ///< 100% unless a P% was given
  bool limited = false;                           ///< an N* count was given
  std::uint64_t remaining = 0;                    ///< fires left when limited
  point_action action = point_action::off;
  std::uint64_t delay_ns = 0;                     ///< for delay
  int code = 1;                                   ///< for fail: an errno, CUDA error name or number
  int device = 0;                                 ///< for teardown: an index or current_device
};

inline constexpr std::size_t max_point_terms = 8;
inline constexpr std::size_t max_pattern_chars = 128;

/// One enabled point: the spec item's pattern (as written) and its chain of terms.
struct point_plan {
  bool enabled = false;
  char pattern[max_pattern_chars + 1] = {};
  point_term terms[max_point_terms];
  std::size_t term_count = 0;
};

/// Finds the item of `spec` that applies to `point` ("exit/end"): an exact name wins over a
/// wildcard, a longer wildcard over a shorter one (as the fault engine orders them). An item
/// with an `@FILTER` ("process/start@python3") applies only where FILTER (a name, or a prefix
/// and '*') names one of `programs` (a null-terminated list; none when null), and then wins over
/// the same point without one. Leaves `plan.enabled` false when no item applies or the one that
/// applies cannot be understood. `plan.pattern` is the item's name as written, filter included.
/// Pure; does not allocate.
void plan_point(const char* spec, const char* point, point_plan& plan, const char* const* programs = nullptr) noexcept;

/// Whether the agent understands the spec item `item` ("pattern=term->term", `length` bytes): every
/// term parses, and a family of the point (faults/families.h; for a wildcard, one it covers)
/// takes the term's action and the pattern's @filter. plan_point ignores an item it does not
/// understand; the command (harness/cli_faults.h) refuses the same items before run 1. Pure; does
/// not allocate.
bool item_understood(const char* item, std::size_t length) noexcept;

/// Calls `fn(pattern, length)` for each item of `spec`, with the item's name as written (before
/// its '=', trimmed; "cuda/cuMem*", "process/start@python3"). Pure; does not allocate.
template <class F>
void for_each_item(const char* spec, F&& fn) noexcept {
  if (spec == nullptr) return;
  for (const char* at = spec; *at != '\0';) {
    while (*at == ' ' || *at == '\t' || *at == ';') ++at;
    const char* end = at;
    while (*end != '\0' && *end != ';') ++end;
    const std::size_t name = faults::item_name_end(std::string_view(at, static_cast<std::size_t>(end - at)));
    const char* eq = name == std::string_view::npos ? end : at + name;
    if (eq < end) {
      std::size_t n = static_cast<std::size_t>(eq - at);
      while (n > 0 && (at[n - 1] == ' ' || at[n - 1] == '\t')) --n;
      if (n > 0) fn(at, n);
    }
    at = end;
  }
}

/// Evaluates the chain once (fail(9) semantics: a used-up term or a failed draw is skipped; the
/// first term that passes fires and, when limited, uses one count). `draw` is a uniform 64-bit
/// random value. Returns the action that fires (`off` when none).
point_term evaluate_plan(point_plan& plan, std::uint64_t (*draw)()) noexcept;

/// Claims one of the `limit` fires of term `term` of the item `pattern` among every process of
/// the run; true when one was left. What makes an N* count run-wide (process/start's).
using run_count_claim = bool (*)(const char* pattern, std::size_t term, std::uint64_t limit) noexcept;

/// evaluate_plan with the N* counts kept by `claim` across the run's processes instead of in
/// `plan`: a limited term that passes its draw fires only when `claim` grants it a count.
point_term evaluate_plan(point_plan& plan, std::uint64_t (*draw)(), run_count_claim claim) noexcept;

/// Parses a FAULTLINE_SEED value (decimal, or 0x hex) into `out`; false when malformed.
bool parse_seed_text(const char* text, std::uint64_t& out) noexcept;

}  // namespace faultline::agent::detail
