// The fault-spec grammar (DESIGN.md §6.2): what a FAULTLINE_FAULTS / --faults string means.
//
//   spec := item (';' item)*
//   item := point '=' term ('->' term)*
//   term := [P '%'] [N '*'] action ['(' args ')']
//   action := off | fail[(code)] | delay(duration) | pause(rendezvous[, timeout]) | kill | abort
//           | teardown(device) | print | stop
//
//   auto s = faults::parse("sim/*=5%fail(ENOMEM);registry/unregister/after-remove=delay(50ms)");
//   s->items[0].terms[0].probability_ppb;   // 50'000'000 (5%)
//   faults::parse("accounting/lock=fial").error().message();
//   // "faults spec: column 17: expected an action (off, fail, delay, pause, kill, abort,
//   //  teardown, print, stop), found 'fial'"
//
// Tokens:
// - point: [A-Za-z0-9_./-]+ with an optional trailing '*' wildcard ("sim/*" covers every name
//   starting with "sim/"), then an optional `@FILTER` ([A-Za-z0-9_.+-]+ with an optional
//   trailing '*'): the program the point acts in (process/start@python3) or the function that
//   takes the lock (lock/sem/acquired@lock_shrreg); the preloaded agent's points only, see
//   faults/preload/spawn_points.h and lock_points.h. A name starting with "bug/" must be in bug_point_catalog
//   (faults/bug_points.h), and no wildcard may cover bug points. A point may be named once.
// - P: a decimal percentage 0..100 with at most 7 decimal places (5%, 0.5%).
// - N: a positive integer: the term fires at most N times.
// - code: an errno name (ENOMEM, EIO, ...), a CUDA driver error name (CUDA_ERROR_LAUNCH_FAILED,
//   faults/cuda_errors.h: for cuda/ points) or a positive integer; `fail` alone means fail(1).
// - duration: a whole number with unit ns, us, ms or s (50ms, 2s).
// - rendezvous: [A-Za-z0-9_.-]{1,128}; the pause timeout defaults to 10s.
// - device: a device index (0, 1, ...), or the word `device`: the calling thread's current device
//   (cuda/ points of the preloaded agent).
// Whitespace is allowed around every token. Empty items (";;" or a trailing ';') are ignored, so
// an empty or blank spec enables nothing.
//
// Meaning (FreeBSD fail(9) / fail-rs): on every hit the terms are evaluated in order; a term whose
// count is used up is skipped, a term whose probability draw fails is skipped; the first term that
// passes fires (its count goes down by one). `stop` stops the whole process (SIGSTOP) until it is
// continued or killed. `off` fires but does nothing: the point reports not
// fired and later terms are not tried. When no term fires the point does not fire.
//
// Errors: parse() rejects a malformed spec as a value (errc::invalid_argument) whose message is
// "faults spec: column C: <what was expected>, found '<token>'" with C the 1-based byte column.
// Thread safety: pure functions over values.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "faults/families.h"

namespace faultline::faults {

/// The grammar's name of an action ("fail").
std::string_view to_string(action_kind kind) noexcept;

/// The longest rendezvous name a pause may use (it becomes part of a shared-memory object name).
inline constexpr std::size_t max_rendezvous_name_size = 128;
/// How long a `pause(name)` waits for its partner when no timeout is given.
inline constexpr std::chrono::nanoseconds default_pause_timeout = std::chrono::seconds(10);

/// teardown(device): the device current on the calling thread (cuda/ points of the preloaded
/// agent; a core point ignores it).
inline constexpr int current_device = -1;

/// An action with its arguments; only the fields of `kind` are meaningful.
struct action {
  action_kind kind = action_kind::off;
  int code = 1;                          ///< fail: the failure code, non-zero
  std::chrono::nanoseconds duration{0};  ///< delay: how long to sleep
  std::string rendezvous;                ///< pause: the rendezvous name
  std::chrono::nanoseconds timeout = default_pause_timeout;  ///< pause: how long to wait
  int device = 0;                        ///< teardown: whose context to reset (current_device: the caller's)

  friend bool operator==(const action&, const action&) = default;
};

/// One term of a point's chain.
struct term {
  /// Chance that the term passes on a hit, in parts per billion (5% = 50'000'000); none = always.
  std::optional<std::uint32_t> probability_ppb;
  /// How many times the term may fire; none = unlimited.
  std::optional<std::uint64_t> count;
  faults::action action;

  friend bool operator==(const term&, const term&) = default;
};

/// One `point=term->term...` item.
struct item {
  /// The point name as written, including a trailing '*' for a wildcard (libfiu's pattern).
  std::string point;
  /// `@FILTER` after the name, without the '@': which program (or lock taker) the point acts in;
  /// only the preloaded agent's process/, spawn/ and lock/ points take one. Empty: every one.
  std::string filter;
  std::vector<term> terms;

  /// The item's name as written in the spec: point, then "@filter" when there is one. The
  /// agent records reached items under it (points.PID).
  [[nodiscard]] std::string written() const { return filter.empty() ? point : point + "@" + filter; }

  [[nodiscard]] bool is_wildcard() const noexcept { return !point.empty() && point.back() == '*'; }
  /// The name without the wildcard '*'.
  [[nodiscard]] std::string_view prefix() const noexcept {
    return is_wildcard() ? std::string_view(point).substr(0, point.size() - 1) : std::string_view(point);
  }

  friend bool operator==(const item&, const item&) = default;
};

/// A parsed spec: its items in the order written.
struct spec {
  std::vector<item> items;

  [[nodiscard]] bool empty() const noexcept { return items.empty(); }
  friend bool operator==(const spec&, const spec&) = default;
};

/// Parses `text`. Errors: invalid_argument with the column and what was expected (see above).
core::result<spec> parse(std::string_view text);

/// The canonical text of a spec, item or term; parse(format(s)) == s.
/// Percentages print without trailing zeros, durations in the largest exact unit, failure codes
/// by errno name where one exists ("5%3*fail(ENOMEM)", "delay(1500ms)").
std::string format(const spec& s);
std::string format(const item& i);
std::string format(const term& t);

/// The errno value named `name` ("ENOMEM"), or nothing.
std::optional<int> errno_from_name(std::string_view name) noexcept;
/// The name of errno value `code` ("ENOMEM"), or an empty view.
std::string_view errno_name(int code) noexcept;

}  // namespace faultline::faults
