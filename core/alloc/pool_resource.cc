#include "core/alloc/pool_resource.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string_view>

#include "core/alloc/detail/exit_state.h"
#include "core/points/point.h"

namespace faultline::core::alloc {

namespace {

constexpr std::size_t alignment = pool_resource::alignment_bytes;

// False when rounding up would overflow.
bool align_up(std::size_t bytes, std::size_t& out) noexcept {
  if (bytes > std::numeric_limits<std::size_t>::max() - (alignment - 1)) return false;
  out = (bytes + alignment - 1) & ~(alignment - 1);
  return true;
}

std::string hex(std::uintptr_t address) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(address));
  return buf;
}

status invariant_violated(std::string_view invariant, const std::string& detail) {
  return status(errc::internal,
                "pool_resource invariant '" + std::string(invariant) + "' violated: " + detail);
}

}  // namespace

pool_resource::pool_resource(device_memory_resource& upstream, pool_options options) noexcept
    : upstream_(upstream), options_(options), options_status_(validate(options)) {}

pool_resource::~pool_resource() {
  if (detail::destructors_skip_device_calls()) {
    // The runtime may already be gone (or about to be): leaking is the only safe release.
    detail::note_leaked_at_exit("pool_resource", upstream_bytes_.load(std::memory_order_acquire),
                                upstream_block_count_.load(std::memory_order_acquire));
    return;
  }
  std::lock_guard lock(mu_);
  if (backend_ == nullptr) return;  // never touched a device
  check_epoch_locked();
  if (!live_.empty()) {
    std::fprintf(stderr,
                 "faultline: pool_resource destroyed with %zu block(s) (%zu bytes) still allocated; "
                 "their memory goes back upstream anyway\n",
                 live_.size(), live_bytes_);
  }
  if (auto st = release_locked(/*ignore_live=*/true); !st) {
    std::fprintf(stderr, "faultline: pool_resource: destructor could not return every block: %s\n",
                 st.to_string().c_str());
  }
}

status pool_resource::validate(const pool_options& options) noexcept {
  if (options.initial_size_bytes == 0) {
    return status(errc::invalid_argument, "pool_options: initial_size_bytes must be greater than 0");
  }
  std::size_t aligned = 0;
  if (!align_up(options.initial_size_bytes, aligned)) {
    return status(errc::invalid_argument, "pool_options: initial_size_bytes " +
                                              std::to_string(options.initial_size_bytes) + " is too large");
  }
  if (options.maximum_size_bytes != 0 && options.maximum_size_bytes < options.initial_size_bytes) {
    return status(errc::invalid_argument,
                  "pool_options: maximum_size_bytes (" + std::to_string(options.maximum_size_bytes) +
                      ") is smaller than initial_size_bytes (" + std::to_string(options.initial_size_bytes) +
                      "); use 0 for no maximum");
  }
  if (options.device < -1) {
    return status(errc::invalid_argument, "pool_options: device " + std::to_string(options.device) +
                                              " is invalid (use -1 for the current device)");
  }
  return status::ok();
}

status pool_resource::bind_locked() noexcept {
  if (backend_ == nullptr) {
    if (options_.backend != nullptr) {
      backend_ = options_.backend;
    } else {
      auto chosen = device::select_backend();
      if (!chosen) return chosen.error();
      backend_ = *chosen;
    }
  }
  if (device_ < 0) {
    if (options_.device >= 0) {
      device_ = options_.device;
    } else {
      detail::device_call_scope scope;
      if (!scope) return detail::device_call_scope::refusal("pool_resource: current_device");
      auto d = backend_->current_device();
      if (!d) return d.error();
      device_ = *d;
    }
  }
  return status::ok();
}

bool pool_resource::holds_device_state_locked() const noexcept {
  if (!upstream_blocks_.empty()) return true;
  for (const auto& st : streams_) {
    if (st->event) return true;
  }
  return false;
}

void pool_resource::epoch_changed_locked(std::uint64_t now) noexcept {
  if (epoch_ == 0 || !holds_device_state_locked()) {
    // Nothing from an older context is held: adopting the new epoch loses nothing.
    epoch_ = now;
    return;
  }
  if (FAULTLINE_BUG("bug/alloc/no-epoch-guard")) return;  // pre-fix: keep the stale handles
  drop_for_reset_locked(now);
}

void pool_resource::drop_for_reset_locked(std::uint64_t new_epoch) noexcept {
  // Every handle and block below belongs to the old context: freeing, recording or destroying
  // any of them touches memory the reset unmapped. Forget them without a single device call.
  std::uint64_t leaked = 0;
  for (const auto& [id, ub] : upstream_blocks_) leaked += ub.bytes;
  const std::size_t blocks = upstream_blocks_.size();
  const std::size_t held_by_callers = live_.size();
  live_.for_each([&](std::uintptr_t address, const detail::block_node* n) { stale_live_[address] = n->bytes; });
  forget_blocks_locked();
  bytes_leaked_on_reset_ += leaked;
  ++context_resets_seen_;
  std::fprintf(stderr,
               "faultline: pool_resource: device %d context was reset (epoch %llu -> %llu); dropped %zu "
               "upstream block(s) without device calls, leaking %llu bytes; %zu block(s) still held by "
               "callers are dropped when freed\n",
               device_, static_cast<unsigned long long>(epoch_), static_cast<unsigned long long>(new_epoch),
               blocks, static_cast<unsigned long long>(leaked), held_by_callers);
  epoch_ = new_epoch;
}

void pool_resource::forget_blocks_locked() noexcept {
  live_.clear();
  upstream_blocks_.clear();
  streams_.clear();
  stream_index_.clear();
  last_state_ = nullptr;
  nodes_.reset();
  pool_bytes_ = 0;
  live_bytes_ = 0;
  upstream_bytes_.store(0, std::memory_order_release);
  upstream_block_count_.store(0, std::memory_order_release);
}

pool_resource::stream_state& pool_resource::find_or_add_state_locked(device::stream s) {
  // A few streams are found faster by a scan of their states than through the index.
  constexpr std::size_t scan_limit = 8;
  stream_state* found = nullptr;
  if (streams_.size() <= scan_limit) {
    for (const auto& st : streams_) {
      if (st->stream == s) {
        found = st.get();
        break;
      }
    }
  } else if (auto it = stream_index_.find(s.native); it != stream_index_.end()) {
    found = it->second;
  }
  if (found == nullptr) {
    streams_.push_back(std::make_unique<stream_state>());
    found = streams_.back().get();
    found->stream = s;
    stream_index_.emplace(s.native, found);
  }
  last_state_ = found;
  return *found;
}

status pool_resource::order_after_locked(stream_state& mine, stream_state& other) noexcept {
  {
    detail::device_call_scope scope;
    if (!scope) return detail::device_call_scope::refusal("pool_resource: cross-stream hand-over");
    if (!other.event) {
      auto e = backend_->create_event();
      if (!e) return e.error();
      other.event = *e;
    }
    // Recorded now rather than at each free: it captures everything queued on the freeing
    // stream so far, which includes all work queued before any of its frees.
    if (auto st = backend_->record_event(other.event, other.stream); !st) return st;
    if (auto st = backend_->stream_wait_event(mine.stream, other.event); !st) return st;
  }
  ++cross_stream_waits_;
  return status::ok();
}

result<detail::block_node*> pool_resource::take_from_other_stream_locked(stream_state& mine,
                                                                         std::size_t bytes) noexcept {
  stream_state* best = nullptr;
  std::size_t best_bytes = 0;
  for (const auto& st : streams_) {
    if (st.get() == &mine || st->free.empty()) continue;
    const std::size_t fit = st->free.best_fit_bytes(bytes);
    if (fit != 0 && (best == nullptr || fit < best_bytes)) {
      best = st.get();
      best_bytes = fit;
    }
  }
  if (best == nullptr) return status(errc::not_found, std::string());
  if (auto st = order_after_locked(mine, *best); !st) return st;
  return best->free.take_best_fit(bytes, nodes_);
}

result<detail::block_node*> pool_resource::merge_other_streams_locked(stream_state& mine,
                                                                      std::size_t bytes) noexcept {
  // No single list holds a fit, but free neighbours split between lists may hold one together.
  // Merging costs a stream wait per list (a false dependency when it does not help), so it is
  // skipped when all free bytes together are too few.
  std::size_t free_total = 0;
  for (const auto& st : streams_) free_total += st->free.total_bytes();
  if (free_total < bytes) return status(errc::not_found, std::string());
  for (const auto& st : streams_) {
    if (st.get() == &mine || st->free.empty()) continue;
    if (auto ordered = order_after_locked(mine, *st); !ordered) return ordered;
    mine.free.absorb(st->free, nodes_);
    ++free_list_merges_;
    if (detail::block_node* n = mine.free.take_best_fit(bytes, nodes_)) return n;
  }
  return status(errc::not_found, std::string());
}

std::size_t pool_resource::return_free_upstream_blocks_locked(std::size_t bytes) noexcept {
  auto entirely_free = [](const upstream_block& ub) {
    for (const detail::block_node* n = ub.first; n != nullptr; n = n->phys_next) {
      if (n->owner == nullptr) return false;
    }
    return true;
  };
  std::size_t returnable = 0;
  for (const auto& [id, ub] : upstream_blocks_) returnable += entirely_free(ub) ? ub.bytes : 0;
  if (returnable == 0) return 0;
  // Under a maximum, returning must leave room for the request, or it only loses memory.
  const std::size_t maximum = options_.maximum_size_bytes;
  const std::size_t kept = upstream_bytes_.load(std::memory_order_relaxed) - returnable;
  if (maximum != 0 && (bytes > maximum || kept > maximum - bytes)) return 0;
  {
    detail::device_call_scope scope;
    if (!scope) return 0;
    // Work queued on any stream before the frees may still use these blocks: the upstream may
    // only take them back once it is done (as in release()).
    if (!backend_->synchronize_device()) return 0;
  }
  std::size_t returned = 0;
  for (auto it = upstream_blocks_.begin(); it != upstream_blocks_.end();) {
    const upstream_block& ub = it->second;
    // A block the upstream does not take back stays in the pool and keeps serving.
    if (!entirely_free(ub) || !upstream_.deallocate(ub.base, ub.bytes, device::stream{})) {
      ++it;
      continue;
    }
    for (detail::block_node* n = ub.first; n != nullptr;) {
      detail::block_node* const next = n->phys_next;
      n->owner->remove(n);
      nodes_.release(n);
      n = next;
    }
    pool_bytes_ -= ub.usable_bytes;
    upstream_bytes_.fetch_sub(ub.bytes, std::memory_order_release);
    upstream_block_count_.fetch_sub(1, std::memory_order_release);
    ++upstream_blocks_returned_;
    ++returned;
    it = upstream_blocks_.erase(it);
  }
  return returned;
}

result<detail::block_node*> pool_resource::grow_locked(stream_state& mine, std::size_t bytes) noexcept {
  const std::size_t held = upstream_bytes_.load(std::memory_order_relaxed);
  const std::size_t maximum = options_.maximum_size_bytes;
  if (maximum != 0 && (bytes > maximum || held > maximum - bytes)) {
    return status(errc::out_of_memory, "pool_resource: maximum_size_bytes " + std::to_string(maximum) +
                                           " reached: the pool holds " + std::to_string(held) +
                                           " bytes and the request needs " + std::to_string(bytes) + " more");
  }
  std::size_t want = 0;
  if (held == 0) {
    align_up(options_.initial_size_bytes, want);  // validated in the constructor
    want = std::max(want, bytes);
  } else {
    want = std::max(bytes, held);  // doubles the pool
  }
  if (maximum != 0) want = std::min(want, maximum - held);
  want = std::min(want, std::max(bytes, detail::free_list::max_block_bytes));
  const std::size_t first_want = want;

  for (;;) {
    bool point_fired = false;
    result<void*> got = [&]() -> result<void*> {
      if (int err = FAULTLINE_POINT("alloc/pool/grow")) {
        point_fired = true;
        return status::injected_fault("alloc/pool/grow", err);
      }
      return upstream_.allocate(want, mine.stream);
    }();
    if (got) {
      const auto base = reinterpret_cast<std::uintptr_t>(*got);
      std::uintptr_t begin = 0;
      align_up(base, begin);
      const std::size_t lost = begin - base;
      const std::size_t usable = want > lost ? (want - lost) & ~(alignment - 1) : 0;
      if (usable < bytes) {
        (void)upstream_.deallocate(*got, want, mine.stream);
        return status(errc::internal, "pool_resource: upstream returned " + hex(base) +
                                          ", not 256-byte aligned and too small once aligned");
      }
      const bool first_block = upstream_blocks_.empty();
      const std::uint64_t id = next_upstream_id_++;
      detail::block_node* whole = nodes_.acquire();
      whole->address = begin;
      whole->bytes = usable;
      whole->upstream_id = id;
      upstream_blocks_.emplace(id, upstream_block{*got, want, begin, usable, whole});
      pool_bytes_ += usable;
      upstream_bytes_.fetch_add(want, std::memory_order_release);
      upstream_block_count_.fetch_add(1, std::memory_order_release);
      ++upstream_allocations_;
      // With nothing else held, this allocation may be what created the context (first use, or
      // the first after a reset): its epoch is the one the pool now lives in. (A backend may
      // give a re-created context a new epoch; that is not a reset the pool has to survive.)
      if (first_block) epoch_ = backend_->context_epoch(device_);
      // Nothing else on the list fits (or the pool would not have grown): the new block serves it.
      mine.free.insert(whole, nodes_);
      return mine.free.take_best_fit(bytes, nodes_);
    }
    const status refusal = got.error();
    // Only out_of_memory is a refusal worth a smaller retry; anything else (unloading, refused
    // at exit, a bad argument) would fail the same way again.
    if (!point_fired && refusal.code() != errc::out_of_memory) return refusal;
    ++upstream_refusals_;
    if (want == bytes) {
      return status(errc::out_of_memory,
                    "pool_resource: upstream refused every growth from " + std::to_string(first_want) +
                        " down to " + std::to_string(bytes) + " bytes (pool holds " + std::to_string(held) +
                        " bytes); last refusal: " + refusal.to_string(),
                    refusal.injected());
    }
    std::size_t half = 0;
    align_up(want / 2, half);
    want = std::max(bytes, half);
  }
}

result<void*> pool_resource::do_allocate(std::size_t bytes, device::stream s) noexcept {
  if (!options_status_) return options_status_;
  if (int err = FAULTLINE_POINT("alloc/pool/allocate")) return status::injected_fault("alloc/pool/allocate", err);
  std::size_t size = 0;
  if (bytes > detail::free_list::max_block_bytes || !align_up(bytes, size)) {
    return status(errc::out_of_memory,
                  "pool_resource: a request of " + std::to_string(bytes) + " bytes exceeds any pool");
  }
  std::lock_guard lock(mu_);
  if (backend_ == nullptr || device_ < 0) [[unlikely]] {
    if (auto st = bind_locked(); !st) return st;
  }
  check_epoch_locked();
  stream_state& mine = state_for_locked(s);
  if (detail::block_node* n = mine.free.take_best_fit(size, nodes_)) [[likely]] return hand_out_locked(n);
  return allocate_slow_locked(mine, size);
}

result<void*> pool_resource::allocate_slow_locked(stream_state& mine, std::size_t bytes) noexcept {
  auto handed = take_from_other_stream_locked(mine, bytes);
  if (handed) return hand_out_locked(*handed);
  if (handed.code() != errc::not_found) return handed.error();

  // Growth makes no stream wait on another; merging lists would make this one wait on each.
  auto grown = grow_locked(mine, bytes);
  if (grown) return hand_out_locked(*grown);
  if (grown.code() != errc::out_of_memory) return grown.error();

  // Short of memory: free neighbours split between the streams' lists may hold the request
  // together, and entirely free upstream blocks (too small, or in the way of one that is not)
  // may be worth more to the upstream.
  auto merged = merge_other_streams_locked(mine, bytes);
  if (merged) return hand_out_locked(*merged);
  if (merged.code() != errc::not_found) return merged.error();
  if (return_free_upstream_blocks_locked(bytes) == 0) return grown.error();
  auto regrown = grow_locked(mine, bytes);
  if (!regrown) return regrown.error();
  return hand_out_locked(*regrown);
}

status pool_resource::do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::size_t size = 0;
  if (!align_up(bytes, size)) {
    return status(errc::invalid_argument, "pool_resource: deallocate: " + std::to_string(bytes) +
                                              " bytes cannot have come from a pool");
  }
  std::lock_guard lock(mu_);
  // No epoch query here: a deallocation makes no device call, and a block of a context reset
  // since then that goes back to a free list now is dropped with the list by the next call that
  // queries the epoch (allocate, release, the destructor) before anything could hand it out.
  // The query would be a third of a pair's cost on a GPU (one driver call).
  detail::block_node* n = live_.take(address);
  if (n == nullptr || n->bytes != size) [[unlikely]] return bad_deallocate_locked(address, n, bytes, size);
  live_bytes_ -= size;
  state_for_locked(s).free.insert(n, nodes_);
  return status::ok();
}

status pool_resource::bad_deallocate_locked(std::uintptr_t address, detail::block_node* n, std::size_t bytes,
                                            std::size_t size) noexcept {
  if (n == nullptr) {
    if (auto stale = stale_live_.find(address); stale != stale_live_.end()) {
      // Its memory died with the old context; the upstream never sees it again.
      stale_live_.erase(stale);
      ++stale_deallocations_;
      return status::ok();
    }
    return status(errc::invalid_argument, "pool_resource: deallocate: " + hex(address) +
                                              " was not allocated by this pool or was already freed");
  }
  live_.insert(n);  // still live: the free was malformed
  return status(errc::invalid_argument,
                "pool_resource: deallocate: " + hex(address) + " holds " + std::to_string(n->bytes) +
                    " bytes but was freed with " + std::to_string(bytes) + " (rounded to " + std::to_string(size) +
                    ")");
}

status pool_resource::release() noexcept {
  std::lock_guard lock(mu_);
  if (backend_ == nullptr) return status::ok();
  check_epoch_locked();
  return release_locked(/*ignore_live=*/false);
}

status pool_resource::release_locked(bool ignore_live) noexcept {
  if (!ignore_live && !live_.empty()) {
    return status(errc::busy, "pool_resource: release: " + std::to_string(live_.size()) + " block(s) (" +
                                  std::to_string(live_bytes_) +
                                  " bytes) are still allocated; deallocate them before release()");
  }
  if (!holds_device_state_locked()) return status::ok();

  status first;
  {
    detail::device_call_scope scope;
    if (!scope) return detail::device_call_scope::refusal("pool_resource: release");
    // Work queued on any stream may still use freed blocks; the upstream may only take them
    // back once it is done. Synchronising the device needs no stream handle the caller may have
    // destroyed since.
    if (auto st = backend_->synchronize_device(); !st) first = st;
    for (const auto& st : streams_) {
      if (!st->event) continue;
      if (auto d = backend_->destroy_event(st->event); !d && first) first = d;
    }
  }
  for (auto& [id, ub] : upstream_blocks_) {
    if (auto st = upstream_.deallocate(ub.base, ub.bytes, device::stream{}); !st && first) first = st;
  }
  forget_blocks_locked();
  return first;
}

pool_statistics pool_resource::statistics() const noexcept {
  std::lock_guard lock(mu_);
  pool_statistics out;
  out.pool_bytes = pool_bytes_;
  out.upstream_blocks = upstream_blocks_.size();
  out.live_bytes = live_bytes_;
  out.live_blocks = live_.size();
  for (const auto& st : streams_) {
    out.free_bytes += st->free.total_bytes();
    out.free_blocks += st->free.block_count();
    out.largest_free_block_bytes = std::max(out.largest_free_block_bytes, st->free.largest_bytes());
  }
  out.streams = streams_.size();
  out.upstream_allocations = upstream_allocations_;
  out.upstream_refusals = upstream_refusals_;
  out.upstream_blocks_returned = upstream_blocks_returned_;
  out.cross_stream_waits = cross_stream_waits_;
  out.free_list_merges = free_list_merges_;
  out.context_resets_seen = context_resets_seen_;
  out.bytes_leaked_on_reset = bytes_leaked_on_reset_;
  out.stale_deallocations = stale_deallocations_;
  return out;
}

status pool_resource::check_invariants() const noexcept {
  std::lock_guard lock(mu_);

  // Each free list on its own: filed by size, bitmaps, totals, coalesced.
  std::size_t free_total = 0;
  for (const auto& st : streams_) {
    if (std::string e = st->free.check(); !e.empty()) {
      return invariant_violated("free lists address-ordered and coalesced",
                                "stream " + hex(reinterpret_cast<std::uintptr_t>(st->stream.native)) + ": " + e);
    }
    free_total += st->free.total_bytes();
  }

  // No two blocks overlap, whatever list or state they are in.
  struct placed {
    std::uintptr_t address;
    std::size_t bytes;
    bool live;
  };
  std::vector<placed> all;
  all.reserve(live_.size() + 64);
  for (const auto& st : streams_) {
    st->free.for_each([&](const detail::block_node& n) { all.push_back({n.address, n.bytes, false}); });
  }
  std::size_t live_total = 0;
  live_.for_each([&](std::uintptr_t address, const detail::block_node* n) {
    all.push_back({address, n->bytes, true});
    live_total += n->bytes;
  });
  std::sort(all.begin(), all.end(), [](const placed& a, const placed& b) { return a.address < b.address; });
  for (std::size_t i = 1; i < all.size(); ++i) {
    const placed& a = all[i - 1];
    const placed& b = all[i];
    if (a.address + a.bytes > b.address) {
      const char* invariant = !a.live && !b.live ? "free blocks never overlap"
                              : a.live && b.live ? "live blocks never overlap"
                                                 : "free and live blocks never overlap";
      return invariant_violated(invariant, std::string(a.live ? "live" : "free") + " block " + hex(a.address) +
                                               " (+" + std::to_string(a.bytes) + ") overlaps " +
                                               (b.live ? "live" : "free") + " block " + hex(b.address) +
                                               " (+" + std::to_string(b.bytes) + ")");
    }
  }

  if (free_total + live_total != pool_bytes_) {
    return invariant_violated("free + live = pool size",
                              "free " + std::to_string(free_total) + " + live " + std::to_string(live_total) +
                                  " != pool " + std::to_string(pool_bytes_) + " bytes");
  }
  if (live_total != live_bytes_) {
    return invariant_violated("live bytes = sum of live blocks",
                              "live byte count " + std::to_string(live_bytes_) + " but live blocks hold " +
                                  std::to_string(live_total));
  }
  // Every block lies in exactly one upstream block: each upstream block is tiled, in address
  // order, by one chain of blocks, and every listed or live block is a link of a chain.
  std::size_t usable_total = 0;
  std::size_t chained_free = 0;
  std::size_t chained_live_blocks = 0;
  std::size_t chained_free_blocks = 0;
  for (const auto& [id, ub] : upstream_blocks_) {
    usable_total += ub.usable_bytes;
    std::uintptr_t expect = ub.begin;
    const detail::block_node* prev = nullptr;
    for (const detail::block_node* n = ub.first; n != nullptr; n = n->phys_next) {
      if (n->phys_prev != prev || n->address != expect || n->upstream_id != id || n->bytes == 0) {
        return invariant_violated("every block inside exactly one upstream block",
                                  "the blocks of upstream block " + std::to_string(id) + " do not tile it at " +
                                      hex(expect));
      }
      if (n->owner == nullptr) {
        if (live_.find(n->address) != n) {
          return invariant_violated("every block inside exactly one upstream block",
                                    "block " + hex(n->address) + " is neither free nor live");
        }
        ++chained_live_blocks;
      } else {
        chained_free += n->bytes;
        ++chained_free_blocks;
      }
      expect += n->bytes;
      prev = n;
    }
    if (expect != ub.begin + ub.usable_bytes) {
      return invariant_violated("every block inside exactly one upstream block",
                                "the blocks of upstream block " + std::to_string(id) + " end at " + hex(expect) +
                                    ", not at " + hex(ub.begin + ub.usable_bytes));
    }
  }
  std::size_t listed_free_blocks = 0;
  for (const auto& st : streams_) listed_free_blocks += st->free.block_count();
  if (chained_live_blocks != live_.size() || chained_free_blocks != listed_free_blocks || chained_free != free_total) {
    return invariant_violated("every block inside exactly one upstream block",
                              std::to_string(live_.size()) + " live and " + std::to_string(listed_free_blocks) +
                                  " free blocks are known, but the upstream blocks hold " +
                                  std::to_string(chained_live_blocks) + " live and " +
                                  std::to_string(chained_free_blocks) + " free");
  }

  if (usable_total != pool_bytes_) {
    return invariant_violated("pool size = sum of upstream blocks",
                              "pool size " + std::to_string(pool_bytes_) + " but upstream blocks hold " +
                                  std::to_string(usable_total));
  }
  return status::ok();
}

}  // namespace faultline::core::alloc
