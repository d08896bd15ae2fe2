#include "core/device/sim/detail/context.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "core/device/sim/sim_backend.h"
#include "core/points/point.h"

namespace faultline::core::device::detail {

namespace {

// A worker that kills its own context (a host function or a fault hook calling reset_context)
// cannot join itself: it detaches, and must not touch its slot once the op returns.
thread_local stream_slot* tl_worker = nullptr;
thread_local bool tl_orphaned = false;

std::size_t page_bytes() noexcept {
  static const auto bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

std::size_t align_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
std::size_t align_down(std::size_t n, std::size_t a) noexcept { return n / a * a; }

void put(const char* text) noexcept {
  const std::size_t n = std::strlen(text);
  if (write(STDERR_FILENO, text, n) < 0) {
  }
}

struct region_layout {
  std::uint32_t granules = 0;
  std::uint32_t record_capacity = 0;
  std::size_t streams = 0;
  std::size_t events = 0;
  std::size_t records = 0;
  std::size_t owner = 0;
  std::size_t total = 0;
};

region_layout layout_for(std::size_t arena_bytes) noexcept {
  region_layout l;
  l.granules = static_cast<std::uint32_t>(arena_bytes / granule_bytes);
  l.record_capacity = std::min<std::uint32_t>(l.granules + 1, max_block_records);
  l.streams = align_up(sizeof(context), alignof(stream_slot));
  l.events = align_up(l.streams + max_streams * sizeof(stream_slot), 64);
  l.records = align_up(l.events + max_events * sizeof(event_slot), 64);
  l.owner = align_up(l.records + std::size_t{l.record_capacity} * sizeof(block_record), 64);
  l.total = align_up(l.owner + std::size_t{l.granules} * sizeof(std::uint32_t), page_bytes());
  return l;
}

// --- device memory ---------------------------------------------------------------------------

bool commit_through(device_state& d, std::size_t end) noexcept {
  if (end <= d.committed_bytes) return true;
  const std::size_t target = std::min(align_up(end, commit_step_bytes), d.arena_bytes);
  if (mprotect(d.arena + d.committed_bytes, target - d.committed_bytes, PROT_READ | PROT_WRITE) != 0) {
    return false;
  }
  d.committed_bytes = target;
  return true;
}

// Strict mode: whole free pages around the freed block become PROT_NONE (and are given back);
// bytes of the block on pages it shares with other blocks are poisoned instead.
void protect_freed(device_state& d, std::uint32_t start, std::uint32_t size,
                   block_allocator::span merged) noexcept {
  const std::size_t page = page_bytes();
  const std::size_t fs = std::size_t{start} * granule_bytes;
  const std::size_t fe = fs + std::size_t{size} * granule_bytes;
  const std::size_t ms = std::size_t{merged.start} * granule_bytes;
  const std::size_t me = std::min((std::size_t{merged.start} + merged.size) * granule_bytes, d.committed_bytes);
  // Pages outside the freed block's own pages were protected when their block was freed.
  const std::size_t pl = std::max(align_up(ms, page), align_down(fs, page));
  const std::size_t ph = std::min(align_down(me, page), align_up(fe, page));
  if (pl >= ph) {
    std::memset(d.arena + fs, sim_poison_byte, fe - fs);
    return;
  }
  if (fs < pl) std::memset(d.arena + fs, sim_poison_byte, std::min(fe, pl) - fs);
  if (fe > ph) {
    const std::size_t from = std::max(fs, ph);
    std::memset(d.arena + from, sim_poison_byte, fe - from);
  }
  // Flag first: a failed mprotect may still have protected part of the range.
  d.pages_protected = true;
  if (mprotect(d.arena + pl, ph - pl, PROT_NONE) == 0) madvise(d.arena + pl, ph - pl, MADV_DONTNEED);
}

// Once some pages are protected, a new block's pages must be made accessible again; in strict
// mode the free bytes that share its last page are poisoned (they may read as zero pages).
bool make_accessible(context& c, std::uint32_t start) noexcept {
  device_state& d = *c.device;
  const std::size_t page = page_bytes();
  const std::size_t bs = std::size_t{start} * granule_bytes;
  const std::size_t be = bs + std::size_t{c.blocks.size_at(start)} * granule_bytes;
  const std::size_t lo = align_down(bs, page);
  const std::size_t hi = align_up(be, page);
  if (mprotect(d.arena + lo, hi - lo, PROT_READ | PROT_WRITE) != 0) return false;
  if (shared().strict.load(std::memory_order_relaxed)) {
    const block_allocator::span next = c.blocks.free_after(start);
    const std::size_t ne = std::min(hi, (std::size_t{next.start} + next.size) * granule_bytes);
    if (next.size != 0 && ne > be) std::memset(d.arena + be, sim_poison_byte, ne - be);
  }
  return true;
}

// Caller holds c.alloc_mutex.
void release_block(context& c, std::uint32_t start) noexcept {
  const std::uint32_t size = c.blocks.size_at(start);
  const block_allocator::span merged = c.blocks.release(start);
  c.device->deallocations.fetch_add(1, std::memory_order_relaxed);
  if (shared().strict.load(std::memory_order_relaxed)) protect_freed(*c.device, start, size, merged);
}

// --- workers ---------------------------------------------------------------------------------

void run_wait(stream_slot& self, stream_slot& target, std::uint64_t ticket) noexcept {
  if (target.completed.load(std::memory_order_acquire) >= ticket) return;
  context& tc = *target.ctx;
  std::unique_lock lk(target.mutex);
  tc.waiters.fetch_add(1);
  // Published before the predicate reads our own context's stopping flag; signal_stop stores
  // that flag before reading waiting_on (both seq_cst), so one side always sees the other.
  self.waiting_on.store(&target);
  target.done_cv.wait(lk, [&] {
    return target.completed.load(std::memory_order_acquire) >= ticket || self.ctx->stopping.load() ||
           tc.stopping.load();
  });
  self.waiting_on.store(nullptr);
  tc.waiters.fetch_sub(1);
}

void run_op(stream_slot& s, const op& o) noexcept {
  device_state& dev = *s.ctx->device;
  const int code = FAULTLINE_POINT("sim/stream/op");
  if (tl_orphaned) return;
  if (code != 0) {
    dev.ops_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (o.kind) {
    case op_kind::wait:
      run_wait(s, *o.wait_on, o.ticket);
      break;
    case op_kind::free: {
      context& c = *s.ctx;
      std::lock_guard g(c.alloc_mutex);
      const auto start = static_cast<std::uint32_t>((static_cast<std::byte*>(o.dst) - dev.arena) / granule_bytes);
      if (c.blocks.state_at(start) == block_state::pending_free) release_block(c, start);
      break;
    }
    case op_kind::copy:
    case op_kind::fill:
    case op_kind::host_fn: {
      const std::uint64_t t0 = now_ns();
      if (o.kind == op_kind::copy) {
        std::memmove(o.dst, o.src, o.bytes);
      } else if (o.kind == op_kind::fill) {
        std::memset(o.dst, o.value, o.bytes);
      } else {
        o.fn(o.arg);
      }
      dev.busy_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
      break;
    }
  }
  dev.ops_executed.fetch_add(1, std::memory_order_relaxed);
}

void worker_main(stream_slot* s) noexcept {
  tl_worker = s;
  std::unique_lock lk(s->mutex);
  for (;;) {
    s->work_cv.wait(lk, [s] {
      return s->stop || s->completed.load(std::memory_order_relaxed) != s->enqueued.load(std::memory_order_relaxed);
    });
    if (s->stop) return;  // ops not yet started are abandoned
    const std::uint64_t ticket = s->completed.load(std::memory_order_relaxed);
    const op o = s->ring[ticket % ring_ops];
    lk.unlock();
    run_op(*s, o);
    if (tl_orphaned) return;  // our context is gone, slot included
    lk.lock();
    s->completed.store(ticket + 1, std::memory_order_release);
    s->done_cv.notify_all();
  }
}

}  // namespace

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void fatal(const char* what, int err) noexcept {
  put("faultline sim: ");
  put(what);
  if (err != 0) {
    char buf[128];
    put(": ");
    put(strerror_r(err, buf, sizeof buf));
  }
  put("\n");
  std::abort();
}

void reserve_none(void* addr, std::size_t bytes) noexcept {
  void* r = mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (r == MAP_FAILED) fatal("cannot re-reserve a context or arena range PROT_NONE", errno);
}

std::byte* reserve_fresh(std::size_t bytes) noexcept {
  void* r = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return r == MAP_FAILED ? nullptr : static_cast<std::byte*>(r);
}

status stopped_status() noexcept {
  if (shared().state.load() == runtime_state::torn_down) {
    return status(errc::runtime_unloading, "sim: the runtime was torn down while this call waited");
  }
  return status(errc::context_reset, "sim: the device context was reset while this call waited");
}

// --- context lifecycle -----------------------------------------------------------------------

result<context*> create_context(device_state& dev) noexcept {
  const region_layout l = layout_for(dev.arena_bytes);
  void* region = mmap(nullptr, l.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return status::from_errno(errno, "sim: map a device context");
  auto* base = static_cast<std::byte*>(region);
  auto* c = new (region) context();
  c->device = &dev;
  c->region_bytes = l.total;
  c->streams = reinterpret_cast<stream_slot*>(base + l.streams);
  c->events = reinterpret_cast<event_slot*>(base + l.events);
  c->blocks.init(reinterpret_cast<block_record*>(base + l.records), l.record_capacity,
                 reinterpret_cast<std::uint32_t*>(base + l.owner), l.granules);
  if (auto s = open_stream(*c); !s) {
    munmap(region, l.total);
    return s.error();
  }
  shared().contexts_created.fetch_add(1, std::memory_order_relaxed);
  return c;
}

void signal_stop(context& c) noexcept {
  c.stopping.store(true);
  const std::uint32_t high = c.stream_high.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < high; ++i) {
    stream_slot& s = c.streams[i];
    if (s.magic.load(std::memory_order_acquire) != stream_magic) continue;
    {
      std::lock_guard g(s.mutex);
      s.stop = true;
    }
    s.work_cv.notify_all();
    s.done_cv.notify_all();
    // A wait op blocks on another stream's condition variable: wake it there.
    if (stream_slot* t = s.waiting_on.load()) {
      std::lock_guard g(t->mutex);
      t->done_cv.notify_all();
    }
  }
}

void join_workers(context& c) noexcept {
  const std::uint32_t high = c.stream_high.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < high; ++i) {
    stream_slot& s = c.streams[i];
    std::lock_guard j(s.join_mutex);  // against a destroy_stream joining it now (close_stream)
    if (!s.worker.joinable()) continue;
    if (&s == tl_worker) {
      tl_orphaned = true;
      s.worker.detach();
    } else {
      s.worker.join();
    }
  }
}

void kill_context(context* c) noexcept {
  // Released waiters still hold or are about to take a stream mutex; the mapping goes only
  // after each has left, so a blocked call ends with an error rather than a fault.
  while (c->waiters.load() != 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const std::uint32_t high = c->stream_high.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < high; ++i) std::lock_guard g(c->streams[i].mutex);
  const std::size_t bytes = c->region_bytes;
  reserve_none(c, bytes);
}

// --- streams and events ----------------------------------------------------------------------

result<stream_slot*> open_stream(context& c) noexcept {
  std::lock_guard g(c.table_mutex);
  stream_slot* s = nullptr;
  if (c.stream_free != 0) {
    s = &c.streams[c.stream_free - 1];
    c.stream_free = s->next_free;
  } else {
    const std::uint32_t high = c.stream_high.load(std::memory_order_relaxed);
    if (high == max_streams) {
      return status(errc::out_of_memory, "sim: a context holds at most " + std::to_string(max_streams) + " streams");
    }
    s = new (&c.streams[high]) stream_slot();
    s->magic.store(free_magic, std::memory_order_relaxed);
    s->index = high;
    s->ctx = &c;
    c.stream_high.store(high + 1, std::memory_order_release);
  }
  s->stop = false;
  try {
    s->worker = std::thread(worker_main, s);
  } catch (...) {
    s->next_free = c.stream_free;
    c.stream_free = s->index + 1;
    return status(errc::internal, "sim: cannot start a stream worker thread");
  }
  s->magic.store(stream_magic, std::memory_order_release);
  shared().streams_created.fetch_add(1, std::memory_order_relaxed);
  return s;
}

status close_stream(stream_slot& s) noexcept {
  if (s.index == 0) return status(errc::invalid_argument, "sim: the default stream cannot be destroyed");
  if (&s == tl_worker) return status(errc::invalid_argument, "sim: a stream's own host function cannot destroy it");
  if (auto st = wait_ticket(s, s.enqueued.load(std::memory_order_acquire)); !st) return st;
  {
    std::lock_guard g(s.mutex);
    s.stop = true;
  }
  s.work_cv.notify_all();
  {
    // The context's teardown (join_workers) may be joining it at the same moment: joined twice,
    // a thread is an error (std::system_error) or a hang.
    std::lock_guard j(s.join_mutex);
    if (s.worker.joinable()) s.worker.join();
  }
  {
    // Ops queued by a racing producer after the drain never run; count them done so that a
    // worker reusing this slot does not replay them and events on them complete.
    std::lock_guard g(s.mutex);
    s.completed.store(s.enqueued.load(std::memory_order_relaxed), std::memory_order_release);
  }
  s.magic.store(free_magic, std::memory_order_release);
  context& c = *s.ctx;
  std::lock_guard g(c.table_mutex);
  s.next_free = c.stream_free;
  c.stream_free = s.index + 1;
  return {};
}

status enqueue(stream_slot& s, const op& o) noexcept {
  context& c = *s.ctx;
  std::unique_lock lk(s.mutex);
  auto room = [&] {
    return s.enqueued.load(std::memory_order_relaxed) - s.completed.load(std::memory_order_relaxed) < ring_ops;
  };
  if (!room()) {
    c.waiters.fetch_add(1);
    s.done_cv.wait(lk, [&] { return room() || s.stop || c.stopping.load(); });
    c.waiters.fetch_sub(1);
  }
  if (c.stopping.load()) return stopped_status();
  if (s.stop) return status(errc::invalid_argument, "sim: stream was destroyed");
  const std::uint64_t tail = s.enqueued.load(std::memory_order_relaxed);
  s.ring[tail % ring_ops] = o;
  s.enqueued.store(tail + 1, std::memory_order_release);
  lk.unlock();
  s.work_cv.notify_one();
  return {};
}

status wait_ticket(stream_slot& s, std::uint64_t ticket) noexcept {
  if (s.completed.load(std::memory_order_acquire) >= ticket) return {};
  context& c = *s.ctx;
  bool reached = false;
  {
    std::unique_lock lk(s.mutex);
    c.waiters.fetch_add(1);
    s.done_cv.wait(lk, [&] { return s.completed.load(std::memory_order_acquire) >= ticket || c.stopping.load(); });
    reached = s.completed.load(std::memory_order_acquire) >= ticket;
    c.waiters.fetch_sub(1);
  }
  return reached ? status{} : stopped_status();
}

status synchronize_context(context& c) noexcept {
  const std::uint32_t high = c.stream_high.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < high; ++i) {
    stream_slot& s = c.streams[i];
    if (s.magic.load(std::memory_order_acquire) != stream_magic) continue;
    if (auto st = wait_ticket(s, s.enqueued.load(std::memory_order_acquire)); !st) return st;
  }
  return {};
}

result<event_slot*> open_event(context& c) noexcept {
  std::lock_guard g(c.table_mutex);
  event_slot* e = nullptr;
  if (c.event_free != 0) {
    e = &c.events[c.event_free - 1];
    c.event_free = e->next_free;
    e->mark.store(0, std::memory_order_relaxed);
  } else {
    if (c.event_high == max_events) {
      return status(errc::out_of_memory, "sim: a context holds at most " + std::to_string(max_events) + " events");
    }
    e = new (&c.events[c.event_high]) event_slot();
    e->ctx = &c;
    ++c.event_high;
  }
  e->magic.store(event_magic, std::memory_order_release);
  return e;
}

void close_event(event_slot& e) noexcept {
  context& c = *e.ctx;
  std::lock_guard g(c.table_mutex);
  e.magic.store(free_magic, std::memory_order_release);
  e.next_free = c.event_free;
  c.event_free = static_cast<std::uint32_t>(&e - c.events) + 1;
}

// --- memory ----------------------------------------------------------------------------------

result<void*> allocate_bytes(context& c, std::size_t bytes) noexcept {
  device_state& d = *c.device;
  std::uint64_t in_use = 0;
  {
    std::lock_guard g(c.alloc_mutex);
    if (bytes <= d.arena_bytes) {
      const auto granules = static_cast<std::uint32_t>((bytes + granule_bytes - 1) / granule_bytes);
      const std::uint32_t start = c.blocks.allocate(granules);
      if (start != block_allocator::no_block) {
        const std::size_t end = (std::size_t{start} + c.blocks.size_at(start)) * granule_bytes;
        if (commit_through(d, end) && (!d.pages_protected || make_accessible(c, start))) {
          d.allocations.fetch_add(1, std::memory_order_relaxed);
          return static_cast<void*>(d.arena + std::size_t{start} * granule_bytes);
        }
        c.blocks.release(start);  // its pages could not be made usable: as good as no memory
      }
    }
    in_use = c.blocks.granules_in_use() * granule_bytes;
  }
  return status(errc::out_of_memory, "sim device " + std::to_string(d.index) + ": out of memory allocating " +
                                         std::to_string(bytes) + " bytes (" + std::to_string(d.arena_bytes - in_use) +
                                         " of " + std::to_string(d.arena_bytes) + " bytes free)");
}

result<std::uint32_t> block_of(context& c, const void* ptr, block_state expected) noexcept {
  const device_state& d = *c.device;
  const auto* p = static_cast<const std::byte*>(ptr);
  if (p < d.arena || p >= d.arena + d.arena_bytes) {
    return status(errc::invalid_argument, "sim: pointer is not memory of device " + std::to_string(d.index));
  }
  const auto offset = static_cast<std::size_t>(p - d.arena);
  const auto start = static_cast<std::uint32_t>(offset / granule_bytes);
  const block_state st = offset % granule_bytes == 0 ? c.blocks.state_at(start) : block_state::unused;
  if (st == expected) return start;
  if (st == block_state::pending_free) {
    return status(errc::invalid_argument, "sim: a stream-ordered free of this block is already queued");
  }
  return status(errc::invalid_argument,
                "sim: pointer is not a live allocation (freed already, never allocated, or freed by a context reset)");
}

status free_now(context& c, void* ptr) noexcept {
  std::lock_guard g(c.alloc_mutex);
  auto start = block_of(c, ptr, block_state::live);
  if (!start) return start.error();
  release_block(c, *start);
  return {};
}

status mark_free_pending(context& c, void* ptr) noexcept {
  std::lock_guard g(c.alloc_mutex);
  auto start = block_of(c, ptr, block_state::live);
  if (!start) return start.error();
  c.blocks.mark_pending(*start);
  return {};
}

void decommit_arena(device_state& dev) noexcept {
  if (dev.committed_bytes != 0) reserve_none(dev.arena, dev.committed_bytes);
  dev.committed_bytes = 0;
  dev.pages_protected = false;
}

}  // namespace faultline::core::device::detail
