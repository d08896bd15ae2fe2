#include "core/accounting/region.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <thread>

#include "core/accounting/detail/layout.h"
#include "core/accounting/detail/region_internal.h"
#include "core/process_identity.h"
#include "core/points/point.h"

namespace faultline::accounting {

namespace {

using detail::header;
using detail::slot;
using clock_type = std::chrono::steady_clock;
// Shared with region_file.cc and region_repair.cc (detail/region_internal.h).
using detail::check_options;
using detail::counter_load;
using detail::counter_store;
using detail::cpu_relax;
using detail::create_region_file;
using detail::open_error;
using detail::open_region;
using detail::seqlock_fence;
using detail::try_read_device;
using detail::try_read_slot;
using detail::validate_fd;
using detail::where;

static_assert(max_devices == detail::layout_max_devices);
static_assert(max_slots_limit == detail::layout_max_slots);

std::uint32_t part_index(kind k) noexcept {
  switch (k) {
    case kind::context: return detail::c_context;
    case kind::module: return detail::c_module;
    case kind::data: return detail::c_data;
  }
  return detail::c_data;
}

// --- seqlock: the write side (the read side is in detail/region_internal.h) ----------------------

// Waits (bounded) for a slot to be even and takes its write side. Returns the even value taken,
// or false when the bound passed. Async-signal-safe (atomics, sched_yield, clock_gettime).
bool acquire_slot_write(slot* s, clock_type::time_point deadline, std::uint64_t& taken) noexcept {
  for (std::uint32_t n = 0;; ++n) {
    std::uint64_t q = s->seq.load(std::memory_order_relaxed);
    if ((q & 1) == 0 && s->seq.compare_exchange_weak(q, q + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      // Orders the counter stores after the odd sequence is visible (Boehm's seqlock writer).
      seqlock_fence(std::memory_order_release);
      taken = q;
      return true;
    }
    if (n < 64) {
      cpu_relax();
    } else {
      if ((n & 63) == 0 && clock_type::now() >= deadline) return false;
      sched_yield();
    }
  }
}

// --- the process-wide table the exit cleanup walks ------------------------------------------------

enum registration_state : int { r_empty = 0, r_filling = 1, r_active = 2, r_cleaning = 3, r_released = 4, r_detaching = 5 };

struct registration {
  std::atomic<int> state{r_empty};
  header* h = nullptr;
  slot* s = nullptr;
  pid_t kernel_pid = 0;  // getpid() of the registering process: a forked child skips the entry
  pid_t owner_pid = 0;
  std::uint64_t start_time = 0;
  std::uint32_t devices = 0;
  // Writers of this process's slot take a turn here first, in arrival order. The slot's
  // sequence CAS alone is unfair: a thread that releases it takes it again before a waiter gets
  // a look in, so a writer preempted inside its updates, again and again, kept another thread of
  // the process out past the write bound and its charge was refused as busy (found by a soak:
  // accounting/torn-read with accounting/slot/mid-update delayed). Process-local: the slot's
  // writers are all threads of this process.
  std::atomic<std::uint32_t> writers_next{0};
  std::atomic<std::uint32_t> writers_serving{0};
};

// Waits for turn `t` of a registration's writers; the writer ahead is inside a short update.
void wait_turn(const std::atomic<std::uint32_t>& serving, std::uint32_t t) noexcept {
  for (std::uint32_t n = 0; serving.load(std::memory_order_acquire) != t; ++n) {
    if (n < 64) {
      cpu_relax();
    } else if (n < 1024) {
      sched_yield();
    } else {
      // Preempted or delayed inside its update: sleep rather than burn the core it needs.
      struct timespec ts = {0, 20'000};
      nanosleep(&ts, nullptr);
    }
  }
}

constexpr int registration_count = 64;
registration table[registration_count];
std::atomic<bool> locking_exit_handler_bug{false};

int claim_registration() noexcept {
  for (int i = 0; i < registration_count; ++i) {
    int expected = r_empty;
    if (table[i].state.compare_exchange_strong(expected, r_filling, std::memory_order_acq_rel)) return i;
  }
  return -1;
}

// Releases a slot with atomics only: subtract its counters from the aggregates, zero them, mark
// the slot free. Returns false when a write stayed in flight past the bound (the slot is then
// left for lazy reclamation once this process is gone). Async-signal-safe, unless the
// locking-exit-handler bug point made it take the mutex, or `at_exit_point` asks for the
// accounting/exit/cleanup fault point (the fault engine allocates and locks: only the atexit path,
// never a signal handler, asks for it).
bool release_slot(header* h, slot* s, pid_t owner, std::uint64_t start, std::uint32_t devices,
                  bool at_exit_point, bool locking_bug) noexcept {
  if (s->pid.load(std::memory_order_acquire) != owner || s->start_time.load(std::memory_order_relaxed) != start) {
    return true;  // reclaimed already (we were taken for dead): nothing of ours is left
  }
  bool locked = false;
  if (locking_bug) {
    // Pre-fix: the exit handler takes the region mutex, unbounded. A holder in this process (the
    // thread the signal interrupted) or a stuck one elsewhere hangs the exit forever.
    const int rc = pthread_mutex_lock(&h->mutex);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&h->mutex);
    locked = rc == 0 || rc == EOWNERDEAD;
  }
  std::uint64_t q = 0;
  const bool got = acquire_slot_write(s, clock_type::now() + std::chrono::milliseconds(200), q);
  if (got) {
    if (at_exit_point) (void)FAULTLINE_POINT("accounting/exit/cleanup");
    for (std::uint32_t d = 0; d < devices; ++d) {
      const std::uint64_t t = s->counters[d][detail::c_total].load(counter_load);
      if (t != 0) h->aggregate[d].fetch_sub(t, std::memory_order_acq_rel);
      for (auto& c : s->counters[d]) c.store(0, counter_store);
    }
    s->seq.store(q + 2, std::memory_order_release);
    s->start_time.store(0, std::memory_order_relaxed);
    s->pid.store(0, std::memory_order_release);
  }
  if (locked) pthread_mutex_unlock(&h->mutex);
  return got;
}

void cleanup_all_registrations(bool in_signal_handler) noexcept {
  const pid_t me = ::getpid();
  const bool locking_bug = locking_exit_handler_bug.load(std::memory_order_acquire);
  for (auto& r : table) {
    if (r.state.load(std::memory_order_acquire) != r_active || r.kernel_pid != me) continue;
    int expected = r_active;
    if (!r.state.compare_exchange_strong(expected, r_cleaning, std::memory_order_acq_rel)) continue;
    (void)release_slot(r.h, r.s, r.owner_pid, r.start_time, r.devices, /*at_exit_point=*/!in_signal_handler,
                       locking_bug);
    r.state.store(r_released, std::memory_order_release);
  }
}

constexpr int handled_signals[] = {SIGTERM, SIGINT, SIGHUP};
struct sigaction previous_actions[3];
std::atomic<bool> handler_installed[3];
std::mutex install_mutex;
bool atexit_installed = false;

int signal_slot(int sig) noexcept {
  for (int i = 0; i < 3; ++i) {
    if (handled_signals[i] == sig) return i;
  }
  return -1;
}

void on_termination_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  cleanup_all_registrations(/*in_signal_handler=*/true);
  const int i = signal_slot(sig);
  const struct sigaction& prev = previous_actions[i >= 0 ? i : 0];
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
  } else if ((prev.sa_flags & SA_SIGINFO) == 0 && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  } else {
    // No earlier handler: die of the signal as if we had never been there. The signal is blocked
    // while this handler runs, so it is delivered with the default action when we return.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
  }
  errno = saved_errno;
}

status install_exit_handlers() {
  std::lock_guard<std::mutex> g(install_mutex);
  if (!atexit_installed) {
    if (std::atexit([] { cleanup_all_registrations(/*in_signal_handler=*/false); }) != 0) {
      return status(errc::internal, "accounting: atexit refused to register the exit cleanup");
    }
    atexit_installed = true;
  }
  for (int i = 0; i < 3; ++i) {
    if (handler_installed[i].load(std::memory_order_acquire)) continue;
    struct sigaction old {};
    if (sigaction(handled_signals[i], nullptr, &old) != 0) {
      return status::from_errno(errno, "accounting: sigaction " + std::to_string(handled_signals[i]));
    }
    // A signal the process ignores stays ignored: cleaning up on it would free the slot of a
    // process that goes on running.
    if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_IGN) continue;
    previous_actions[i] = old;
    struct sigaction act {};
    act.sa_sigaction = &on_termination_signal;
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&act.sa_mask);
    for (int other : handled_signals) sigaddset(&act.sa_mask, other);
    if (sigaction(handled_signals[i], &act, nullptr) != 0) {
      return status::from_errno(errno, "accounting: sigaction " + std::to_string(handled_signals[i]));
    }
    handler_installed[i].store(true, std::memory_order_release);
  }
  return status::ok();
}

timespec realtime_after(std::chrono::milliseconds d) noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const long long ns = static_cast<long long>(ts.tv_nsec) + static_cast<long long>(d.count()) * 1000000LL;
  ts.tv_sec += static_cast<time_t>(ns / 1000000000LL);
  ts.tv_nsec = static_cast<long>(ns % 1000000000LL);
  return ts;
}

std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

std::string default_path() { return "/dev/shm/faultline-accounting"; }

std::string_view to_string(slot_state s) noexcept {
  switch (s) {
    case slot_state::free: return "free";
    case slot_state::alive: return "alive";
    case slot_state::dead: return "dead";
  }
  return "?";
}

// --- region -------------------------------------------------------------------------------------

region::region(std::string path, int fd, detail::header* h, std::size_t bytes, const options& opt)
    : path_(std::move(path)),
      fd_(fd),
      h_(h),
      bytes_(bytes),
      devices_(h->device_count),
      max_slots_(h->max_slots),
      opt_(opt) {}

region::~region() { (void)detach(); }

result<std::unique_ptr<region>> region::attach(const std::string& path, const options& opt) {
  if (opt.lock_slice.count() <= 0 || opt.lock_bound.count() < 0 || opt.reader_bound.count() < 0) {
    return status(errc::invalid_argument, "accounting options: lock_slice must be positive, bounds not negative");
  }
  const int fd = open_region(path, O_RDWR);
  if (fd < 0) return open_error(errno, path);
  auto v = validate_fd(fd, path);
  if (!v) {
    ::close(fd);
    return v.error();
  }
  void* base = ::mmap(nullptr, v->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return status::from_errno(err, "mmap " + path);
  }
  return std::unique_ptr<region>(new region(path, fd, static_cast<header*>(base), v->bytes, opt));
}

result<std::unique_ptr<region>> region::create_or_attach(const std::string& path, const options& opt) {
  if (auto st = check_options(opt); !st) return st;
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto r = attach(path, opt);
    if (r) {
      if ((*r)->device_count() != opt.devices) {
        return status(errc::invalid_argument, where(path) + "describes " + std::to_string((*r)->device_count()) +
                                                  " devices; the caller asked for " + std::to_string(opt.devices));
      }
      return r;
    }
    if (r.code() != errc::not_found) return r.error();
    auto fd = create_region_file(path, opt);
    if (!fd) {
      if (fd.code() == errc::already_exists) continue;  // lost the race: attach to the winner's
      return fd.error();
    }
    ::close(*fd);  // re-open by name: validates exactly what every other process will see
  }
  return status(errc::busy, where(path) + "kept appearing and disappearing while attaching");
}

status region::detach() noexcept {
  if (h_ == nullptr) return status::ok();
  if (registration_ >= 0) {
    registration& r = table[registration_];
    int expected = r_active;
    if (r.state.compare_exchange_strong(expected, r_detaching, std::memory_order_acq_rel)) {
      (void)release_slot(r.h, r.s, r.owner_pid, r.start_time, r.devices, /*at_exit_point=*/false, /*locking_bug=*/false);
    } else {
      // The exit cleanup took it; when it runs on another thread, let it finish with the mapping.
      const auto deadline = clock_type::now() + std::chrono::seconds(1);
      while (r.state.load(std::memory_order_acquire) == r_cleaning && clock_type::now() < deadline) sched_yield();
    }
    r.state.store(r_empty, std::memory_order_release);
    registration_ = -1;
  }
  slot_index_ = -1;
  ::munmap(h_, bytes_);
  ::close(fd_);
  h_ = nullptr;
  fd_ = -1;
  return status::ok();
}

std::uint64_t region::limit_bytes(std::uint32_t device) const noexcept {
  return h_ != nullptr && device < devices_ ? h_->limit_bytes[device] : 0;
}
std::uint64_t region::repairs() const noexcept { return h_ ? h_->repairs.load(std::memory_order_acquire) : 0; }
std::uint64_t region::occupancy_violations() const noexcept {
  return h_ ? h_->occupancy_violations.load(std::memory_order_acquire) : 0;
}
std::uint64_t region::slots_reclaimed() const noexcept {
  return h_ ? h_->slots_reclaimed.load(std::memory_order_acquire) : 0;
}

// --- the lock -----------------------------------------------------------------------------------

region::lock_guard::lock_guard(lock_guard&& o) noexcept
    : owner_(o.owner_), mutex_held_(o.mutex_held_), repaired_(o.repaired_), forced_(o.forced_) {
  o.owner_ = nullptr;
}

region::lock_guard& region::lock_guard::operator=(lock_guard&& o) noexcept {
  if (this != &o) {
    unlock();
    owner_ = o.owner_;
    mutex_held_ = o.mutex_held_;
    repaired_ = o.repaired_;
    forced_ = o.forced_;
    o.owner_ = nullptr;
  }
  return *this;
}

void region::lock_guard::unlock() noexcept {
  if (owner_ != nullptr) owner_->unlock_guard(*this);
}

void region::unlock_guard(lock_guard& g) noexcept {
  header* h = h_;
  g.owner_ = nullptr;
  if (h == nullptr) return;
  std::uint32_t occ = h->occupancy.load(std::memory_order_acquire);
  if (occ != 1) h->occupancy_violations.fetch_add(1, std::memory_order_acq_rel);
  if (g.mutex_held_) h->lock_owner_pid.store(0, std::memory_order_release);
  while (occ > 0 && !h->occupancy.compare_exchange_weak(occ, occ - 1, std::memory_order_acq_rel)) {
  }
  if (g.mutex_held_) pthread_mutex_unlock(&h->mutex);
  g.mutex_held_ = false;
}

result<region::lock_guard> region::lock() {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  // The region's mutex is robust and process-shared, never priority-inheriting or -protecting. A
  // file that says otherwise (corrupt or foreign) is refused here: glibc asserts on a
  // priority-protect mutex with an out-of-range ceiling (the fuzzer found it).
  constexpr int prio_protocols = 0x20 | 0x40;  // PTHREAD_MUTEX_PRIO_INHERIT_NP | PTHREAD_MUTEX_PRIO_PROTECT_NP
  if ((__atomic_load_n(&h_->mutex.__data.__kind, __ATOMIC_RELAXED) & prio_protocols) != 0)
    return status(errc::corrupt, where(path_) + "its lock is not the robust process-shared mutex a region has; recreate the region");
  const bool stale_bug = FAULTLINE_BUG("bug/accounting/stale-deadline");
  const auto bound_end = clock_type::now() + opt_.lock_bound;
  // Pre-fix (bug point): one deadline for every wait, so after the first slice every wait
  // returns at once and the loop spins until the bound, then "forces" the lock.
  const timespec stale_deadline = realtime_after(opt_.lock_slice);
  int rc = 0;
  bool forced = false;
  for (;;) {
    timespec deadline;
    if (stale_bug) {
      deadline = stale_deadline;
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(bound_end - clock_type::now());
      deadline = realtime_after(std::max(std::chrono::milliseconds(1), std::min(opt_.lock_slice, left)));
    }
    rc = pthread_mutex_timedlock(&h_->mutex, &deadline);
    if (rc == 0 || rc == EOWNERDEAD) break;
    if (rc == ENOTRECOVERABLE) {
      return status(errc::corrupt, where(path_) + "lock is not recoverable (a repair after a dead holder was "
                                                  "abandoned); recreate the region");
    }
    if (rc != ETIMEDOUT && rc != EINTR) return status::from_errno(rc, "lock " + path_);
    if (clock_type::now() >= bound_end) {
      if (stale_bug) {
        forced = true;
        break;
      }
      const pid_t holder = h_->lock_owner_pid.load(std::memory_order_acquire);
      return status(errc::timeout, where(path_) + "lock not acquired within " + std::to_string(opt_.lock_bound.count()) +
                                       " ms (held by pid " + std::to_string(holder) + ")");
    }
    if (stale_bug) sched_yield();
  }
  lock_guard g;
  g.owner_ = this;
  g.mutex_held_ = !forced;
  g.forced_ = forced;
  const bool owner_died = !forced && rc == EOWNERDEAD;
  // The dead holder's occupancy is void; everyone else waited on the mutex.
  if (owner_died) h_->occupancy.store(0, std::memory_order_release);
  const std::uint32_t occ = h_->occupancy.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (occ != 1) {
    const std::uint64_t n = h_->occupancy_violations.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (!forced) {
      std::uint32_t cur = h_->occupancy.load(std::memory_order_acquire);
      while (cur > 0 && !h_->occupancy.compare_exchange_weak(cur, cur - 1, std::memory_order_acq_rel)) {
      }
      g.owner_ = nullptr;
      if (owner_died) pthread_mutex_consistent(&h_->mutex);
      pthread_mutex_unlock(&h_->mutex);
      return status(errc::internal, where(path_) + "occupancy " + std::to_string(occ) +
                                        " inside the lock: another holder is in the critical section (violation #" +
                                        std::to_string(n) + ")");
    }
  }
  if (!forced) h_->lock_owner_pid.store(core::self_pid(), std::memory_order_release);
  if (owner_died) {
    // Repair first, mark consistent after: if this process dies mid-repair, the next locker sees
    // EOWNERDEAD again and repairs again.
    (void)repair_locked(true);
    pthread_mutex_consistent(&h_->mutex);
    g.repaired_ = true;
  }
  if (int err = FAULTLINE_POINT("accounting/lock/held")) {
    g.unlock();
    return status::injected_fault("accounting/lock/held", err);
  }
  return g;
}

// --- slots ----------------------------------------------------------------------------------------

status region::register_process() {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  if (slot_index_ >= 0) return status::ok();
  const int reg = claim_registration();
  if (reg < 0) {
    return status(errc::busy, "accounting: this process already holds " + std::to_string(registration_count) +
                                  " region registrations");
  }
  const pid_t pid = core::self_pid();
  const std::uint64_t start = core::self_start_time();
  auto g = lock();
  if (!g) {
    table[reg].state.store(r_empty, std::memory_order_release);
    return g.error();
  }
  int chosen = -1;
  for (std::uint32_t i = 0; i < max_slots_ && chosen < 0; ++i) {
    if (detail::slot_at(h_, i)->pid.load(std::memory_order_acquire) == 0) chosen = static_cast<int>(i);
  }
  if (chosen < 0) {
    // Lazy reclamation: no free slot, so take back the slots of processes that died (SIGKILL
    // runs no cleanup), in place, and settle the aggregates.
    (void)repair_locked(false);
    for (std::uint32_t i = 0; i < max_slots_ && chosen < 0; ++i) {
      if (detail::slot_at(h_, i)->pid.load(std::memory_order_acquire) == 0) chosen = static_cast<int>(i);
    }
  }
  if (chosen < 0) {
    g->unlock();
    table[reg].state.store(r_empty, std::memory_order_release);
    return status(errc::busy, where(path_) + "all " + std::to_string(max_slots_) + " slots are held by live processes");
  }
  slot* s = detail::slot_at(h_, static_cast<std::uint32_t>(chosen));
  const std::uint64_t q = s->seq.load(std::memory_order_relaxed);
  if ((q & 1) != 0) s->seq.store(q + 1, std::memory_order_relaxed);
  for (std::uint32_t d = 0; d < devices_; ++d) {
    for (auto& c : s->counters[d]) c.store(0, counter_store);
  }
  s->start_time.store(start, std::memory_order_relaxed);
  s->pid.store(pid, std::memory_order_release);
  g->unlock();

  registration& r = table[reg];
  r.h = h_;
  r.s = s;
  r.kernel_pid = ::getpid();
  r.owner_pid = pid;
  r.start_time = start;
  r.devices = devices_;
  r.state.store(r_active, std::memory_order_release);
  registration_ = reg;
  slot_index_ = chosen;
  if (opt_.exit_handlers) {
    // Read now, not at exit: in a signal handler the fault engine cannot be asked.
    locking_exit_handler_bug.store(FAULTLINE_BUG("bug/accounting/locking-exit-handler"), std::memory_order_release);
    if (auto st = install_exit_handlers(); !st) return st;
  }
  return status::ok();
}

status region::charge(std::uint32_t device, kind k, std::uint64_t bytes) noexcept {
  return write_slot(device, k, bytes, /*is_charge=*/true);
}

status region::release(std::uint32_t device, kind k, std::uint64_t bytes) noexcept {
  return write_slot(device, k, bytes, /*is_charge=*/false);
}

status region::write_slot(std::uint32_t device, kind k, std::uint64_t bytes, bool is_charge) noexcept {
  const char* op = is_charge ? "charge" : "release";
  if (h_ == nullptr || slot_index_ < 0 || registration_ < 0) {
    return status(errc::refused, std::string("accounting: ") + op + ": this process is not registered");
  }
  if (device >= devices_) {
    return status(errc::invalid_argument, std::string("accounting: ") + op + ": device " + std::to_string(device) +
                                              " out of range (" + std::to_string(devices_) + " devices)");
  }
  slot* s = detail::slot_at(h_, static_cast<std::uint32_t>(slot_index_));
  registration& reg = table[registration_];

  const bool no_seqlock = FAULTLINE_BUG("bug/accounting/no-seqlock");
  const bool no_exclusion = !no_seqlock && FAULTLINE_BUG("bug/accounting/no-writer-exclusion");
  const bool queued = !no_seqlock && !no_exclusion;
  if (queued) wait_turn(reg.writers_serving, reg.writers_next.fetch_add(1, std::memory_order_relaxed));
  auto next_turn = [&]() noexcept {
    if (queued) reg.writers_serving.fetch_add(1, std::memory_order_release);
  };
  std::uint64_t q = 0;
  if (no_seqlock) {
    // Pre-fix: counters written in place with nothing to tell a reader a write is under way.
  } else if (no_exclusion) {
    // Pre-fix: a seqlock without writer exclusion: two writers both bump the sequence, so it can
    // read even while both are inside, and their read-modify-writes interleave.
    s->seq.fetch_add(1, std::memory_order_acq_rel);
    seqlock_fence(std::memory_order_release);
  } else if (!acquire_slot_write(s, clock_type::now() + std::max(opt_.reader_bound, std::chrono::milliseconds(1000)), q)) {
    // Only the exit cleanup or a repair competes with the turn's holder now.
    next_turn();
    return status(errc::busy, std::string("accounting: ") + op + ": slot " + std::to_string(slot_index_) +
                                  " stayed mid-update by another thread past the bound");
  }
  auto end = [&]() noexcept {
    if (no_seqlock) return;
    if (no_exclusion) {
      s->seq.fetch_add(1, std::memory_order_release);
    } else {
      s->seq.store(q + 2, std::memory_order_release);
      next_turn();
    }
  };
  // Checked with the write side held: the exit cleanup marks the registration before it takes the
  // write side, so either it waits for this write or this write sees it and stops.
  if (reg.state.load(std::memory_order_acquire) != r_active) {
    end();
    return status(errc::refused, std::string("accounting: ") + op + ": the slot was released (process exiting)");
  }
  if (int err = FAULTLINE_POINT("accounting/slot/mid-update")) {
    end();
    return status::injected_fault("accounting/slot/mid-update", err);
  }
  std::atomic<std::uint64_t>& part = s->counters[device][part_index(k)];
  std::atomic<std::uint64_t>& total = s->counters[device][detail::c_total];
  std::atomic<std::uint64_t>& aggregate = h_->aggregate[device];
  if (is_charge) {
    // Add first, check, roll back on refusal: the decision needs no lock and the aggregate is
    // exact whenever no charge is in flight.
    const std::uint64_t limit = h_->limit_bytes[device];
    const std::uint64_t before = aggregate.fetch_add(bytes, std::memory_order_acq_rel);
    const bool wrapped = before > std::numeric_limits<std::uint64_t>::max() - bytes;
    if (wrapped || before + bytes > limit) {
      aggregate.fetch_sub(bytes, std::memory_order_acq_rel);
      end();
      return status(errc::out_of_memory, "accounting: device " + std::to_string(device) + ": limit of " +
                                             std::to_string(limit) + " bytes: " + std::to_string(before) +
                                             " in use, " + std::to_string(bytes) + " more requested");
    }
    part.store(part.load(counter_load) + bytes, counter_store);
    // The update half done (a writer preempted between its two stores): delay, pause or kill
    // only; a failure code here is ignored (the aggregate is already charged).
    (void)FAULTLINE_POINT("accounting/slot/between-stores");
    total.store(total.load(counter_load) + bytes, counter_store);
  } else {
    const std::uint64_t have = part.load(counter_load);
    if (have < bytes) {
      end();
      return status(errc::invalid_argument, "accounting: release: device " + std::to_string(device) + ": " +
                                                std::to_string(bytes) + " bytes asked back, this process holds " +
                                                std::to_string(have));
    }
    part.store(have - bytes, counter_store);
    (void)FAULTLINE_POINT("accounting/slot/between-stores");
    total.store(total.load(counter_load) - bytes, counter_store);
    aggregate.fetch_sub(bytes, std::memory_order_acq_rel);
  }
  end();
  return status::ok();
}

result<std::uint64_t> region::usage(std::uint32_t device) const noexcept {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  if (device >= devices_) {
    return status(errc::invalid_argument, "accounting: usage: device " + std::to_string(device) + " out of range");
  }
  return h_->aggregate[device].load(std::memory_order_acquire);
}

// Reads slot `index` within the reader bound. A slot still mid-update after the bound whose owner
// is dead is repaired (under the lock, or in place when the caller holds it) and read again; one
// whose owner lives is returned with mid_update set and errc::busy.
status region::read_slot(std::uint32_t index, bool lock_held, slot_info& out, bool& repaired) {
  const slot* s = detail::slot_at(h_, index);
  const bool unbounded = FAULTLINE_BUG("bug/accounting/unbounded-reader");
  auto deadline = clock_type::now() + opt_.reader_bound;
  out.index = index;
  for (std::uint32_t n = 0;; ++n) {
    out.pid = s->pid.load(std::memory_order_acquire);
    out.start_time = s->start_time.load(std::memory_order_relaxed);
    if (out.pid == 0) {
      out.state = slot_state::free;
      out.devices.assign(devices_, counters{});
      return status::ok();
    }
    if (try_read_slot(s, devices_, out)) {
      out.mid_update = false;
      return status::ok();
    }
    if (n < 64) {
      cpu_relax();
      continue;
    }
    sched_yield();
    // Pre-fix (bug point): spin until the writer finishes, which a dead writer never does.
    if (unbounded || (n & 31) != 0 || clock_type::now() < deadline) continue;
    const bool pid_only = FAULTLINE_BUG("bug/accounting/pid-only-liveness");
    if (core::process_liveness(out.pid, out.start_time, pid_only) == core::liveness::alive) {
      out.state = slot_state::alive;
      out.mid_update = true;
      out.sequence = s->seq.load(std::memory_order_relaxed);
      return status(errc::busy, where(path_) + "slot " + std::to_string(index) + " stayed mid-update past " +
                                    std::to_string(opt_.reader_bound.count()) + " ms (writer pid " +
                                    std::to_string(out.pid) + " is alive)");
    }
    // The writer died inside its update: repair instead of waiting for it.
    if (lock_held) {
      (void)repair_locked(false);
    } else {
      auto g = lock();
      if (!g) return g.error();
      (void)repair_locked(false);
    }
    repaired = true;
    deadline = clock_type::now() + opt_.reader_bound;
    n = 0;
  }
}

result<counters> region::own_usage(std::uint32_t device) {
  if (h_ == nullptr || slot_index_ < 0) return status(errc::refused, "accounting: own_usage: not registered");
  if (device >= devices_) return status(errc::invalid_argument, "accounting: own_usage: device out of range");
  slot_info info;
  bool repaired = false;
  if (auto st = read_slot(static_cast<std::uint32_t>(slot_index_), false, info, repaired); !st) return st;
  return info.devices[device];
}

result<counters> region::slots_sum(std::uint32_t device) {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  if (device >= devices_) return status(errc::invalid_argument, "accounting: slots_sum: device out of range");
  counters sum;
  for (std::uint32_t i = 0; i < max_slots_; ++i) {
    const slot* s = detail::slot_at(h_, i);
    counters c;
    std::uint64_t q = 0;
    bool got = false;
    for (int n = 0; n < 64 && !got; ++n) {
      if (s->pid.load(std::memory_order_acquire) == 0) break;
      got = try_read_device(s, device, c, q);
      if (!got) cpu_relax();
    }
    if (!got) {
      if (s->pid.load(std::memory_order_acquire) == 0) continue;
      // Slow path: the full bounded read with liveness and repair.
      slot_info info;
      bool repaired = false;
      if (auto st = read_slot(i, false, info, repaired); !st) return st;
      if (info.state == slot_state::free) continue;
      c = info.devices[device];
    }
    sum.total += c.total;
    sum.context += c.context;
    sum.module += c.module;
    sum.data += c.data;
  }
  return sum;
}

result<usage_snapshot> region::snapshot() {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  usage_snapshot out;
  out.limits_bytes.assign(h_->limit_bytes, h_->limit_bytes + devices_);
  out.aggregate_bytes.resize(devices_);
  for (std::uint32_t d = 0; d < devices_; ++d) out.aggregate_bytes[d] = h_->aggregate[d].load(std::memory_order_acquire);
  out.live_sum.assign(devices_, counters{});
  const bool pid_only = FAULTLINE_BUG("bug/accounting/pid-only-liveness");
  for (std::uint32_t i = 0; i < max_slots_; ++i) {
    slot_info info;
    bool repaired = false;
    status st = read_slot(i, false, info, repaired);
    if (!st && st.code() != errc::busy) return st;
    if (info.state == slot_state::free && info.pid == 0) continue;
    if (!info.mid_update) {
      info.state = core::process_liveness(info.pid, info.start_time, pid_only) == core::liveness::alive
                       ? slot_state::alive
                       : slot_state::dead;
      if (info.state == slot_state::alive) {
        for (std::uint32_t d = 0; d < devices_; ++d) {
          out.live_sum[d].total += info.devices[d].total;
          out.live_sum[d].context += info.devices[d].context;
          out.live_sum[d].module += info.devices[d].module;
          out.live_sum[d].data += info.devices[d].data;
        }
      }
    }
    out.slots.push_back(std::move(info));
  }
  return out;
}

// --- the watcher ----------------------------------------------------------------------------------

status region::publish_utilisation(std::uint32_t device, std::uint32_t percent) {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  if (device >= devices_) return status(errc::invalid_argument, "accounting: publish_utilisation: device out of range");
  auto g = lock();
  if (!g) return g.error();
  h_->utilisation[device].store(percent, std::memory_order_relaxed);
  h_->utilisation_ns[device].store(realtime_ns(), std::memory_order_release);
  return status::ok();
}

status region::watch_once(std::uint32_t device, const std::function<result<std::uint32_t>()>& query) {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  if (device >= devices_) return status(errc::invalid_argument, "accounting: watch_once: device out of range");
  if (FAULTLINE_BUG("bug/accounting/query-under-lock")) {
    // Pre-fix: the device query (NVML, possibly seconds) runs with every process's lock held.
    auto g = lock();
    if (!g) return g.error();
    auto v = query();
    if (!v) return v.error();
    h_->utilisation[device].store(*v, std::memory_order_relaxed);
    h_->utilisation_ns[device].store(realtime_ns(), std::memory_order_release);
    return status::ok();
  }
  auto v = query();
  if (!v) return v.error();
  return publish_utilisation(device, *v);
}

result<std::uint32_t> region::utilisation(std::uint32_t device) const noexcept {
  if (h_ == nullptr) return status(errc::refused, where(path_) + "detached");
  if (device >= devices_) return status(errc::invalid_argument, "accounting: utilisation: device out of range");
  return h_->utilisation[device].load(std::memory_order_acquire);
}

}  // namespace faultline::accounting
