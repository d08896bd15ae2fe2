// Repair: the slots of dead processes reclaimed in place and the aggregates recomputed, under
// the lock (region::repair_locked, which lock() runs after a holder died and register_process()
// when no slot is free), and the tool that repairs a file by path.
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "core/accounting/detail/layout.h"
#include "core/accounting/detail/region_internal.h"
#include "core/accounting/region.h"
#include "core/process_identity.h"
#include "core/points/point.h"

namespace faultline::accounting {

namespace {

using detail::counter_load;
using detail::counter_store;
using detail::header;
using detail::slot;
using detail::try_read_device;

// Zeroes a dead process's slot and frees it. A slot left even holds exactly what its owner added
// to the aggregates, so that much is subtracted; one left odd is unknown (the writer may or may
// not have touched the aggregate) and is settled by the recompute that follows. Under the lock.
bool reclaim_dead_slot(header* h, slot* s, std::uint32_t devices) noexcept {
  const std::uint64_t q = s->seq.load(std::memory_order_acquire);
  const bool odd = (q & 1) != 0;
  for (std::uint32_t d = 0; d < devices; ++d) {
    const std::uint64_t t = s->counters[d][detail::c_total].load(counter_load);
    if (!odd && t != 0) h->aggregate[d].fetch_sub(t, std::memory_order_acq_rel);
    for (auto& c : s->counters[d]) c.store(0, counter_store);
  }
  s->seq.store(odd ? q + 1 : q + 2, std::memory_order_release);
  s->start_time.store(0, std::memory_order_relaxed);
  s->pid.store(0, std::memory_order_release);
  h->slots_reclaimed.fetch_add(1, std::memory_order_relaxed);
  return odd;
}

// Sets device d's aggregate to the sum of the in-use slots' totals, racing live writers safely:
// the sum is taken with every slot even, re-checked unchanged, and installed with a CAS against
// the aggregate value read before the sum; any charge or release that landed in between changes
// either a sequence or the aggregate and the attempt is retried. Under the lock (so no slot is
// claimed meanwhile). Returns false when live writers kept it busy through every attempt.
bool recompute_aggregate(header* h, std::uint32_t max_slots, std::uint32_t d, std::int64_t& correction) noexcept {
  constexpr int attempts = 256;
  for (int a = 0; a < attempts; ++a) {
    if (a > 0) sched_yield();
    std::uint64_t before = h->aggregate[d].load(std::memory_order_acquire);
    std::uint64_t sum = 0;
    bool clean = true;
    for (std::uint32_t i = 0; i < max_slots && clean; ++i) {
      const slot* s = detail::slot_at(h, i);
      if (s->pid.load(std::memory_order_acquire) == 0) continue;
      counters c;
      std::uint64_t q = 0;
      if (!try_read_device(s, d, c, q)) {
        clean = false;
        break;
      }
      sum += c.total;
    }
    if (!clean) continue;
    // A writer that started after its slot was read and finished before now moved the sequence
    // and, having charged or released, the aggregate: the CAS below catches it.
    if (h->aggregate[d].compare_exchange_strong(before, sum, std::memory_order_acq_rel)) {
      correction = static_cast<std::int64_t>(sum) - static_cast<std::int64_t>(before);
      return true;
    }
  }
  return false;
}

}  // namespace

repair_report region::repair_locked(bool owner_died) {
  repair_report rep;
  rep.lock_owner_died = owner_died;
  const bool pid_only = FAULTLINE_BUG("bug/accounting/pid-only-liveness");
  for (std::uint32_t i = 0; i < max_slots_; ++i) {
    slot* s = detail::slot_at(h_, i);
    const pid_t p = s->pid.load(std::memory_order_acquire);
    if (p == 0) continue;
    const std::uint64_t start = s->start_time.load(std::memory_order_relaxed);
    if (core::process_liveness(p, start, pid_only) == core::liveness::alive) continue;
    ++rep.dead_slots_reclaimed;
    if (reclaim_dead_slot(h_, s, devices_)) ++rep.odd_slots_repaired;
  }
  rep.aggregate_corrections.assign(devices_, 0);
  bool corrected = false;
  for (std::uint32_t d = 0; d < devices_; ++d) {
    if (recompute_aggregate(h_, max_slots_, d, rep.aggregate_corrections[d])) ++rep.devices_recomputed;
    corrected = corrected || rep.aggregate_corrections[d] != 0;
  }
  if (owner_died || rep.dead_slots_reclaimed > 0 || corrected) h_->repairs.fetch_add(1, std::memory_order_acq_rel);
  return rep;
}

result<repair_report> region::repair() {
  auto g = lock();
  if (!g) return g.error();
  repair_report rep = repair_locked(false);
  rep.lock_owner_died = g->repaired();
  return rep;
}

result<repair_report> repair(const std::string& path, const options& opt) {
  options o = opt;
  o.exit_handlers = false;
  auto r = region::attach(path, o);
  if (!r) return r.error();
  return (*r)->repair();
}

}  // namespace faultline::accounting
