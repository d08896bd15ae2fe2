// The byte layout of a shared accounting region (DESIGN.md §5.3). Private to core/accounting and
// its tests: everything else goes through region.h.
//
// A region file is one `header` followed by `max_slots` `slot`s, nothing else:
//
//   [header (header_size bytes)][slot 0][slot 1]...[slot max_slots-1]      (each slot slot_size)
//
// The first fields of the header (magic .. initialised) never change after creation and sit at
// fixed offsets so that a reader can validate them from a plain pread() before mapping the file.
// Everything shared between processes and written after creation is a lock-free std::atomic (the
// static_asserts below) or the process-shared robust mutex. Layout changes bump `abi_version`.
//
// Thread and process safety: this is data; the rules live in region.cc. In short: the header's
// mutable lock fields are written by the lock holder only; aggregates are atomics updated by any
// process; a slot's counters are written only by the slot's owner under the slot's seqlock (or by
// a repairer that holds the region lock and has found the owner dead).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace faultline::accounting::detail {

/// "FLACCT\0\1" read as a little-endian integer.
inline constexpr std::uint64_t region_magic = 0x0100544343414c46ULL;
inline constexpr std::uint32_t layout_abi_version = 1;
/// Devices a region can describe; the header reserves room for all of them.
inline constexpr std::uint32_t layout_max_devices = 16;
/// Process slots a region can hold.
inline constexpr std::uint32_t layout_max_slots = 4096;
/// `initialised` holds this once the creator has finished (written last, release order).
inline constexpr std::uint32_t initialised_value = 0x1D1D1D1DU;

/// Indexes into a slot's per-device counter row.
enum counter_index : std::uint32_t { c_total = 0, c_context = 1, c_module = 2, c_data = 3, counter_count = 4 };

struct alignas(64) header {
  // --- fixed at creation, validated on attach --------------------------------------------------
  std::uint64_t magic;
  std::uint32_t abi_version;
  std::uint32_t header_size;   ///< sizeof(header) of the creator
  std::uint32_t slot_size;     ///< sizeof(slot) of the creator
  std::uint32_t device_count;  ///< 1..layout_max_devices
  std::uint32_t max_slots;     ///< 1..layout_max_slots
  std::atomic<std::uint32_t> initialised;  ///< initialised_value once the creator is done
  std::uint64_t limit_bytes[layout_max_devices];  ///< UINT64_MAX: no limit

  // --- the lock (written by its holder) ----------------------------------------------------------
  alignas(64) pthread_mutex_t mutex;  ///< PTHREAD_PROCESS_SHARED + PTHREAD_MUTEX_ROBUST
  std::atomic<std::uint32_t> occupancy;  ///< holders inside the critical section: 0 or 1
  std::atomic<std::int32_t> lock_owner_pid;  ///< the holder's host pid, 0 when free
  std::atomic<std::uint64_t> repairs;        ///< repairs made (EOWNERDEAD, dead odd slots, repair())
  std::atomic<std::uint64_t> occupancy_violations;  ///< times occupancy was not 1 inside the lock
  std::atomic<std::uint64_t> slots_reclaimed;       ///< dead processes' slots taken back

  // --- per device, updated by everyone ---------------------------------------------------------
  /// Bytes charged on each device by every live slot (the OOM decision's counter).
  alignas(64) std::atomic<std::uint64_t> aggregate[layout_max_devices];
  /// Last utilisation published by a watcher (percent) and when (CLOCK_REALTIME ns); under the lock.
  std::atomic<std::uint32_t> utilisation[layout_max_devices];
  std::atomic<std::uint64_t> utilisation_ns[layout_max_devices];
};

struct alignas(64) slot {
  std::atomic<std::int32_t> pid;          ///< owner's host pid; 0 when the slot is free
  std::atomic<std::uint64_t> start_time;  ///< owner's start time (/proc/PID/stat field 22)
  std::atomic<std::uint64_t> seq;         ///< seqlock: odd while a writer is inside
  std::atomic<std::uint64_t> counters[layout_max_devices][counter_count];
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "region atomics must be lock-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "region atomics must be lock-free");
static_assert(std::atomic<std::int32_t>::is_always_lock_free, "region atomics must be lock-free");
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "atomics must have the plain layout");
static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t), "atomics must have the plain layout");

/// The prefix of the header that validation reads with pread() before mapping.
inline constexpr std::size_t fixed_prefix_bytes = offsetof(header, limit_bytes);
static_assert(offsetof(header, magic) == 0);
static_assert(offsetof(header, abi_version) == 8);
static_assert(offsetof(header, header_size) == 12);
static_assert(offsetof(header, slot_size) == 16);
static_assert(offsetof(header, device_count) == 20);
static_assert(offsetof(header, max_slots) == 24);
static_assert(offsetof(header, initialised) == 28);
static_assert(fixed_prefix_bytes == 32);

/// Bytes of a region file with `max_slots` slots.
constexpr std::size_t region_bytes(std::uint32_t max_slots) noexcept {
  return sizeof(header) + static_cast<std::size_t>(max_slots) * sizeof(slot);
}

inline slot* slot_at(header* h, std::uint32_t index) noexcept {
  return reinterpret_cast<slot*>(reinterpret_cast<char*>(h) + sizeof(header)) + index;
}
inline const slot* slot_at(const header* h, std::uint32_t index) noexcept {
  return reinterpret_cast<const slot*>(reinterpret_cast<const char*>(h) + sizeof(header)) + index;
}

}  // namespace faultline::accounting::detail
