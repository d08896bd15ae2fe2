// The shared accounting region (DESIGN.md §5.3): per-device memory usage of every process on a
// node that uses the same devices, kept in one file mapped by all of them, with per-device limits
// decided on one aggregate counter.
//
//   accounting::options opt;
//   opt.devices = 2;
//   opt.limits_bytes = {8ull << 30, 8ull << 30};
//   auto r = accounting::region::create_or_attach("/dev/shm/faultline-accounting", opt);
//   if (!r) return r.error();                       // a bad region is a clear error, never a crash
//   if (auto st = (*r)->register_process(); !st) return st;
//   if (auto st = (*r)->charge(0, accounting::kind::data, 1 << 20); !st) { /* out_of_memory */ }
//   ...
//   (*r)->release(0, accounting::kind::data, 1 << 20);
//
// What it guarantees:
// - Opening is safe against hostile or broken files: O_NOFOLLOW|O_CLOEXEC, created 0600 under a
//   temporary name and linked into place once initialised (no process ever maps a half-built
//   region), and attach validates the owner (must be getuid()), file type, size, magic, ABI
//   version, struct sizes and device count. Any failure is a core::status naming the path and
//   what is wrong (errc::corrupt for a bad file, errc::refused for another user's or a symlink,
//   errc::not_found, errc::io_error).
// - One lock, a process-shared robust mutex, guards slot registration, repair and the watcher's
//   publication. Its holder dying (even by SIGKILL) is seen by the next locker at once
//   (EOWNERDEAD), which repairs the region before going on. Waits are bounded: each timed wait
//   gets a fresh deadline and the total wait is capped (options::lock_bound), after which lock()
//   returns errc::timeout naming the holder. The lock is never forced. An occupancy counter inside
//   the critical section checks that there is at most one holder; a violation is counted in the
//   header and returned as errc::internal.
// - charge/release take no lock: the OOM decision is fetch_add on the device's aggregate, check,
//   roll back on refusal; the caller's slot counters are written under the slot's seqlock with
//   writer exclusion. Every accepted read satisfies total == context + module + data.
// - A process is identified by host pid and start time; a slot whose owner is dead (or whose pid
//   was reused) is reclaimed in place when the lock is repaired, when a slot is needed, or when a
//   reader finds it stuck mid-update. Slots never move.
// - At normal exit and on SIGTERM/SIGINT/SIGHUP, the process's slots are released with atomic
//   operations only (never the mutex); earlier handlers are chained, and with none the signal is
//   re-raised with its default action. A signal whose disposition was SIG_IGN is left alone.
//
// Errors are values; library code never exits, never aborts on a bad file.
//
// Thread safety: a region object may be used from any number of threads at once, except that
// detach() and the destructor must not race other calls on the same object. Any number of
// processes may map one region.
//
// Fault points: accounting/lock/held (inside the critical section), accounting/slot/mid-update
// (between seqlock begin and end), accounting/exit/cleanup (in the atexit cleanup; never hit in the
// signal-handler cleanup, where the fault engine is not async-signal-safe). Bug points, each
// re-creating a historical bug: bug/accounting/stale-deadline, bug/accounting/locking-exit-handler,
// bug/accounting/no-seqlock, bug/accounting/no-writer-exclusion, bug/accounting/unbounded-reader,
// bug/accounting/pid-only-liveness, bug/accounting/query-under-lock.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace faultline::accounting {

using core::errc;
using core::result;
using core::status;

namespace detail {
struct header;
struct slot;
}  // namespace detail

/// The part of a device's usage a charge belongs to; `total` is always their sum.
enum class kind : std::uint8_t { context, module, data };

/// Limits of the layout.
inline constexpr std::uint32_t max_devices = 16;
inline constexpr std::uint32_t max_slots_limit = 4096;
/// A limit that never refuses.
inline constexpr std::uint64_t no_limit = ~std::uint64_t{0};

/// "/dev/shm/faultline-accounting".
std::string default_path();

/// How to create or attach to a region.
struct options {
  /// Devices described by the region (1..max_devices). On attach, must match the region's.
  std::uint32_t devices = 1;
  /// Per-device limits in bytes; a missing entry means no_limit. Used only when creating: an
  /// existing region keeps the limits its creator set.
  std::vector<std::uint64_t> limits_bytes;
  /// Process slots (1..max_slots_limit). Used only when creating.
  std::uint32_t max_slots = 64;
  /// Total time lock() may wait before errc::timeout.
  std::chrono::milliseconds lock_bound{10000};
  /// Each timed wait's length; a fresh deadline is computed for every wait.
  std::chrono::milliseconds lock_slice{100};
  /// How long a reader retries a slot that stays mid-update before looking at its owner.
  std::chrono::milliseconds reader_bound{100};
  /// Install the atexit hook and SIGTERM/SIGINT/SIGHUP handlers at register_process().
  bool exit_handlers = true;
};

/// Usage of one device by one slot (or a sum of slots).
struct counters {
  std::uint64_t total = 0;
  std::uint64_t context = 0;
  std::uint64_t module = 0;
  std::uint64_t data = 0;
  [[nodiscard]] bool consistent() const noexcept { return total == context + module + data; }
  friend bool operator==(const counters&, const counters&) = default;
};

enum class slot_state { free, alive, dead };
std::string_view to_string(slot_state s) noexcept;

/// One in-use slot as read by snapshot() or inspect().
struct slot_info {
  std::uint32_t index = 0;
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  slot_state state = slot_state::free;
  std::uint64_t sequence = 0;
  /// The slot stayed mid-update (odd sequence) past the reader bound; `devices` is then a torn,
  /// unverified read.
  bool mid_update = false;
  std::vector<counters> devices;  ///< one per device
};

/// A consistent read of every in-use slot (each slot read under its seqlock) and the aggregates.
struct usage_snapshot {
  std::vector<std::uint64_t> limits_bytes;
  std::vector<std::uint64_t> aggregate_bytes;  ///< the OOM counters
  std::vector<counters> live_sum;              ///< sum over alive slots read consistently
  std::vector<slot_info> slots;                ///< in-use slots, by index
};

/// What a repair did.
struct repair_report {
  std::uint32_t dead_slots_reclaimed = 0;
  std::uint32_t odd_slots_repaired = 0;  ///< of those, slots a dead writer left mid-update
  bool lock_owner_died = false;          ///< the repair ran because lock() saw EOWNERDEAD
  /// Devices whose aggregate was recomputed from the live slots (all, normally); a device is left
  /// out only when live writers kept it busy through every attempt.
  std::uint32_t devices_recomputed = 0;
  /// aggregate after − aggregate before, per device.
  std::vector<std::int64_t> aggregate_corrections;
};

/// What inspect() found in a region file (it never locks, never writes).
struct region_report {
  std::string path;
  std::uint64_t file_bytes = 0;
  uid_t owner_uid = 0;
  std::uint32_t mode = 0;
  std::uint64_t magic = 0;
  std::uint32_t abi_version = 0;
  std::uint32_t header_size = 0;
  std::uint32_t slot_size = 0;
  std::uint32_t device_count = 0;
  std::uint32_t max_slots = 0;
  std::vector<std::uint64_t> limits_bytes;
  std::vector<std::uint64_t> aggregate_bytes;
  std::vector<counters> live_sum;
  std::vector<std::uint32_t> utilisation_percent;
  std::uint32_t occupancy = 0;
  pid_t lock_owner_pid = 0;
  std::uint64_t repairs = 0;
  std::uint64_t occupancy_violations = 0;
  std::uint64_t slots_reclaimed = 0;
  std::vector<slot_info> slots;  ///< in-use slots
  // Invariant checks (meaningful at quiescence).
  bool aggregates_match = true;     ///< aggregate == sum of alive slots' totals, every device
  bool no_dead_odd_slot = true;     ///< no slot left mid-update by a dead owner
  bool slots_consistent = true;     ///< every verified slot read has total == sum of parts
  bool occupancy_zero = true;       ///< nobody inside the critical section
  std::vector<std::string> problems;  ///< one line per failed check
  [[nodiscard]] bool healthy() const noexcept {
    return aggregates_match && no_dead_odd_slot && slots_consistent && occupancy_zero;
  }
};

/// Validates, without mapping or changing anything, the region file at `path`.
/// Errors: as attach.
status validate(const std::string& path);

/// Reads the region at `path` (validated first) and checks its invariants. Never locks, so it
/// answers even while a holder is stuck. Errors: as attach.
result<region_report> inspect(const std::string& path);

/// Attaches to `path`, takes the lock (which repairs after a dead holder) and repairs: reclaims
/// dead processes' slots, repairs slots a dead writer left mid-update, recomputes every aggregate
/// from the live slots. Errors: as attach and lock().
result<repair_report> repair(const std::string& path, const options& opt = {});

/// A mapping of a region. Create with create_or_attach() or attach().
class region {
 public:
  /// Attaches to `path`, creating it (race-free) when it does not exist.
  /// Errors: invalid_argument (bad options, or `opt.devices` differs from an existing region's),
  /// the attach errors.
  static result<std::unique_ptr<region>> create_or_attach(const std::string& path, const options& opt);
  /// Attaches to an existing region; the region's own device count, limits and slot count apply
  /// (`opt` supplies the bounds and exit_handlers). Errors: not_found, refused (symlink, other
  /// owner, not a regular file), corrupt (empty, truncated, wrong magic/version/sizes,
  /// uninitialised), io_error.
  static result<std::unique_ptr<region>> attach(const std::string& path, const options& opt = {});

  /// Releases this object's slot (atomics only) and unmaps. Same as detach().
  ~region();
  region(const region&) = delete;
  region& operator=(const region&) = delete;

  /// Releases the slot (if any) and unmaps; later calls return errc::refused. Idempotent.
  status detach() noexcept;

  /// The region lock: held while the guard lives. Must not outlive its region object; not shared
  /// between threads.
  class lock_guard {
   public:
    lock_guard() = default;
    lock_guard(lock_guard&& o) noexcept;
    lock_guard& operator=(lock_guard&& o) noexcept;
    ~lock_guard() { unlock(); }
    /// Unlocks now (idempotent).
    void unlock() noexcept;
    [[nodiscard]] bool held() const noexcept { return owner_ != nullptr; }
    /// The previous holder had died; the region was repaired before this guard was returned.
    [[nodiscard]] bool repaired() const noexcept { return repaired_; }
    /// bug/accounting/stale-deadline only: the bound passed and the lock was "forced" (treated as
    /// held without holding the mutex).
    [[nodiscard]] bool forced() const noexcept { return forced_; }

   private:
    friend class region;
    region* owner_ = nullptr;
    bool mutex_held_ = false;
    bool repaired_ = false;
    bool forced_ = false;
  };

  /// Takes the region lock within options::lock_bound. On EOWNERDEAD the region is repaired and
  /// the guard says so. Errors: timeout (naming the holder's pid), corrupt (lock unrecoverable),
  /// internal (occupancy check failed: another holder inside), injected (accounting/lock/held).
  /// Not reentrant. Never make a slow call while holding it.
  result<lock_guard> lock();

  /// Claims a slot for the calling process (a free slot, else a dead process's, reclaimed in
  /// place) and, with options::exit_handlers, installs the exit cleanup. Once per object; a second
  /// call is a no-op. Errors: busy (every slot held by a live process), the lock() errors.
  status register_process();
  /// Index of this object's slot, or -1 before register_process().
  [[nodiscard]] int slot_index() const noexcept { return slot_index_; }

  /// Charges `bytes` of `k` on `device` to this process's slot unless the device's aggregate would
  /// pass its limit. Lock-free. Errors: out_of_memory (nothing charged; names limit, usage,
  /// request), invalid_argument (device out of range), refused (not registered, detached, or the
  /// slot was released by the exit cleanup), busy (the slot stayed mid-update by another thread of
  /// this process past the reader bound), injected (accounting/slot/mid-update).
  status charge(std::uint32_t device, kind k, std::uint64_t bytes) noexcept;
  /// Takes back `bytes` of `k` charged earlier by this process. Errors: invalid_argument (more
  /// than this slot holds of `k`, or device out of range; nothing changed), and as charge().
  status release(std::uint32_t device, kind k, std::uint64_t bytes) noexcept;

  /// The device's aggregate (bytes charged by every process). Errors: invalid_argument, refused.
  result<std::uint64_t> usage(std::uint32_t device) const noexcept;
  /// This process's slot counters on `device`, read under the seqlock.
  result<counters> own_usage(std::uint32_t device);
  /// Reads every in-use slot under its seqlock. A slot that stays mid-update past the reader
  /// bound and whose owner is dead is repaired (under the lock) and read again; one whose owner is
  /// alive is reported with mid_update set. Errors: refused (detached), the lock() errors of a
  /// repair.
  result<usage_snapshot> snapshot();
  /// Sum of every in-use slot's counters on `device` (alive, or dead and not yet reclaimed: what
  /// the aggregate counts), each slot read consistently under the same rules as snapshot(),
  /// without allocating. Errors: busy (a live writer kept a slot mid-update past the reader
  /// bound), refused, the lock() errors of a repair.
  result<counters> slots_sum(std::uint32_t device);

  /// Publishes a device's utilisation (percent), holding the lock only for the store.
  status publish_utilisation(std::uint32_t device, std::uint32_t percent);
  /// The watcher's step: runs `query` outside the lock, then publishes its answer. The query may
  /// be slow (an NVML call); it never runs under the lock.
  status watch_once(std::uint32_t device, const std::function<result<std::uint32_t>()>& query);
  /// The last published utilisation of `device` (percent).
  result<std::uint32_t> utilisation(std::uint32_t device) const noexcept;

  /// Takes the lock and repairs (see accounting::repair).
  result<repair_report> repair();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint32_t device_count() const noexcept { return devices_; }
  [[nodiscard]] std::uint64_t limit_bytes(std::uint32_t device) const noexcept;
  /// Lock repairs, occupancy violations and reclaimed slots counted in the header.
  [[nodiscard]] std::uint64_t repairs() const noexcept;
  [[nodiscard]] std::uint64_t occupancy_violations() const noexcept;
  [[nodiscard]] std::uint64_t slots_reclaimed() const noexcept;

 private:
  region(std::string path, int fd, detail::header* h, std::size_t bytes, const options& opt);

  status write_slot(std::uint32_t device, kind k, std::uint64_t bytes, bool is_charge) noexcept;
  status read_slot(std::uint32_t index, bool lock_held, slot_info& out, bool& repaired);
  repair_report repair_locked(bool owner_died);
  status repair_odd_slot(std::uint32_t index);
  void unlock_guard(lock_guard& g) noexcept;

  std::string path_;
  int fd_ = -1;
  detail::header* h_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t devices_ = 0;
  std::uint32_t max_slots_ = 0;
  options opt_;
  int slot_index_ = -1;
  int registration_ = -1;  ///< entry in the process-wide exit-cleanup table
};

}  // namespace faultline::accounting
