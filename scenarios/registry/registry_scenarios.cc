// The registry/ family: unregistering an instance of a KV-cache offload engine while its per-GPU
// save and load workers still have work (core/registry, DESIGN.md §5.2).
//
// The bug class is PegaFlow #329: an offload engine's instance owned a save and a load worker per
// GPU. Its cleanup released the device buffers before unregistering the instance and never waited
// for the workers, so a save still queued copied from unmapped memory (the whole server aborted)
// or, once the address was reused, from another client's buffer. The fix proposed for it (shut
// down through a shared reference: close the channel, drain, join) was reviewed with two defects:
// the id was removed before the join, so a same-id registration made during the join had its new
// buffers released by the old teardown; and a worker error during shutdown returned early,
// leaking the leases and buffers of an instance already removed. A fourth defect of the class: a
// second unregister of an instance being torn down returned at once, before the first finished.
// Each is a bug point of core/registry; the scenarios below re-create the race each needs and
// check that the fixed registry survives it, and that each bug point is caught.
//
// Method: every scenario drives a real instance_registry on the selected backend. Buffers come
// from the device through a tracking adaptor (the independent witness for "nothing leaked"), and
// the client fills them with seeded bytes and saves with the checksum of what it wrote, so a copy
// from the wrong or freed memory is a checksum mismatch, never missed. On the sim, strict mode is
// switched on first: freed device pages are unmapped, so a copy from a released buffer is a real
// SIGSEGV (on CUDA it is a failed copy, a worker error). The interleaving each bug needs is
// forced, not hoped for: the scenario adds `pause` rendezvous on the registry's own fault points
// to the run's fault spec (faults::merge_specs), in the clean variant as much as in the bug
// variants, so the fixed code is shown to survive exactly the race the bug loses. Rendezvous names
// carry the process id: a rendezvous is shared by every process of the user, and verify runs two
// copies of a variant at once (--jobs 2), which must not pair up with each other. Every wait is
// bounded (pauses 2 s), so a broken build fails on an invariant instead of hanging.
//
// Invariants, named as the violations report them:
//   racing-save-completes-or-fails-with-teardown-error  every save racing unregister completes with
//       the right bytes, or fails with refused (submitted after the mark) or timeout (abandoned by
//       an expired join); a worker error only where the scenario injected one
//   no-checksum-mismatch         no save copied bytes other than the client's
//   no-task-after-unregister     when unregister returns, every task of that generation is done
//   newer-generation-untouched   an older teardown never releases a newer generation's buffers,
//                                leases or map entry
//   unregister-returned-before-teardown  no unregister returns while the instance is still there
//   registry-empty               after unregister_all
//   nothing-leaked               device buffers (tracking adaptor), leases and the registry's own
//                                count of live buffers are back to what the live instances hold
//   (a use of unmapped memory ends the run with SIGSEGV: outcome crash)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/alloc/device_resource.h"
#include "core/alloc/tracking_adaptor.h"
#include "core/device/device.h"
#include "core/device/sim/sim_backend.h"
#include "core/registry/registry.h"
#include "faults/engine.h"
#include "faults/launcher.h"
#include "faults/rendezvous.h"
#include "scenarios/scenario.h"

namespace faultline::scenarios {

namespace {

using namespace std::chrono_literals;
namespace reg = core::registry;
namespace device = core::device;
namespace alloc = core::alloc;
using core::errc;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t kib = 1024;
// Whole pages, so a strict sim unmaps most of a released buffer.
constexpr std::size_t buffer_bytes = 256 * kib;
constexpr std::size_t chunk_bytes = 32 * kib;
constexpr std::size_t chunks = buffer_bytes / chunk_bytes;
constexpr auto pause_bound = "2s";
constexpr auto wait_bound = 2s;

// The rendezvous name of `tag` private to this process.
std::string rendezvous_name(std::string_view tag) {
  return "reg-" + std::string(tag) + "-" + std::to_string(::getpid());
}

// pause(NAME, 2s) for `tag`.
std::string pause_on(std::string_view tag) { return "pause(" + rendezvous_name(tag) + ", " + pause_bound + ")"; }

// Adds `items` to the run's fault spec (replacing items of the run's spec that name the same
// points). False when fault points are compiled out: the race is then left to chance.
bool force(context& ctx, const std::vector<std::string>& items) {
  if (!faults::compiled_in()) {
    ctx.note("fault points compiled out: the interleaving is not forced");
    return false;
  }
  std::string extra;
  for (const auto& i : items) extra += (extra.empty() ? "" : ";") + i;
  auto merged = faults::merge_specs(faults::current_spec(), extra);
  ctx.require(merged.has_value(), "forcing-spec-valid", merged ? std::string() : merged.error().to_string());
  auto st = faults::configure(*merged, faults::current_seed());
  ctx.require(st.is_ok(), "forcing-spec-valid", st.to_string());
  ctx.note("forcing: " + extra);
  return true;
}

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds bound = wait_bound) {
  const auto deadline = clock_type::now() + bound;
  while (!pred()) {
    if (clock_type::now() >= deadline) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

// One submitted save and what the client expects of it.
struct submitted {
  core::result<reg::operation> op = core::status(errc::internal, "not submitted");
  std::uint64_t key = 0;
  std::uint64_t expected = 0;
};

// The registry under test, its buffers' witness, and the client's view of what it wrote.
class rig {
 public:
  explicit rig(context& ctx) : ctx_(ctx), dev_(select(ctx)), upstream_(dev_), tracked_(upstream_, "registry scenario buffers") {
    if (dev_.kind() == device::backend_kind::sim) {
      device::sim_set_strict(true);
      ctx.note("sim in strict mode: released device pages are unmapped");
    }
    auto n = dev_.device_count();
    ctx.require(n.has_value(), "device-available", n ? std::string() : n.error().to_string());
    for (int d = 0; d < std::min(*n, 2); ++d) {
      devices_.push_back(d);
      ctx.require(dev_.set_device(d).is_ok(), "device-selected");
      auto s = dev_.create_stream();
      ctx.require(s.has_value(), "stream-created", s ? std::string() : s.error().to_string());
      streams_.push_back(*s);
    }
    (void)dev_.set_device(0);
    reg::options o;
    o.backend = &dev_;
    o.resource = &tracked_;
    o.join_timeout = 5000ms;
    registry_ = std::make_unique<reg::instance_registry>(o);
  }
  ~rig() {
    registry_.reset();
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      (void)dev_.set_device(devices_[i]);
      (void)dev_.destroy_stream(streams_[i]);
    }
    (void)dev_.set_device(0);
  }
  rig(const rig&) = delete;
  rig& operator=(const rig&) = delete;

  reg::instance_registry& registry() { return *registry_; }
  alloc::tracking_adaptor& tracked() { return tracked_; }
  [[nodiscard]] std::size_t buffers_per_instance() const { return devices_.size(); }

  // Registers `id` with one buffer per device; does not touch the buffers.
  reg::registration add(const std::string& id) {
    reg::instance_config c;
    c.devices = devices_;
    for (int d : devices_) c.buffers.push_back({d, buffer_bytes});
    auto r = registry_->register_instance(id, c);
    ctx_.require(r.has_value(), "instance-registered", r ? std::string() : r.error().to_string());
    return *r;
  }

  // The client writes its seeded bytes into every buffer of `r` (through a stream, as a kernel
  // would) and remembers them. Returns false when a handle no longer resolves.
  bool fill(const std::string& id, const reg::registration& r) {
    for (const auto& h : r.buffers) {
      auto b = registry_->buffer(id, h);
      if (!b) return false;
      auto& bytes = written_[{h.generation, h.index}];
      bytes.resize(b->bytes);
      std::uint64_t x = ctx_.random().next() | 1;
      for (auto& byte : bytes) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        byte = static_cast<std::byte>(x >> 32);
      }
      const device::stream s = stream_of(b->device);
      ctx_.require(dev_.copy_async(b->ptr, bytes.data(), bytes.size(), s).is_ok(), "buffer-filled");
      ctx_.require(dev_.synchronize_stream(s).is_ok(), "buffer-filled");
    }
    return true;
  }

  // Chunk `chunk` of buffer `index` of `r` saved under `key`, with the client's checksum.
  reg::save_request chunk(const reg::registration& r, std::size_t index, std::size_t chunk_index, std::uint64_t key) {
    const reg::buffer_handle h = r.buffers[index % r.buffers.size()];
    const std::size_t offset = chunk_index % chunks * chunk_bytes;
    const auto& bytes = written_.at({h.generation, h.index});
    return {.buffer = h, .offset = offset, .bytes = chunk_bytes, .key = key,
            .checksum = reg::checksum(bytes.data() + offset, chunk_bytes)};
  }

  submitted save(const std::string& id, const reg::save_request& req) {
    return {registry_->save(id, req), req.key, *req.checksum};
  }

  // Every save completed with the client's bytes, or failed with a teardown error (refused,
  // timeout) or, where `injected_ok`, an injected worker error.
  void check_saves(const std::vector<submitted>& saves, bool injected_ok = false) {
    std::size_t done = 0, refused = 0, failed = 0;
    for (const auto& s : saves) {
      if (!s.op) {
        // Refused while the instance drains, or not found once unregister has removed it (a saver
        // that a loaded machine lets in only after the teardown finished: seen at --jobs 2 here).
        if (ctx_.check(s.op.code() == errc::refused || s.op.code() == errc::not_found,
                       "racing-save-completes-or-fails-with-teardown-error",
                       "submit of block " + std::to_string(s.key) + ": " + s.op.error().to_string())) {
          ++refused;
        }
        continue;
      }
      auto st = s.op->wait_for(wait_bound);
      if (!ctx_.check(st.has_value(), "racing-save-completes-or-fails-with-teardown-error",
                      "save of block " + std::to_string(s.key) + " never completed")) {
        continue;
      }
      if (st->is_ok()) {
        auto b = registry_->block(s.key);
        if (ctx_.check(b.has_value() && b->checksum == s.expected, "no-checksum-mismatch",
                       "block " + std::to_string(s.key) + " is not what the client wrote")) {
          ++done;
        }
        continue;
      }
      if (st->code() == errc::corrupt) {
        ctx_.check(false, "no-checksum-mismatch", st->to_string());
        continue;
      }
      const bool teardown = st->code() == errc::timeout || (injected_ok && st->injected());
      if (ctx_.check(teardown, "racing-save-completes-or-fails-with-teardown-error", st->to_string())) ++failed;
    }
    ctx_.note(std::to_string(saves.size()) + " saves: " + std::to_string(done) + " completed, " +
              std::to_string(refused) + " refused, " + std::to_string(failed) + " failed by the teardown");
  }

  // Every task of `saves` is done (call right after an unregister returned).
  void check_all_done(const std::vector<submitted>& saves, std::string_view when) {
    std::size_t pending = 0;
    for (const auto& s : saves) pending += s.op && !s.op->ready();
    ctx_.check(pending == 0, "no-task-after-unregister",
               std::to_string(pending) + " task(s) still pending " + std::string(when));
  }

  // Device buffers, the registry's live count and the leases equal what live instances hold.
  void check_leaks(std::size_t live_buffers, std::uint64_t live_leases) {
    const auto s = registry_->stats();
    ctx_.check(tracked_.outstanding_count() == live_buffers, "nothing-leaked",
               std::to_string(tracked_.outstanding_count()) + " device buffer(s) allocated, " +
                   std::to_string(live_buffers) + " held by live instances");
    ctx_.check(s.buffers_live == live_buffers && s.buffers_leaked == 0, "nothing-leaked",
               "registry counts " + std::to_string(s.buffers_live) + " live and " + std::to_string(s.buffers_leaked) +
                   " leaked buffer(s), expected " + std::to_string(live_buffers) + " live");
    ctx_.check(s.leases_outstanding == live_leases, "nothing-leaked",
               std::to_string(s.leases_outstanding) + " lease(s) outstanding, " + std::to_string(live_leases) +
                   " held by live instances");
  }

 private:
  static device::backend& select(context& ctx) {
    auto b = device::select_backend();
    ctx.require(b.has_value(), "backend-selected", b ? std::string() : b.error().to_string());
    return **b;
  }
  device::stream stream_of(int dev) const {
    const auto it = std::find(devices_.begin(), devices_.end(), dev);
    return streams_[static_cast<std::size_t>(it - devices_.begin())];
  }

  context& ctx_;
  device::backend& dev_;
  alloc::device_resource upstream_;
  alloc::tracking_adaptor tracked_;
  std::unique_ptr<reg::instance_registry> registry_;
  std::vector<int> devices_;
  std::vector<device::stream> streams_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<std::byte>> written_;
};

// --- registry/unregister-while-saving -----------------------------------------------------------
// Arrange: one instance, a buffer per device filled by the client. Inject: the first save task a
//   worker picks up pauses until unregister has marked the instance draining, and every later
//   task waits 2 ms before it copies (registry/worker/task=1*pause->delay(2ms),
//   registry/unregister/after-mark=1*pause): saves are queued behind a held one at the moment
//   teardown begins, and stay queued while it goes on. Act: 16 threads submit a save each at once:
//   8 right away, 8 as soon as the instance is draining; unregister starts once the first 8 are
//   in.
// Check: every save completed with the client's bytes or was refused (the late ones are); none is
//   pending when unregister returns; the result is clean (drained, removed); the instance is gone;
//   nothing leaked.
// Bug point bug/registry/release-before-drain: the buffers are freed right after the mark and the
//   queued saves copy from them: SIGSEGV on the sim (unmapped pages) every run; on CUDA a failed
//   copy (a worker error on a racing save). The release happens after the rendezvous, so the crash
//   always comes after both parties left it (nothing is left in /dev/shm).
void unregister_while_saving(context& ctx) {
  rig g(ctx);
  const auto r = g.add("kv-0");
  g.fill("kv-0", r);
  force(ctx, {"registry/worker/task=1*" + pause_on("ws") + "->delay(2ms)",
              "registry/unregister/after-mark=1*" + pause_on("ws")});

  constexpr int savers = 16;
  std::vector<submitted> saves(savers);
  std::atomic<bool> go{false};
  std::atomic<int> early{0};
  auto draining = [&] {
    auto f = g.registry().find("kv-0");
    return !f || f->state != reg::instance_state::open;
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < savers; ++i) {
    auto req = g.chunk(r, static_cast<std::size_t>(i), static_cast<std::size_t>(i) / r.buffers.size(),
                       static_cast<std::uint64_t>(i));
    threads.emplace_back([&, i, req] {
      while (!go.load()) std::this_thread::yield();
      if (i % 2 == 1) (void)wait_until(draining);
      saves[i] = g.save("kv-0", req);
      if (i % 2 == 0) ++early;
    });
  }
  go = true;
  // The early half is in (queued behind the held task) before teardown begins.
  ctx.require(wait_until([&] { return early.load() == savers / 2; }), "early-saves-submitted");
  const reg::unregister_result u = g.registry().unregister_instance("kv-0");
  g.check_all_done(saves, "when unregister returned");
  for (auto& t : threads) t.join();

  ctx.check(u.status, "unregister-clean");
  ctx.check(u.owner && u.drained && u.removed, "unregister-clean", "owner/drained/removed not all set");
  g.check_saves(saves);
  ctx.check(g.registry().find("kv-0").code() == errc::not_found, "instance-removed");
  g.check_leaks(0, 0);
}

// --- registry/reregister-same-id ----------------------------------------------------------------
// Arrange: instance kv-0 (generation G1) holds a lease on a block it saved and has 8 saves queued.
// Inject: unregister pauses before its join until the same id has been registered again
//   (registry/unregister/joining=1*pause, registry/register/after-insert=1*pause), and pauses
//   after its join until the new registration (G2) holds a lease of its own
//   (registry/unregister/after-join=1*pause, met by the scenario). Act: unregister kv-0 on one
//   thread; register kv-0 again once the first is draining.
// Check: the old teardown succeeds and says the id was taken over (replaced); kv-0 is G2, open,
//   with every buffer live and its lease; the device holds exactly G2's buffers; G2 saves and
//   loads real bytes; the racing G1 saves completed or were refused; after G2 is unregistered too,
//   nothing leaked.
// Bug point bug/registry/cleanup-by-id: the id is removed before the join and the teardown
//   releases what the id holds when it cleans up: G2's buffers and lease are released, its entry
//   removed, and G1's buffers leak: fail (newer-generation-untouched, nothing-leaked), every run.
void reregister_same_id(context& ctx) {
  rig g(ctx);
  const auto old = g.add("kv-0");
  g.fill("kv-0", old);
  auto first = g.save("kv-0", g.chunk(old, 0, 0, 1));
  ctx.require(first.op && first.op->wait().is_ok(), "setup-save");
  ctx.require(g.registry().acquire_lease("kv-0", 1).is_ok(), "setup-lease");
  std::vector<submitted> racing;
  for (std::uint64_t k = 0; k < 8; ++k) racing.push_back(g.save("kv-0", g.chunk(old, k, k, 10 + k)));

  const bool forced = force(ctx, {"registry/unregister/joining=1*" + pause_on("rr"),
                                  "registry/register/after-insert=1*" + pause_on("rr"),
                                  "registry/unregister/after-join=1*" + pause_on("rr-lease")});
  reg::unregister_result u;
  std::thread unregistering([&] { u = g.registry().unregister_instance("kv-0"); });
  ctx.require(wait_until([&] {
                auto f = g.registry().find("kv-0");
                return !f || f->state != reg::instance_state::open;
              }),
              "first-teardown-started");
  const auto fresh = g.add("kv-0");
  const bool leased = g.registry().acquire_lease("kv-0", 1).is_ok();
  if (forced) (void)faults::rendezvous(rendezvous_name("rr-lease"), wait_bound);
  unregistering.join();

  ctx.check(fresh.generation > old.generation, "generations-increase");
  ctx.check(leased, "newer-generation-untouched", "the new registration could not lease block 1");
  ctx.check(u.status, "old-teardown-clean");
  ctx.check(u.replaced, "old-teardown-left-the-newer-generation", "the result does not say the id was taken over");
  g.check_saves(racing);
  auto now = g.registry().find("kv-0");
  bool intact = ctx.check(now.has_value(), "newer-generation-untouched", "kv-0 is no longer registered");
  if (intact) {
    intact &= ctx.check(now->generation == fresh.generation && now->state == reg::instance_state::open,
                        "newer-generation-untouched",
                        "kv-0 is generation " + std::to_string(now->generation) + " (" +
                            std::string(reg::to_string(now->state)) + "), registered as " +
                            std::to_string(fresh.generation));
    intact &= ctx.check(now->buffers_live == fresh.buffers.size() && now->leases == 1, "newer-generation-untouched",
                        std::to_string(now->buffers_live) + " buffer(s) live and " + std::to_string(now->leases) +
                            " lease(s) held, expected " + std::to_string(fresh.buffers.size()) + " and 1");
  }
  ctx.check(g.tracked().outstanding_count() == fresh.buffers.size(), "nothing-leaked",
            std::to_string(g.tracked().outstanding_count()) + " device buffer(s) allocated while only generation " +
                std::to_string(fresh.generation) + " (" + std::to_string(fresh.buffers.size()) + " buffers) lives");
  if (intact && g.fill("kv-0", fresh)) {
    // The new generation works: a save and a load of real bytes.
    auto s = g.save("kv-0", g.chunk(fresh, 1, 3, 100));
    ctx.check(s.op && s.op->wait().is_ok(), "newer-generation-usable",
              s.op ? s.op->wait().to_string() : s.op.error().to_string());
    auto l = g.registry().load("kv-0", {.buffer = fresh.buffers[0], .offset = 0, .key = 100, .checksum = s.expected});
    ctx.check(l && l->wait().is_ok(), "newer-generation-usable", l ? l->wait().to_string() : l.error().to_string());
    ctx.check(g.registry().release_lease("kv-0", 1), "newer-generation-usable");
  }
  (void)g.registry().unregister_instance("kv-0");
  g.check_leaks(0, 0);
}

// --- registry/worker-error-on-shutdown ----------------------------------------------------------
// Arrange: instance kv-0 holds a lease on a block it saved. Inject: the first save task pauses
//   until unregister has marked the instance, and every task after it fails as the worker's error
//   (registry/worker/task=1*pause->fail(EIO), registry/unregister/after-mark=1*pause): the worker
//   fails while the instance shuts down. Act: queue 8 saves on one worker, unregister.
// Check: the worker error is in the result (injected) and in its status; the cleanup completed
//   anyway: drained, every buffer released, the lease released, the instance removed; the saves
//   completed or failed with the injected error; nothing leaked.
// Bug point bug/registry/early-return-on-worker-error: unregister returns the worker's error at
//   once, after the instance left the map: its buffers and lease leak: fail (cleanup-completed,
//   nothing-leaked), every run.
void worker_error_on_shutdown(context& ctx) {
  rig g(ctx);
  const auto r = g.add("kv-0");
  g.fill("kv-0", r);
  auto first = g.save("kv-0", g.chunk(r, 0, 0, 1));
  ctx.require(first.op && first.op->wait().is_ok(), "setup-save");
  ctx.require(g.registry().acquire_lease("kv-0", 1).is_ok(), "setup-lease");
  force(ctx, {"registry/worker/task=1*" + pause_on("we") + "->fail(EIO)",
              "registry/unregister/after-mark=1*" + pause_on("we")});
  std::vector<submitted> saves;
  // All on buffer 0: one worker, so its first task is the one that pauses.
  for (std::uint64_t k = 0; k < 8; ++k) saves.push_back(g.save("kv-0", g.chunk(r, 0, k, 10 + k)));
  const reg::unregister_result u = g.registry().unregister_instance("kv-0");
  g.check_all_done(saves, "when unregister returned");

  ctx.check(!u.worker_error.is_ok() && u.worker_error.injected(), "worker-error-reported",
            "result's worker error: " + u.worker_error.to_string());
  ctx.check(!u.status.is_ok() && u.status.code() == u.worker_error.code(), "worker-error-reported",
            "result status: " + u.status.to_string());
  ctx.check(u.drained && u.removed, "cleanup-completed", "not drained and removed");
  ctx.check(u.buffers_released == g.buffers_per_instance(), "cleanup-completed",
            std::to_string(u.buffers_released) + " of " + std::to_string(g.buffers_per_instance()) + " buffers released");
  ctx.check(u.leases_released == 1, "cleanup-completed", std::to_string(u.leases_released) + " of 1 lease released");
  ctx.check(g.registry().find("kv-0").code() == errc::not_found, "instance-removed");
  g.check_saves(saves, /*injected_ok=*/true);
  g.check_leaks(0, 0);
}

// --- registry/concurrent-unregister -------------------------------------------------------------
// Arrange: instance kv-0 with 16 saves queued. Inject: the first unregister pauses after its join
//   (registry/unregister/after-join=1*pause), and the scenario releases it only once two more
//   unregisters of kv-0 are waiting for it (or have returned). Act: unregister kv-0 from three
//   threads: the first, then two while it tears down.
// Check: exactly one owner; each call, the moment it returns, finds kv-0 gone, its buffers freed
//   and no task pending; all three report the same generation and a clean result; the saves
//   completed; nothing leaked.
// Bug point bug/registry/unsynchronized-concurrent-unregister: the later calls return at once while
//   the owner still holds kv-0: fail (unregister-returned-before-teardown), every run.
void concurrent_unregister(context& ctx) {
  rig g(ctx);
  const auto r = g.add("kv-0");
  g.fill("kv-0", r);
  std::vector<submitted> saves;
  for (std::uint64_t k = 0; k < 16; ++k) saves.push_back(g.save("kv-0", g.chunk(r, k, k, k)));
  const bool forced = force(ctx, {"registry/unregister/after-join=1*" + pause_on("cu")});

  std::vector<reg::unregister_result> results(3);
  std::atomic<int> returned{0};
  auto unregister = [&](int i) {
    results[i] = g.registry().unregister_instance("kv-0");
    // What the caller may rely on the moment its unregister returns.
    auto still = g.registry().find("kv-0");
    ctx.check(!still || still->generation != r.generation, "unregister-returned-before-teardown",
              "unregister " + std::to_string(i) + " returned while generation " + std::to_string(r.generation) +
                  " was still registered (" + (still ? std::string(reg::to_string(still->state)) : "") + ")");
    ctx.check(g.tracked().outstanding_count() == 0, "unregister-returned-before-teardown",
              "unregister " + std::to_string(i) + " returned with " + std::to_string(g.tracked().outstanding_count()) +
                  " buffer(s) still allocated");
    g.check_all_done(saves, "when unregister " + std::to_string(i) + " returned");
    ++returned;
  };
  std::vector<std::thread> threads;
  threads.emplace_back(unregister, 0);
  ctx.require(wait_until([&] {
                auto f = g.registry().find("kv-0");
                return !f || f->state != reg::instance_state::open;
              }),
              "first-teardown-started");
  threads.emplace_back(unregister, 1);
  threads.emplace_back(unregister, 2);
  if (forced) {
    (void)wait_until([&] {
      auto f = g.registry().find("kv-0");
      return returned.load() == 2 || (f && f->unregister_waiters == 2);
    });
    (void)faults::rendezvous(rendezvous_name("cu"), wait_bound);
  }
  for (auto& t : threads) t.join();

  int owners = 0;
  for (const auto& u : results) {
    owners += u.owner;
    ctx.check(u.status, "unregister-clean");
    ctx.check(u.generation == r.generation, "one-teardown-shared",
              "a result names generation " + std::to_string(u.generation) + ", not " + std::to_string(r.generation));
    ctx.check(u.drained && u.buffers_released == results[0].buffers_released, "one-teardown-shared",
              "the results disagree on what the teardown did");
  }
  ctx.check(owners == 1, "one-teardown-shared", std::to_string(owners) + " owners");
  g.check_saves(saves);
  g.check_leaks(0, 0);
}

// --- registry/unregister-all-under-load ---------------------------------------------------------
// Arrange: three instances, each holding a lease, each driven by a client thread that keeps
//   saving chunks and loading its first block back in place. Inject: the first task any worker
//   picks up pauses until unregister_all has marked the instances and begun tearing down the
//   first, every later task waits 1 ms before it copies (registry/worker/task=1*pause->delay(1ms),
//   registry/unregister/after-mark=1*pause), and the first worker to reach its drain barrier
//   fails there (registry/worker/drain=1*fail(EIO)). Act: unregister_all once every client has
//   work accepted.
// Check: the registry is empty; one result per instance, all drained; exactly one carries the
//   injected worker error, the others are clean; every save or load completed with the client's
//   bytes or was refused; nothing leaked.
// Bug points: bug/registry/release-before-drain (every instance's buffers freed as it is marked;
//   the held task copies from them: SIGSEGV on the sim, every run);
//   bug/registry/early-return-on-worker-error (the instance whose worker failed leaks its buffers
//   and lease: fail, every run).
void unregister_all_under_load(context& ctx) {
  rig g(ctx);
  constexpr int instances = 3;
  std::vector<reg::registration> regs;
  std::vector<std::uint64_t> first_sums;
  for (int i = 0; i < instances; ++i) {
    const std::string id = "kv-" + std::to_string(i);
    regs.push_back(g.add(id));
    g.fill(id, regs.back());
    auto s = g.save(id, g.chunk(regs.back(), 0, 0, static_cast<std::uint64_t>(i) << 32));
    ctx.require(s.op && s.op->wait().is_ok(), "setup-save");
    ctx.require(g.registry().acquire_lease(id, static_cast<std::uint64_t>(i) << 32).is_ok(), "setup-lease");
    first_sums.push_back(s.expected);
  }
  force(ctx, {"registry/worker/task=1*" + pause_on("ua") + "->delay(1ms)",
              "registry/unregister/after-mark=1*" + pause_on("ua"), "registry/worker/drain=1*fail(EIO)"});

  std::vector<std::vector<submitted>> saves(instances);
  std::vector<std::vector<submitted>> loads(instances);
  std::vector<std::atomic<int>> accepted(instances);
  std::vector<std::thread> clients;
  for (int i = 0; i < instances; ++i) {
    clients.emplace_back([&, i] {
      const std::string id = "kv-" + std::to_string(i);
      const std::uint64_t base = static_cast<std::uint64_t>(i) << 32;
      for (std::uint64_t k = 1;; ++k) {
        submitted s;
        if (k % 4 == 0) {
          // Block 0 back where it came from (the same bytes, so later saves still match).
          s = {g.registry().load(id, {.buffer = regs[i].buffers[0], .offset = 0, .key = base,
                                      .checksum = first_sums[i]}),
               base, first_sums[i]};
        } else {
          s = g.save(id, g.chunk(regs[i], k, k, base + k));
        }
        if (!s.op) {
          ctx.check(s.op.code() == errc::refused || s.op.code() == errc::not_found,
                    "racing-save-completes-or-fails-with-teardown-error", s.op.error().to_string());
          return;
        }
        (k % 4 == 0 ? loads : saves)[i].push_back(s);
        ++accepted[i];
        // Keep at most 16 in flight, as a client with a bounded queue would.
        auto& mine = saves[i];
        if (mine.size() > 16) (void)mine[mine.size() - 16].op->wait_for(wait_bound);
      }
    });
  }
  ctx.require(wait_until([&] {
                return std::all_of(accepted.begin(), accepted.end(), [](const auto& a) { return a.load() >= 4; });
              }),
              "clients-have-work-accepted");
  const reg::unregister_all_result all = g.registry().unregister_all();
  for (auto& t : clients) t.join();

  ctx.check(all.remaining == 0 && g.registry().instances().empty(), "registry-empty",
            std::to_string(g.registry().instances().size()) + " instance(s) left after unregister_all");
  ctx.check(all.results.size() == instances, "every-instance-torn-down",
            std::to_string(all.results.size()) + " results for " + std::to_string(instances) + " instances");
  int worker_errors = 0;
  for (const auto& u : all.results) {
    ctx.check(u.drained && u.removed, "every-instance-torn-down", u.id + " not drained and removed");
    if (!u.worker_error.is_ok()) {
      ++worker_errors;
      ctx.check(u.worker_error.injected(), "worker-error-reported", u.worker_error.to_string());
      ctx.check(u.buffers_released == g.buffers_per_instance() && u.leases_released == 1, "cleanup-completed",
                u.id + ": " + std::to_string(u.buffers_released) + " buffer(s), " + std::to_string(u.leases_released) +
                    " lease(s) released after its worker failed");
    } else {
      ctx.check(u.status, "unregister-clean");
    }
  }
  ctx.check(worker_errors == 1, "worker-error-reported",
            std::to_string(worker_errors) + " results carry a worker error, 1 was injected");
  ctx.check(!all.status.is_ok(), "worker-error-reported", "unregister_all's status hides the worker error");
  for (int i = 0; i < instances; ++i) {
    g.check_saves(saves[i]);
    for (const auto& l : loads[i]) {
      auto st = l.op->wait_for(wait_bound);
      ctx.check(st && (st->is_ok() || st->code() == errc::timeout), "racing-load-completes-or-fails-with-teardown-error",
                st ? st->to_string() : "load never completed");
    }
  }
  g.check_leaks(0, 0);
}

}  // namespace

void register_registry_scenarios(registry& r) {
  // The soak's fault space (harness/campaign/fault_space.h): workers, drains, registration and each step
  // of an unregister slowed at random (items a scenario forces replace these for that point).
  const std::vector<std::string> fault_space = {
      "registry/worker/task=1..30%delay(10us..2ms)",
      "registry/worker/drain=1..50%delay(10us..5ms)",
      "registry/register/after-insert=1..50%delay(10us..5ms)",
      "registry/unregister/after-mark=1..50%delay(10us..5ms)",
      "registry/unregister/after-remove=1..50%delay(10us..5ms)",
      "sim/stream/op=1..20%delay(1us..1ms)"};
  const auto add = family_adder(r, fault_space);
  add({.name = "registry/unregister-while-saving",
       .description = "16 concurrent saves race an unregister of their instance (PegaFlow #329)",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = unregister_while_saving,
       .bug_points = {{.point = "bug/registry/release-before-drain",
                       .faults = "bug/registry/release-before-drain=print",
                       .detect_rate = 0.95,
                       .expect = "crash during the work (SIGSEGV: a queued save copies from unmapped memory)"}}});
  add({.name = "registry/reregister-same-id",
       .description = "the same id registers again while the old instance's teardown joins (PegaFlow #329 review)",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = reregister_same_id,
       .bug_points = {{.point = "bug/registry/cleanup-by-id",
                       .faults = "bug/registry/cleanup-by-id=print",
                       .detect_rate = 0.95,
                       .expect = "fail: the newer generation's buffers and lease released, the old one's leaked"}}});
  add({.name = "registry/worker-error-on-shutdown",
       .description = "a worker fails while its instance is unregistered (PegaFlow #329 review)",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = worker_error_on_shutdown,
       .bug_points = {{.point = "bug/registry/early-return-on-worker-error",
                       .faults = "bug/registry/early-return-on-worker-error=print",
                       .detect_rate = 0.95,
                       .expect = "fail: buffers and lease of the removed instance leaked"}}});
  add({.name = "registry/concurrent-unregister",
       .description = "three unregisters of one instance at once: one owner, the others wait for it",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = concurrent_unregister,
       .bug_points = {{.point = "bug/registry/unsynchronized-concurrent-unregister",
                       .faults = "bug/registry/unsynchronized-concurrent-unregister=print",
                       .detect_rate = 0.95,
                       .expect = "fail: a second unregister returns while the first still tears down"}}});
  add({.name = "registry/unregister-all-under-load",
       .description = "unregister_all of three instances under save/load load, one worker failing at shutdown",
       .timeout_ms = 20000,
       .cpu_percent = 25,
       .run = unregister_all_under_load,
       .bug_points = {{.point = "bug/registry/release-before-drain",
                       .faults = "bug/registry/release-before-drain=print",
                       .detect_rate = 0.95,
                       .expect = "crash during the work (SIGSEGV: a held task copies from unmapped memory)"},
                      {.point = "bug/registry/early-return-on-worker-error",
                       .faults = "bug/registry/early-return-on-worker-error=print",
                       .detect_rate = 0.95,
                       .expect = "fail: the failed instance's buffers and lease leaked"}}});
}

}  // namespace faultline::scenarios
