// What the accounting/ scenario files share (accounting_scenarios.cc, bad_region.cc): the region
// every scenario opens (its bounds, opened or the run ends with region-created), inspect()'s
// slot of a process, and the scenarios defined outside accounting_scenarios.cc, which registers
// the whole family in catalog order.
//
// Thread safety: as core/accounting's region.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/accounting/region.h"
#include "scenarios/accounting/processes.h"
#include "scenarios/scenario.h"

namespace faultline::scenarios::accounting_support {

inline constexpr std::uint64_t mib = 1024 * 1024;

/// The bounds every scenario's processes use unless a scenario says otherwise: short enough that
/// a run stays under ~2 s, long enough that a loaded 2-core machine never trips them on the clean
/// path.
inline accounting::options region_options(std::uint32_t max_slots = 16) {
  using namespace std::chrono_literals;
  accounting::options o;
  o.devices = 1;
  o.limits_bytes = {1ull << 30};
  o.max_slots = max_slots;
  o.lock_bound = 1000ms;
  o.lock_slice = 20ms;
  o.reader_bound = 50ms;
  o.exit_handlers = false;
  return o;
}

/// Milliseconds from `t` until now.
inline long long ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

/// The region at `path`, created or attached; a failure ends the run (region-created).
inline std::unique_ptr<accounting::region> open_region(context& ctx, const std::string& path,
                                                       const accounting::options& o) {
  auto r = accounting::region::create_or_attach(path, o);
  require(ctx, r.has_value(), "region-created", r ? std::string() : r.error().to_string());
  return std::move(*r);
}

/// The slot of `pid` as inspect() reads it, or nullptr.
inline const accounting::slot_info* slot_of(const accounting::region_report& rep, pid_t pid) {
  for (const auto& s : rep.slots) {
    if (s.pid == pid) return &s;
  }
  return nullptr;
}

/// accounting/bad-region (bad_region.cc).
void bad_region(context& ctx);

}  // namespace faultline::scenarios::accounting_support
