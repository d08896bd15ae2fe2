#include "core/device/detail/ipc_registry.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "core/process_identity.h"
#include "core/host_ids.h"

namespace faultline::core::device::ipc::detail {

std::size_t page_size() noexcept { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

namespace {


constexpr std::uint32_t start_low_mask = 0xffffffffu;

std::size_t header_mapping_bytes() noexcept {
  const std::size_t page = page_size();
  return (sizeof(registry_header) + page - 1) / page * page;
}

std::uint64_t owner_word(pid_t pid, std::uint64_t start_time) noexcept {
  return static_cast<std::uint32_t>(pid) | (start_time & start_low_mask) << 32;
}

// Whether the claimer named by an owner word is alive. A slot that is ready carries the full
// start time; one still being filled in only the low half, matched against /proc's.
bool owner_alive(std::uint64_t owner, bool ready, std::uint64_t start_time) noexcept {
  const auto pid = static_cast<pid_t>(owner & 0xffffffffu);
  if (ready) return process_alive(pid, start_time);
  const std::uint64_t actual = core::process_start_time(pid);
  if (actual == 0 || (actual & start_low_mask) != owner >> 32) return false;
  return process_alive(pid, actual);
}

long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value, const timespec* timeout) noexcept {
  // Not FUTEX_PRIVATE: the word lives in a mapping shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout, nullptr, 0);
}

status closed_or_closing(pool_state s) {
  return status(errc::refused, s == pool_state::closed ? "ipc: the pool is closed" : "ipc: the pool is closing");
}

}  // namespace

std::string pool_name(std::uint64_t pool_id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "pool %#llx", static_cast<unsigned long long>(pool_id));
  return buf;
}

process_identity self_identity() noexcept {
  return {core::self_pid(), ::getpid(), core::self_start_time()};
}

bool process_alive(pid_t pid, std::uint64_t start_time) noexcept {
  return core::process_liveness(pid, start_time) == core::liveness::alive;
}

std::uint64_t handle_checksum(const handle& h) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  std::uint64_t sum = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < offsetof(handle, checksum); ++i) {
    sum ^= p[i];
    sum *= 0x100000001b3ull;
  }
  return sum;
}

result<int> fetch_descriptor(const handle& h, int fd, bool prefer_pidfd) noexcept {
  const auto source = static_cast<pid_t>(h.source_pid);
  const std::string who = "ipc: source process " + std::to_string(source);
  if (fd < 0) return status(errc::invalid_argument, who + ": the handle names no descriptor");
  if (!process_alive(source, h.source_start)) {
    return status(errc::not_found, who + " has exited (or its pid was reused): the handle can no longer be opened");
  }
  std::string tried;
  // pidfd_getfd duplicates the very open file (what a CUDA pool's descriptor needs). pidfd_open
  // takes a pid of our namespace: usable only when the source's own pid and /proc's agree, and
  // ours too (no pid namespace between them).
  const process_identity self = self_identity();
  const bool same_namespace = h.source_pid == h.source_ns_pid && self.pid == self.ns_pid;
  auto by_pidfd = [&]() -> int {
    if (!same_namespace) {
      tried += "pidfd_getfd: not tried (pid namespaces differ); ";
      return -1;
    }
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, h.source_ns_pid, 0));
    if (pidfd < 0) {
      tried += std::string("pidfd_open: ") + std::strerror(errno) + "; ";
      return -1;
    }
    // The pidfd pins the process: if it is still the one the handle names, the copy is its.
    int copy = -1;
    if (process_alive(source, h.source_start)) {
      copy = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));  // O_CLOEXEC is implied
      if (copy < 0) tried += std::string("pidfd_getfd: ") + std::strerror(errno) + "; ";
    } else {
      tried += "pidfd_open: the source exited meanwhile; ";
    }
    ::close(pidfd);
    return copy;
  };
  auto by_proc = [&]() -> int {
    const std::string path = "/proc/" + std::to_string(source) + "/fd/" + std::to_string(fd);
    int copy;
    do {
      copy = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    } while (copy < 0 && errno == EINTR);
    if (copy < 0) {
      tried += "open " + path + ": " + std::strerror(errno) + "; ";
      return -1;
    }
    // Reopening through /proc names a file; check it is still the source's (no reuse since).
    if (!process_alive(source, h.source_start)) {
      ::close(copy);
      tried += "open " + path + ": the source exited meanwhile; ";
      return -1;
    }
    return copy;
  };
  int copy = prefer_pidfd ? by_pidfd() : by_proc();
  if (copy < 0) copy = prefer_pidfd ? by_proc() : by_pidfd();
  if (copy >= 0) return copy;
  if (!tried.empty()) tried.resize(tried.size() - 2);
  if (!process_alive(source, h.source_start)) {
    return status(errc::not_found, who + " exited while its descriptor was being copied");
  }
  return status(errc::io_error, who + ": cannot copy its descriptor " + std::to_string(fd) + " (" + tried + ")");
}

// --- registry --------------------------------------------------------------------------------

std::uint64_t registry::arena_offset() noexcept {
  // Past the header, aligned to 64 KiB so arena offsets of any page size stay mappable.
  constexpr std::uint64_t align = 64 * 1024;
  return (sizeof(registry_header) + align - 1) / align * align;
}

result<std::unique_ptr<registry>> registry::create(backend_kind kind, int device, std::uint64_t pool_id,
                                                   std::size_t arena_bytes) noexcept {
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "faultline-ipc-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) return status::from_errno(errno, "ipc: memfd_create");
  const std::uint64_t total = arena_bytes == 0 ? header_mapping_bytes() : arena_offset() + arena_bytes;
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int err = errno;
    ::close(fd);
    return status::from_errno(err, "ipc: size the pool's memfd to " + std::to_string(total) + " bytes");
  }
  // Nobody, importers included, can shrink it under another's mapping (SIGBUS) or grow it.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    return status::from_errno(err, "ipc: seal the pool's memfd");
  }
  const std::size_t mapped = header_mapping_bytes();
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return status::from_errno(err, "ipc: map the pool's registry");
  }
  // The memfd starts zero-filled: every atomic is already 0 (free slots, generation 0).
  auto* hdr = static_cast<registry_header*>(p);
  const process_identity self = self_identity();
  hdr->version = registry_version;
  hdr->header_bytes = sizeof(registry_header);
  hdr->backend = static_cast<std::uint32_t>(kind);
  hdr->allocation_slots = max_allocations;
  hdr->importer_slots = max_importers;
  hdr->device = device;
  hdr->pool_id = pool_id;
  hdr->exporter_pid = self.pid;
  hdr->exporter_start = self.start_time;
  hdr->arena_offset = arena_bytes == 0 ? 0 : arena_offset();
  hdr->arena_bytes = arena_bytes;
  hdr->state.store(static_cast<std::uint32_t>(pool_state::open), std::memory_order_relaxed);
  // No fence: the memfd is new and no other process can map it before its descriptor is handed
  // out through a handle, which happens after this function returns (a system call apart).
  hdr->magic = registry_magic;
  return std::unique_ptr<registry>(new registry(fd, hdr, mapped));
}

result<std::unique_ptr<registry>> registry::attach(int fd, const handle& h) noexcept {
  auto fail = [fd, &h](errc code, std::string message) {
    ::close(fd);
    return status(code, "ipc: " + pool_name(h.pool_id) + ": " + std::move(message));
  };
  struct stat st{};
  if (::fstat(fd, &st) != 0) return fail(errc::io_error, std::string("fstat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return fail(errc::corrupt, "the handle's registry descriptor is not a memfd");
  const std::size_t mapped = header_mapping_bytes();
  if (static_cast<std::uint64_t>(st.st_size) < mapped) {
    return fail(errc::corrupt, "the registry holds " + std::to_string(st.st_size) + " bytes, fewer than a header");
  }
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(errc::io_error, std::string("map the registry: ") + std::strerror(errno));
  auto* hdr = static_cast<registry_header*>(p);
  std::string bad;
  if (hdr->magic != registry_magic) {
    bad = "bad magic: not a faultline IPC registry";
  } else if (hdr->version != registry_version || hdr->header_bytes != sizeof(registry_header) ||
             hdr->allocation_slots != max_allocations || hdr->importer_slots != max_importers) {
    bad = "registry version " + std::to_string(hdr->version) + " with a layout this build does not know";
  } else if (hdr->pool_id != h.pool_id) {
    bad = "the descriptor holds another pool's registry (the source reused the descriptor number)";
  } else if (hdr->backend != h.backend || hdr->device != h.device) {
    bad = "the registry belongs to another backend or device";
  } else if (hdr->arena_bytes != 0 &&
             (hdr->arena_offset != arena_offset() ||
              static_cast<std::uint64_t>(st.st_size) < hdr->arena_offset + hdr->arena_bytes)) {
    bad = "the arena lies outside the memfd";
  }
  if (!bad.empty()) {
    ::munmap(p, mapped);
    return fail(errc::corrupt, bad);
  }
  return std::unique_ptr<registry>(new registry(fd, hdr, mapped));
}

registry::~registry() {
  ::munmap(header_, mapped_);
  ::close(fd_);
}

pool_state registry::state() const noexcept {
  return static_cast<pool_state>(header_->state.load(std::memory_order_seq_cst));
}

result<std::uint32_t> registry::add_allocation(std::uint64_t offset, std::uint64_t bytes) noexcept {
  for (std::uint32_t i = 0; i < max_allocations; ++i) {
    allocation_record& a = header_->allocations[i];
    const std::uint64_t g = a.generation.load(std::memory_order_relaxed);
    if (g % 2 != 0) continue;
    // Only the exporter (one process, serialised by its pool) writes this table.
    a.offset = offset;
    a.bytes = bytes;
    a.generation.store(g + 1, std::memory_order_seq_cst);
    return i;
  }
  return status(errc::out_of_memory,
                "ipc: the pool's allocation table is full (" + std::to_string(max_allocations) + " allocations)");
}

status registry::remove_allocation(std::uint32_t slot) noexcept {
  allocation_record& a = header_->allocations[slot];
  const std::uint64_t g = a.generation.load(std::memory_order_relaxed);
  a.generation.store(g + 1, std::memory_order_seq_cst);  // freed: importers back off from now on
  auto held = holders(slot);
  if (held.empty()) return {};
  a.generation.store(g, std::memory_order_seq_cst);
  return status(errc::busy, "ipc: allocation " + std::to_string(slot) + " is imported by " + describe(held) +
                                "; it is not freed while an importer may read it");
}

void registry::drop_allocation(std::uint32_t slot) noexcept {
  allocation_record& a = header_->allocations[slot];
  const std::uint64_t g = a.generation.load(std::memory_order_relaxed);
  if (g % 2 != 0) a.generation.store(g + 1, std::memory_order_seq_cst);
}

result<std::uint32_t> registry::register_importer(std::uint32_t allocation, std::uint64_t generation) noexcept {
  if (allocation >= max_allocations) {
    return status(errc::invalid_argument, "ipc: the handle names allocation " + std::to_string(allocation) +
                                              ", beyond the pool's table");
  }
  if (const pool_state s = state(); s != pool_state::open) return closed_or_closing(s);
  const process_identity self = self_identity();
  const std::uint64_t me = owner_word(self.pid, self.start_time);
  for (std::uint32_t i = 0; i < max_importers; ++i) {
    importer_record& r = header_->importers[i];
    std::uint64_t expected = 0;
    if (!r.owner.compare_exchange_strong(expected, me, std::memory_order_acq_rel)) continue;
    r.ns_pid = static_cast<std::uint32_t>(self.ns_pid);
    r.start_time = self.start_time;
    r.allocation = allocation;
    r.generation = generation;
    r.ready.store(1, std::memory_order_seq_cst);
    // The handshake's importer side: published first, then read what a closer or a free changes.
    const pool_state s = state();
    const std::uint64_t now = header_->allocations[allocation].generation.load(std::memory_order_seq_cst);
    if (s != pool_state::open) {
      unregister_importer(i);
      return closed_or_closing(s);
    }
    if (now != generation || generation % 2 == 0) {
      unregister_importer(i);
      return status(errc::not_found, "ipc: allocation " + std::to_string(allocation) + " of generation " +
                                         std::to_string(generation) + " was freed (now generation " +
                                         std::to_string(now) + ")");
    }
    return i;
  }
  return status(errc::out_of_memory,
                "ipc: every importer slot of the pool is taken (" + std::to_string(max_importers) + ")");
}

void registry::unregister_importer(std::uint32_t slot) noexcept {
  importer_record& r = header_->importers[slot];
  r.ready.store(0, std::memory_order_release);
  r.owner.store(0, std::memory_order_seq_cst);
  header_->wake.fetch_add(1, std::memory_order_seq_cst);
  futex(header_->wake, FUTEX_WAKE, INT32_MAX, nullptr);
}

std::vector<holder> registry::holders(std::optional<std::uint32_t> allocation) noexcept {
  std::vector<holder> out;
  for (std::uint32_t i = 0; i < max_importers; ++i) {
    importer_record& r = header_->importers[i];
    const std::uint64_t owner = r.owner.load(std::memory_order_seq_cst);
    if (owner == 0) continue;
    const bool ready = r.ready.load(std::memory_order_seq_cst) != 0;
    holder h;
    h.pid = static_cast<pid_t>(owner & 0xffffffffu);
    if (ready) {
      h.ns_pid = static_cast<pid_t>(r.ns_pid);
      h.start_time = r.start_time;
      h.allocation = r.allocation;
    }
    // A slot released and claimed again meanwhile: its fields may mix two owners; skip it (the
    // new owner is mid-registration and checks the state and generation itself).
    if (r.owner.load(std::memory_order_seq_cst) != owner) continue;
    if (!owner_alive(owner, ready, h.start_time)) {
      // Dead: reclaim the slot. Only the exporter scans (serialised by its pool), and nobody can
      // claim the slot before the owner word is 0, so clearing `ready` first races with no one.
      std::uint64_t expected = owner;
      r.ready.store(0, std::memory_order_relaxed);
      if (r.owner.compare_exchange_strong(expected, 0, std::memory_order_seq_cst)) {
        header_->wake.fetch_add(1, std::memory_order_seq_cst);
      }
      continue;
    }
    // Mid-registration: not yet an importer of anything (it backs off if we are closing).
    if (!ready) continue;
    if (allocation && h.allocation != *allocation) continue;
    out.push_back(h);
  }
  return out;
}

void registry::begin_close() noexcept {
  std::uint32_t expected = static_cast<std::uint32_t>(pool_state::open);
  header_->state.compare_exchange_strong(expected, static_cast<std::uint32_t>(pool_state::closing),
                                         std::memory_order_seq_cst);
}

void registry::mark_closed() noexcept {
  header_->state.store(static_cast<std::uint32_t>(pool_state::closed), std::memory_order_seq_cst);
}

status registry::wait_for_importers(std::chrono::milliseconds timeout) noexcept {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = timeout <= std::chrono::milliseconds::zero() ? start : start + timeout;
  for (;;) {
    const std::uint32_t seen = header_->wake.load(std::memory_order_seq_cst);
    auto held = holders();
    if (held.empty()) return {};
    const auto now = clock::now();
    if (now >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
      std::string message = "ipc: " + pool_name(header_->pool_id) + ": " + std::to_string(held.size()) +
                            (held.size() == 1 ? " importer still holds" : " importers still hold") +
                            " handles after " + std::to_string(waited) + " ms: " + describe(held);
      return status(timeout <= std::chrono::milliseconds::zero() ? errc::busy : errc::timeout, std::move(message));
    }
    // Sleep until a release bumps the word, or one liveness slice (dead importers never wake us).
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    const auto slice = std::min<std::chrono::nanoseconds>(left, liveness_slice);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(slice.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(slice.count() % 1000000000);
    futex(header_->wake, FUTEX_WAIT, seen, &ts);
  }
}

}  // namespace faultline::core::device::ipc::detail
