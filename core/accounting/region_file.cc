// The region's file: opened without following links or waiting on a FIFO, validated from a
// plain pread() before anything maps it, created whole under a temporary name and linked into
// place, and the tools that read a file by path (validate, inspect) without locking it.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/accounting/detail/layout.h"
#include "core/accounting/detail/region_internal.h"
#include "core/accounting/region.h"
#include "core/process_identity.h"

namespace faultline::accounting {

namespace {

using clock_type = std::chrono::steady_clock;
using detail::counter_load;
using detail::header;
using detail::slot;
using detail::where;

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

std::atomic<std::uint64_t> temp_counter{0};

}  // namespace

namespace detail {

status open_error(int err, const std::string& path) {
  if (err == EISDIR) return status(errc::refused, where(path) + "is not a regular file");
  if (err == ELOOP) {
    return status(errc::refused, where(path) + "is a symbolic link; refusing to follow it (O_NOFOLLOW)");
  }
  if (err == ENOENT) return status(errc::not_found, where(path) + "does not exist");
  return status::from_errno(err, "open " + path);
}

int open_region(const std::string& path, int flags) noexcept {
  int fd;
  do {
    // O_NONBLOCK: opening a FIFO for reading must not wait for a writer (a region is never one;
    // validate_fd says so). For a regular file it changes nothing.
    fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

result<validated> validate_fd(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return status::from_errno(errno, "fstat " + path);
  validated v;
  v.bytes = static_cast<std::uint64_t>(st.st_size);
  v.uid = st.st_uid;
  v.mode = st.st_mode & 07777;
  if (!S_ISREG(st.st_mode)) return status(errc::refused, where(path) + "is not a regular file");
  if (st.st_uid != ::getuid()) {
    return status(errc::refused, where(path) + "is owned by uid " + std::to_string(st.st_uid) +
                                     ", not by this process's user (uid " + std::to_string(::getuid()) + ")");
  }
  if (v.bytes == 0) return status(errc::corrupt, where(path) + "is empty (0 bytes): not an accounting region");
  if (v.bytes < detail::fixed_prefix_bytes) {
    return status(errc::corrupt, where(path) + "is truncated: " + std::to_string(v.bytes) +
                                     " bytes, shorter than the region header");
  }
  unsigned char prefix[detail::fixed_prefix_bytes];
  std::size_t got = 0;
  while (got < sizeof prefix) {
    const ssize_t n = ::pread(fd, prefix + got, sizeof prefix - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return status::from_errno(errno, "read " + path);
    if (n == 0) return status(errc::corrupt, where(path) + "is truncated while being read");
    got += static_cast<std::size_t>(n);
  }
  std::uint32_t initialised = 0;
  std::memcpy(&v.magic, prefix + offsetof(header, magic), 8);
  std::memcpy(&v.abi_version, prefix + offsetof(header, abi_version), 4);
  std::memcpy(&v.header_size, prefix + offsetof(header, header_size), 4);
  std::memcpy(&v.slot_size, prefix + offsetof(header, slot_size), 4);
  std::memcpy(&v.devices, prefix + offsetof(header, device_count), 4);
  std::memcpy(&v.max_slots, prefix + offsetof(header, max_slots), 4);
  std::memcpy(&initialised, prefix + offsetof(header, initialised), 4);
  if (v.magic != detail::region_magic) {
    return status(errc::corrupt, where(path) + "has wrong magic " + hex(v.magic) +
                                     ": not a faultline accounting region (expected " + hex(detail::region_magic) + ")");
  }
  if (v.abi_version != detail::layout_abi_version) {
    return status(errc::corrupt, where(path) + "has ABI version " + std::to_string(v.abi_version) +
                                     "; this build reads version " + std::to_string(detail::layout_abi_version));
  }
  if (v.header_size != sizeof(header) || v.slot_size != sizeof(slot)) {
    return status(errc::corrupt, where(path) + "has header/slot sizes " + std::to_string(v.header_size) + "/" +
                                     std::to_string(v.slot_size) + "; this build uses " +
                                     std::to_string(sizeof(header)) + "/" + std::to_string(sizeof(slot)));
  }
  if (v.devices == 0 || v.devices > max_devices) {
    return status(errc::corrupt, where(path) + "has device count " + std::to_string(v.devices) + " (must be 1.." +
                                     std::to_string(max_devices) + ")");
  }
  if (v.max_slots == 0 || v.max_slots > max_slots_limit) {
    return status(errc::corrupt, where(path) + "has slot count " + std::to_string(v.max_slots) + " (must be 1.." +
                                     std::to_string(max_slots_limit) + ")");
  }
  const std::uint64_t expected = detail::region_bytes(v.max_slots);
  if (v.bytes < expected) {
    return status(errc::corrupt, where(path) + "is truncated: " + std::to_string(v.bytes) + " bytes, expected " +
                                     std::to_string(expected) + " for " + std::to_string(v.max_slots) + " slots");
  }
  if (v.bytes != expected) {
    return status(errc::corrupt, where(path) + "has " + std::to_string(v.bytes) + " bytes, expected " +
                                     std::to_string(expected) + " for " + std::to_string(v.max_slots) + " slots");
  }
  if (initialised != detail::initialised_value) {
    return status(errc::corrupt, where(path) + "was never fully initialised (its creator did not finish)");
  }
  return v;
}

result<int> create_region_file(const std::string& path, const options& opt) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(temp_counter.fetch_add(1, std::memory_order_relaxed));
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return status::from_errno(errno, "create " + tmp);
  auto fail = [&](status st) {
    ::unlink(tmp.c_str());
    ::close(fd);
    return st;
  };
  if (::fchmod(fd, 0600) != 0) return fail(status::from_errno(errno, "fchmod " + tmp));
  const std::size_t bytes = detail::region_bytes(opt.max_slots);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail(status::from_errno(errno, "ftruncate " + tmp));
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(status::from_errno(errno, "mmap " + tmp));
  auto* h = new (base) header{};
  h->magic = detail::region_magic;
  h->abi_version = detail::layout_abi_version;
  h->header_size = sizeof(header);
  h->slot_size = sizeof(slot);
  h->device_count = opt.devices;
  h->max_slots = opt.max_slots;
  for (std::uint32_t d = 0; d < max_devices; ++d) {
    h->limit_bytes[d] = d < opt.limits_bytes.size() ? opt.limits_bytes[d] : no_limit;
  }
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  const int rc = pthread_mutex_init(&h->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) {
    ::munmap(base, bytes);
    return fail(status::from_errno(rc, "pthread_mutex_init in " + tmp));
  }
  for (std::uint32_t i = 0; i < opt.max_slots; ++i) new (detail::slot_at(h, i)) slot{};
  h->initialised.store(detail::initialised_value, std::memory_order_release);
  ::munmap(base, bytes);
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    ::close(fd);
    if (err == EEXIST) return status(errc::already_exists, where(path) + "created by another process meanwhile");
    return status::from_errno(err, "link " + tmp + " to " + path);
  }
  ::unlink(tmp.c_str());
  return fd;
}

status check_options(const options& opt) {
  if (opt.devices == 0 || opt.devices > max_devices) {
    return status(errc::invalid_argument,
                  "accounting options: devices=" + std::to_string(opt.devices) + " (must be 1.." +
                      std::to_string(max_devices) + ")");
  }
  if (opt.max_slots == 0 || opt.max_slots > max_slots_limit) {
    return status(errc::invalid_argument, "accounting options: max_slots=" + std::to_string(opt.max_slots) +
                                              " (must be 1.." + std::to_string(max_slots_limit) + ")");
  }
  if (opt.limits_bytes.size() > opt.devices) {
    return status(errc::invalid_argument, "accounting options: " + std::to_string(opt.limits_bytes.size()) +
                                              " limits for " + std::to_string(opt.devices) + " devices");
  }
  if (opt.lock_slice.count() <= 0 || opt.lock_bound.count() < 0 || opt.reader_bound.count() < 0) {
    return status(errc::invalid_argument, "accounting options: lock_slice must be positive, bounds not negative");
  }
  return status::ok();
}

}  // namespace detail

status validate(const std::string& path) {
  const int fd = detail::open_region(path, O_RDONLY);
  if (fd < 0) return detail::open_error(errno, path);
  auto v = detail::validate_fd(fd, path);
  ::close(fd);
  return v ? status::ok() : v.error();
}

result<region_report> inspect(const std::string& path) {
  const int fd = detail::open_region(path, O_RDONLY);
  if (fd < 0) return detail::open_error(errno, path);
  auto v = detail::validate_fd(fd, path);
  if (!v) {
    ::close(fd);
    return v.error();
  }
  void* base = ::mmap(nullptr, v->bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (base == MAP_FAILED) return status::from_errno(map_err, "mmap " + path);
  const auto* h = static_cast<const header*>(base);

  region_report rep;
  rep.path = path;
  rep.file_bytes = v->bytes;
  rep.owner_uid = v->uid;
  rep.mode = v->mode;
  rep.magic = v->magic;
  rep.abi_version = v->abi_version;
  rep.header_size = v->header_size;
  rep.slot_size = v->slot_size;
  rep.device_count = v->devices;
  rep.max_slots = v->max_slots;
  const std::uint32_t devices = v->devices;
  rep.limits_bytes.assign(h->limit_bytes, h->limit_bytes + devices);
  for (std::uint32_t d = 0; d < devices; ++d) {
    rep.aggregate_bytes.push_back(h->aggregate[d].load(std::memory_order_acquire));
    rep.utilisation_percent.push_back(h->utilisation[d].load(std::memory_order_relaxed));
  }
  rep.live_sum.assign(devices, counters{});
  rep.occupancy = h->occupancy.load(std::memory_order_acquire);
  rep.lock_owner_pid = h->lock_owner_pid.load(std::memory_order_acquire);
  rep.repairs = h->repairs.load(std::memory_order_relaxed);
  rep.occupancy_violations = h->occupancy_violations.load(std::memory_order_relaxed);
  rep.slots_reclaimed = h->slots_reclaimed.load(std::memory_order_relaxed);

  for (std::uint32_t i = 0; i < v->max_slots; ++i) {
    const slot* s = detail::slot_at(h, i);
    slot_info info;
    info.index = i;
    info.pid = s->pid.load(std::memory_order_acquire);
    if (info.pid == 0) continue;
    info.start_time = s->start_time.load(std::memory_order_relaxed);
    bool got = false;
    const auto deadline = clock_type::now() + std::chrono::milliseconds(20);
    for (int n = 0; !got; ++n) {
      got = detail::try_read_slot(s, devices, info);
      if (got || clock_type::now() >= deadline) break;
      if (n > 64) sched_yield();
    }
    info.state = core::process_liveness(info.pid, info.start_time) == core::liveness::alive ? slot_state::alive
                                                                                                 : slot_state::dead;
    if (!got) {
      info.mid_update = true;
      info.sequence = s->seq.load(std::memory_order_relaxed);
      info.devices.resize(devices);
      for (std::uint32_t d = 0; d < devices; ++d) {
        info.devices[d] = counters{s->counters[d][detail::c_total].load(counter_load),
                                   s->counters[d][detail::c_context].load(counter_load),
                                   s->counters[d][detail::c_module].load(counter_load),
                                   s->counters[d][detail::c_data].load(counter_load)};
      }
      if (info.state == slot_state::dead) {
        rep.no_dead_odd_slot = false;
        rep.problems.push_back("slot " + std::to_string(i) + " was left mid-update by dead pid " +
                               std::to_string(info.pid));
      }
    } else {
      for (std::uint32_t d = 0; d < devices; ++d) {
        if (!info.devices[d].consistent()) {
          rep.slots_consistent = false;
          rep.problems.push_back("slot " + std::to_string(i) + " device " + std::to_string(d) + ": total " +
                                 std::to_string(info.devices[d].total) + " != context+module+data");
        }
      }
      if (info.state == slot_state::alive) {
        for (std::uint32_t d = 0; d < devices; ++d) {
          rep.live_sum[d].total += info.devices[d].total;
          rep.live_sum[d].context += info.devices[d].context;
          rep.live_sum[d].module += info.devices[d].module;
          rep.live_sum[d].data += info.devices[d].data;
        }
      }
    }
    rep.slots.push_back(std::move(info));
  }
  for (std::uint32_t d = 0; d < devices; ++d) {
    if (rep.aggregate_bytes[d] != rep.live_sum[d].total) {
      rep.aggregates_match = false;
      rep.problems.push_back("device " + std::to_string(d) + ": aggregate " + std::to_string(rep.aggregate_bytes[d]) +
                             " != " + std::to_string(rep.live_sum[d].total) + " charged by live slots");
    }
  }
  if (rep.occupancy != 0) {
    rep.occupancy_zero = false;
    rep.problems.push_back("occupancy " + std::to_string(rep.occupancy) + " (lock holder pid " +
                           std::to_string(rep.lock_owner_pid) + ")");
  }
  ::munmap(base, v->bytes);
  return rep;
}

}  // namespace faultline::accounting
