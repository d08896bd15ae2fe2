// The one description of the fault grammar's actions and of the point families: what every
// reader of a spec consults (libfiu's model: one table of functions, many users). The engine's
// parser (faults/spec.cc) takes its action names and their arguments from `actions`; the
// preloaded agent's parser (faults/preload/detail/points.cc) the same; the agent's preload
// (faults/preload/preload.cc) decides which of its injectors a spec needs from `families`'
// injectors; the command (harness/cli_faults.cc) checks every item against `families` before
// run 1. Adding an action or a family is a change here (and the code that acts on it).
//
//   const point_family* f = faults::family_of("lock/sem/acquired");  // the lock/ family
//   f->takes(action_kind::fail);                                     // false: only lock/<kind>/wait fails
//   faults::family_of("sim/alloc")->places;                          // place_set::catalog
//
// Header only, constexpr tables and allocation-free lookups: the preloaded agent reads it inside
// a user's process, without libstdc++. Thread safety: constant data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace faultline::faults {

/// What a fired term does.
enum class action_kind : std::uint8_t { off, fail, delay, pause, kill, abort, teardown, print, stop };

/// What an action takes between parentheses.
enum class action_args : std::uint8_t {
  none,          ///< no parentheses (off, kill, ...)
  optional_code, ///< fail or fail(code)
  duration,      ///< delay(50ms)
  rendezvous,    ///< pause(name[, timeout])
  device,        ///< teardown(N | device)
};

struct action_description {
  std::string_view name;
  action_kind kind;
  action_args args;
};

/// Every action of the grammar, in the order its messages list them.
inline constexpr action_description action_table[] = {
    {"off", action_kind::off, action_args::none},
    {"fail", action_kind::fail, action_args::optional_code},
    {"delay", action_kind::delay, action_args::duration},
    {"pause", action_kind::pause, action_args::rendezvous},
    {"kill", action_kind::kill, action_args::none},
    {"abort", action_kind::abort, action_args::none},
    {"teardown", action_kind::teardown, action_args::device},
    {"print", action_kind::print, action_args::none},
    {"stop", action_kind::stop, action_args::none},
};

/// The action named `name`, or null.
constexpr const action_description* find_action(std::string_view name) noexcept {
  for (const auto& a : action_table) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

/// A set of actions, one bit per action_kind.
using action_set = std::uint16_t;
constexpr action_set bit(action_kind k) noexcept { return static_cast<action_set>(1u << static_cast<unsigned>(k)); }
/// What every point of the preloaded agent can do.
inline constexpr action_set basic_actions = bit(action_kind::off) | bit(action_kind::delay) | bit(action_kind::abort) |
                                            bit(action_kind::kill) | bit(action_kind::print) | bit(action_kind::stop);
inline constexpr action_set all_actions = 0x1ff;

/// How the places of a family are known.
enum class place_set : std::uint8_t {
  exact,     ///< the family is one point, named `name` exactly (exit/end)
  catalog,   ///< faultline's own points in the core and scenarios: checked by the scenarios that use them
  fiu_posix, ///< the names libfiu's POSIX preload defines (faults/point_names.h)
  cuda,      ///< CUDA driver (cu...) or runtime (cuda...) function names of the build's toolkit
  symbol,    ///< a function of the program or its libraries, from the symbol tables: no wildcard
  nccl,      ///< the NCCL functions the agent stands before (faults/preload/nccl_state.h)
};

/// What an @filter names.
enum class filter_kind : std::uint8_t {
  none,
  program,   ///< a program's name (process/start@python3)
  function,  ///< a function among the lock taker's frames (lock/sem/acquired@lock_shrreg)
  rank,      ///< `rank=N`: the NCCL rank of the process (nccl/ncclAllReduce@rank=1)
};

/// Which part of the preloaded agent acts on a family.
enum class injector : std::uint8_t { engine, exit, cuda, lock, fn, spawn, posix, nccl };

/// One family of points: a name (or a prefix ending in '/' or a name stem), and what it takes.
struct point_family {
  std::string_view name;  ///< exact name, or the prefix every point of the family starts with
  place_set places;
  action_set takes_actions;
  filter_kind filter;
  faults::injector injector;
  std::string_view usage;  ///< how its points are written, for messages

  [[nodiscard]] constexpr bool exact() const noexcept { return places == place_set::exact; }
  [[nodiscard]] constexpr bool takes(action_kind k) const noexcept { return (takes_actions & bit(k)) != 0; }
};

inline constexpr std::string_view lock_usage = "lock/<sem|mutex|file>/<wait|acquired|release>";

/// Every family. Longer names come before the shorter ones they start with (cuda/cuda before
/// cuda/cu): family_of takes the first that matches.
inline constexpr point_family family_table[] = {
    {"exit/start", place_set::exact, basic_actions, filter_kind::none, injector::exit, "exit/start"},
    {"exit/end", place_set::exact, basic_actions, filter_kind::none, injector::exit, "exit/end"},
    {"process/start", place_set::exact, basic_actions, filter_kind::program, injector::spawn, "process/start[@PROGRAM]"},
    {"spawn/parent", place_set::exact, basic_actions | bit(action_kind::fail), filter_kind::program, injector::spawn,
     "spawn/parent[@PROGRAM]"},
    {"lock/sem/wait", place_set::exact, basic_actions | bit(action_kind::fail), filter_kind::function, injector::lock, lock_usage},
    {"lock/sem/acquired", place_set::exact, basic_actions, filter_kind::function, injector::lock, lock_usage},
    {"lock/sem/release", place_set::exact, basic_actions, filter_kind::function, injector::lock, lock_usage},
    {"lock/mutex/wait", place_set::exact, basic_actions | bit(action_kind::fail), filter_kind::function, injector::lock, lock_usage},
    {"lock/mutex/acquired", place_set::exact, basic_actions, filter_kind::function, injector::lock, lock_usage},
    {"lock/mutex/release", place_set::exact, basic_actions, filter_kind::function, injector::lock, lock_usage},
    {"lock/file/wait", place_set::exact, basic_actions | bit(action_kind::fail), filter_kind::function, injector::lock, lock_usage},
    {"lock/file/acquired", place_set::exact, basic_actions, filter_kind::function, injector::lock, lock_usage},
    {"lock/file/release", place_set::exact, basic_actions, filter_kind::function, injector::lock, lock_usage},
    {"fn/", place_set::symbol, basic_actions, filter_kind::none, injector::fn, "fn/SYMBOL or fn/SYMBOL+OFFSET"},
    {"posix/", place_set::fiu_posix, basic_actions | bit(action_kind::fail), filter_kind::none, injector::posix,
     "posix/... as libfiu's POSIX preload names it (posix/io/oc/open)"},
    {"libc/", place_set::fiu_posix, basic_actions | bit(action_kind::fail), filter_kind::none, injector::posix,
     "libc/... as libfiu's POSIX preload names it (libc/mm/malloc)"},
    // CUPTI's callbacks cannot change a runtime call's result: no fail for cuda/cuda...
    {"cuda/cuda", place_set::cuda, basic_actions | bit(action_kind::teardown), filter_kind::none, injector::cuda,
     "cuda/<CUDA runtime function> (cuda/cudaFree)"},
    {"cuda/cu", place_set::cuda, basic_actions | bit(action_kind::fail) | bit(action_kind::teardown), filter_kind::none,
     injector::cuda, "cuda/<CUDA driver function> (cuda/cuMemFree_v2)"},
    {"nccl/", place_set::nccl, basic_actions | bit(action_kind::fail), filter_kind::rank, injector::nccl,
     "nccl/<NCCL function>[@rank=N] (nccl/ncclAllReduce@rank=1)"},
    // The catalog's own points (DESIGN.md §6.4), for scenario binaries and programs linking faultline::points.
    {"sim/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "sim/..."},
    {"alloc/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "alloc/..."},
    {"accounting/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "accounting/..."},
    {"registry/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "registry/..."},
    {"ipc/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "ipc/..."},
    {"bench/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "bench/..."},
    {"bug/", place_set::catalog, all_actions, filter_kind::none, injector::engine, "bug/... (faults/bug_points.h)"},
};

/// The family of the point `name` (a full name, without '*' or '@'), or null when none has it.
constexpr const point_family* family_of(std::string_view name) noexcept {
  for (const auto& f : family_table) {
    if (f.exact() ? name == f.name : name.starts_with(f.name)) return &f;
  }
  return nullptr;
}

/// Whether the wildcard prefix `prefix` (the name before its '*') covers a point of family `f`:
/// the family's name starts with it, or it goes deeper into `f` than into any family before it
/// (cuda/cuda* covers runtime functions only, cuda/cu* the driver's too).
constexpr bool wildcard_covers(std::string_view prefix, const point_family& f) noexcept {
  return f.name.starts_with(prefix) || (!f.exact() && family_of(prefix) == &f);
}

/// The first `n` characters of `s` (all of it when shorter). substr() would do, but it may throw,
/// and the preloaded agent links no C++ runtime.
constexpr std::string_view head(std::string_view s, std::size_t n) noexcept {
  return std::string_view(s.data(), n < s.size() ? n : s.size());
}

/// Whether the item pattern `pattern` (a name, or a prefix and '*'; an '@filter' after it is
/// ignored) can reach a point of family `f`.
constexpr bool pattern_reaches(std::string_view pattern, const point_family& f) noexcept {
  pattern = head(pattern, pattern.find('@'));
  const bool wild = !pattern.empty() && pattern.back() == '*';
  if (wild) pattern.remove_suffix(1);
  return wild ? wildcard_covers(pattern, f) : family_of(pattern) == &f;
}

/// Whether the item pattern `pattern` can reach a point acted on by `which`.
constexpr bool pattern_reaches(std::string_view pattern, injector which) noexcept {
  for (const auto& f : family_table) {
    if (f.injector == which && pattern_reaches(pattern, f)) return true;
  }
  return false;
}

/// The family named `name` exactly ("cuda/cuda"); it must exist.
constexpr const point_family& family_named(std::string_view name) noexcept {
  for (const auto& f : family_table) {
    if (f.name == name) return f;
  }
  return family_table[0];
}

/// The `rank=` that starts a rank filter: its '=' belongs to the filter, not to the item.
inline constexpr std::string_view rank_filter_prefix = "rank=";

/// Where the name of the spec item `item` ends: the index of the '=' that starts its terms
/// (npos when there is none). That is the first '=', except right after "@rank", where the '='
/// is part of the filter (nccl/ncclAllReduce@rank=1=3*off->stop). Every reader of a spec finds
/// an item's name through this.
constexpr std::size_t item_name_end(std::string_view item) noexcept {
  std::size_t eq = item.find('=');
  const std::size_t at = item.find('@');
  if (eq != std::string_view::npos && at != std::string_view::npos && at < eq &&
      std::string_view(item.data() + at + 1, eq - at).starts_with(rank_filter_prefix)) {
    eq = item.find('=', eq + 1);
  }
  return eq;
}

/// Calls `fn(pattern)` for each item's pattern of `spec` (the text before each '=', trimmed;
/// "cuda/cuMem*", "process/start@python3"). Does not allocate.
template <class F>
constexpr void for_each_pattern(std::string_view spec, F&& fn) noexcept {
  while (!spec.empty()) {
    const std::size_t end = spec.find(';');
    std::string_view item = head(spec, end);
    if (end == std::string_view::npos) spec = std::string_view();
    else spec.remove_prefix(end + 1);
    const std::size_t eq = item_name_end(item);
    if (eq == std::string_view::npos) continue;
    std::string_view pattern = head(item, eq);
    while (!pattern.empty() && (pattern.front() == ' ' || pattern.front() == '\t' || pattern.front() == '\n')) pattern.remove_prefix(1);
    while (!pattern.empty() && (pattern.back() == ' ' || pattern.back() == '\t')) pattern.remove_suffix(1);
    if (!pattern.empty()) fn(pattern);
  }
}

/// Whether some item of the spec text can reach a point acted on by `which` (the preload's
/// choice of what to install).
constexpr bool spec_reaches(std::string_view spec, injector which) noexcept {
  bool found = false;
  for_each_pattern(spec, [&](std::string_view p) { found = found || pattern_reaches(p, which); });
  return found;
}

}  // namespace faultline::faults
