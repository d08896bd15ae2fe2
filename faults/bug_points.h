// The catalog of bug points: every `bug/...` name a component may test with FAULTLINE_BUG.
//
// A bug point re-creates one historical bug (DESIGN.md §6.5). The code under test keeps the fixed
// behaviour and, where the bug point fires, takes the old path instead:
//
//   if (FAULTLINE_BUG("bug/alloc/no-exit-guard")) { /* pre-fix: free through the device */ }
//
// It is off unless a spec names it exactly with any action other than `off`
// (`bug/alloc/no-exit-guard=print`, or `=1*print` to take the old path once). FAULTLINE_BUG is
// true exactly when the point fires. The spec parser rejects a `bug/` name missing from this list
// (typo protection: a misspelt bug point would otherwise leave the bug silently off) and any
// wildcard that could cover `bug/` names.
//
// To add a bug point, append one line to `bug_point_catalog` below; the static_asserts at the end
// check every name at compile time. core cannot depend on faults, so this catalog is a plain list
// rather than a registration the components make themselves.
//
// Thread safety: constant data.
#pragma once

#include <span>
#include <string_view>

namespace faultline::faults {

/// One bug point: its exact name and a one-line description of the historical bug it re-creates.
struct bug_point_info {
  std::string_view name;
  std::string_view description;
};

/// Every bug point known to faultline. Extend by appending a line.
inline constexpr bug_point_info bug_point_catalog[] = {
    {"bug/alloc/no-exit-guard",
     "the per-device pool map's destructor frees through the device at process exit "
     "(no process_is_exiting() guard), after the runtime's teardown may have run"},
    {"bug/alloc/no-drain",
     "threads still inside device calls when exit begins are neither drained nor refused "
     "before the runtime's teardown runs"},
    {"bug/alloc/bounded-drain",
     "the exit drain gives up after a fixed 2 s: on a loaded GPU the calls still in flight then "
     "run into the runtime's teardown (a crash in libcuda at exit at --jobs 16 on an H100)"},
    {"bug/alloc/no-epoch-guard",
     "a pool keeps using streams, events and memory of a device context that was reset "
     "(no context-epoch check)"},
    {"bug/ipc/unchecked-join",
     "the parent drops the result of its timed waits on IPC children and closes the pool the "
     "binding's way, without a bound, while a late child holds an import (cuda-python #2124)"},
    {"bug/ipc/close-before-kill",
     "on a failed child, the parent closes the exported pool (without a bound) before killing "
     "the children that still hold imports, and waits on them forever"},
    {"bug/ipc/dropped-event-wait",
     "an IPC handle is exported before the stream that filled the buffer completed: the wait "
     "on the ready event is a query whose not-ready answer is dropped (numba-cuda #930)"},
    {"bug/accounting/stale-deadline",
     "the lock's deadline is computed once before the retry loop, so every later wait times out "
     "at once, and after the bound the lock is forced: two processes hold it"},
    {"bug/accounting/locking-exit-handler",
     "the exit handler takes the region's lock, so processes exiting together queue on it (or "
     "deadlock on a holder that died)"},
    {"bug/accounting/no-seqlock", "slot counters are written without the seqlock: readers accept torn values"},
    {"bug/accounting/no-writer-exclusion",
     "the seqlock has no writer exclusion: two writer threads on one slot interleave their updates"},
    {"bug/accounting/unbounded-reader",
     "a reader spins forever on a slot left mid-update by a writer that died"},
    {"bug/accounting/pid-only-liveness",
     "a slot's owner is judged alive by its pid alone, so a reused pid keeps a dead slot"},
    {"bug/accounting/query-under-lock",
     "the utilisation watcher runs its slow device query while holding the region's lock"},
    {"bug/registry/release-before-drain",
     "unregister releases the instance's device buffers before its workers are drained and "
     "joined, so a save still queued copies from freed (unmapped or reused) memory"},
    {"bug/registry/cleanup-by-id",
     "unregister removes the id before joining the workers and releases by id, so a same-id "
     "registration made during the join has its new buffers and leases released"},
    {"bug/registry/early-return-on-worker-error",
     "a worker error seen while joining makes unregister return at once, leaking the leases "
     "and buffers of an instance already removed from the map"},
    {"bug/registry/unsynchronized-concurrent-unregister",
     "a second unregister of an instance already being torn down returns at once, before the "
     "first has finished (its caller goes on as if the instance were gone)"},
};

/// Every bug point, in catalog order.
constexpr std::span<const bug_point_info> bug_points() noexcept { return bug_point_catalog; }

/// The catalog entry named exactly `name`, or nullptr.
constexpr const bug_point_info* find_bug_point(std::string_view name) noexcept {
  for (const auto& info : bug_point_catalog) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

namespace detail {
constexpr bool is_point_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/' || c == '-' || c == '+';
}

constexpr bool bug_catalog_is_valid() noexcept {
  for (std::size_t i = 0; i < std::size(bug_point_catalog); ++i) {
    const auto& info = bug_point_catalog[i];
    if (!info.name.starts_with("bug/") || info.name.size() == 4 || info.description.empty()) return false;
    for (char c : info.name) {
      if (!is_point_name_char(c)) return false;
    }
    for (std::size_t j = i + 1; j < std::size(bug_point_catalog); ++j) {
      if (bug_point_catalog[j].name == info.name) return false;
    }
  }
  return true;
}
}  // namespace detail

static_assert(detail::bug_catalog_is_valid(),
              "bug_point_catalog: every name must be unique, start with 'bug/', use only "
              "[A-Za-z0-9_./-], and carry a description");

}  // namespace faultline::faults
