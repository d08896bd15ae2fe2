// What region.cc, region_file.cc and region_repair.cc share. Private to core/accounting: the
// memory orders of the slots' seqlock and its read side, the checks of a region file that come
// before anything maps it (region_file.cc), and the start of every message about a region.
// The rules are region.cc's (and layout.h's summary of them).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/accounting/detail/layout.h"
#include "core/accounting/region.h"

namespace faultline::accounting::detail {

// ThreadSanitizer does not model fences: under it, the seqlock's counter accesses carry the
// ordering themselves (acquire loads, release stores) and the fences go away.
#if defined(__SANITIZE_THREAD__)
inline constexpr std::memory_order counter_load = std::memory_order_acquire;
inline constexpr std::memory_order counter_store = std::memory_order_release;
inline void seqlock_fence(std::memory_order) noexcept {}
#else
inline constexpr std::memory_order counter_load = std::memory_order_relaxed;
inline constexpr std::memory_order counter_store = std::memory_order_relaxed;
inline void seqlock_fence(std::memory_order order) noexcept { std::atomic_thread_fence(order); }
#endif

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// "accounting region PATH: ", the start of every message about one region file.
inline std::string where(const std::string& path) { return "accounting region " + path + ": "; }

// --- seqlock: the read side ---------------------------------------------------------------------

/// One read of a slot's counters for `devices` devices; false when a writer was inside.
inline bool try_read_slot(const slot* s, std::uint32_t devices, slot_info& out) noexcept {
  const std::uint64_t q1 = s->seq.load(std::memory_order_acquire);
  if ((q1 & 1) != 0) return false;
  out.devices.resize(devices);
  for (std::uint32_t d = 0; d < devices; ++d) {
    counters& c = out.devices[d];
    c.total = s->counters[d][detail::c_total].load(counter_load);
    c.context = s->counters[d][detail::c_context].load(counter_load);
    c.module = s->counters[d][detail::c_module].load(counter_load);
    c.data = s->counters[d][detail::c_data].load(counter_load);
  }
  seqlock_fence(std::memory_order_acquire);
  const std::uint64_t q2 = s->seq.load(std::memory_order_relaxed);
  out.sequence = q1;
  return q1 == q2;
}

/// One device of a slot, without allocating.
inline bool try_read_device(const slot* s, std::uint32_t d, counters& c, std::uint64_t& seq) noexcept {
  const std::uint64_t q1 = s->seq.load(std::memory_order_acquire);
  if ((q1 & 1) != 0) return false;
  c.total = s->counters[d][detail::c_total].load(counter_load);
  c.context = s->counters[d][detail::c_context].load(counter_load);
  c.module = s->counters[d][detail::c_module].load(counter_load);
  c.data = s->counters[d][detail::c_data].load(counter_load);
  seqlock_fence(std::memory_order_acquire);
  seq = q1;
  return s->seq.load(std::memory_order_relaxed) == q1;
}

// --- region_file.cc -------------------------------------------------------------------------------

/// The error of a failed open_region(): refused for a directory or a symbolic link, not_found.
status open_error(int err, const std::string& path);

/// open(2) of a region file without following a symbolic link, never waiting on a FIFO; retries
/// EINTR. -1 with errno set when it fails.
int open_region(const std::string& path, int flags) noexcept;

/// What validate_fd read of a file that is a region.
struct validated {
  std::uint32_t devices = 0;
  std::uint32_t max_slots = 0;
  std::uint64_t bytes = 0;
  uid_t uid = 0;
  std::uint32_t mode = 0;
  std::uint64_t magic = 0;
  std::uint32_t abi_version = 0;
  std::uint32_t header_size = 0;
  std::uint32_t slot_size = 0;
};

/// Checks the open file `fd` before anything maps it.
result<validated> validate_fd(int fd, const std::string& path);

/// Builds a region under a temporary name and links it into place: nobody ever sees it half-built.
/// Returns the open fd of the new file, or already_exists when another process won the race.
result<int> create_region_file(const std::string& path, const options& opt);

/// invalid_argument naming the first option out of range.
status check_options(const options& opt);

}  // namespace faultline::accounting::detail
