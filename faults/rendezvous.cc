#include "faults/rendezvous.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "faults/spec.h"

namespace faultline::faults {

namespace {

using core::errc;
using core::status;
using clock = std::chrono::steady_clock;

// Long enough to be cheap, short enough that a waiter on an unlinked object moves on quickly.
constexpr auto recheck_interval = std::chrono::milliseconds(100);
constexpr std::size_t object_bytes = 64;

// A zero-filled object is a valid empty rendezvous, so creation needs no initialisation step
// and concurrent creators cannot race on it.
struct shared_state {
  std::atomic<std::uint32_t> waiter;  // 0, or the thread id of the party waiting
};
static_assert(sizeof(shared_state) <= object_bytes);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

std::uint32_t* futex_word(shared_state* s) {
  // The futex syscall works on the 32-bit word that std::atomic<uint32_t> wraps (lock-free, same
  // size and alignment on Linux).
  return reinterpret_cast<std::uint32_t*>(&s->waiter);
}

void futex_wait(shared_state* s, std::uint32_t expected, clock::duration slice) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // Shared (not FUTEX_PRIVATE): the word may be mapped in several processes. EINTR, EAGAIN
  // (value already changed) and ETIMEDOUT all just send the caller round its loop again.
  syscall(SYS_futex, futex_word(s), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(shared_state* s) { syscall(SYS_futex, futex_word(s), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

bool thread_alive(std::uint32_t tid) {
  // kill() accepts any thread id on Linux; EPERM means it exists under another user.
  return ::kill(static_cast<pid_t>(tid), 0) == 0 || errno == EPERM;
}

class mapped_object {
 public:
  mapped_object() = default;
  mapped_object(const mapped_object&) = delete;
  mapped_object& operator=(const mapped_object&) = delete;
  ~mapped_object() {
    if (state_ != nullptr) ::munmap(state_, object_bytes);
    if (fd_ >= 0) ::close(fd_);
  }

  status open(const std::string& object_name) {
    do {
      fd_ = ::shm_open(object_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) return status::from_errno(errno, "rendezvous: shm_open " + object_name);
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return status::from_errno(errno, "rendezvous: fstat " + object_name);
    if (st.st_uid != ::geteuid()) {
      return status(errc::io_error, "rendezvous: " + object_name + " belongs to uid " + std::to_string(st.st_uid));
    }
    // Extending to the same size from two processes at once is harmless: a truncate to the
    // current size changes nothing, so a word already written survives.
    if (static_cast<std::size_t>(st.st_size) < object_bytes && ::ftruncate(fd_, object_bytes) != 0) {
      return status::from_errno(errno, "rendezvous: ftruncate " + object_name);
    }
    void* p = ::mmap(nullptr, object_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return status::from_errno(errno, "rendezvous: mmap " + object_name);
    state_ = static_cast<shared_state*>(p);
    return status::ok();
  }

  [[nodiscard]] shared_state* state() const { return state_; }

  // Whether this object is still the one the name resolves to (someone may have unlinked it).
  [[nodiscard]] bool linked() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && st.st_nlink > 0;
  }

 private:
  int fd_ = -1;
  shared_state* state_ = nullptr;
};

enum class arrival { met, timed_out, moved };

// Unlinks the name once a meeting is over (or abandoned) so /dev/shm is left clean. Should the
// name already point at a newer object, its waiter notices the unlink and moves on.
void retire(const mapped_object& obj, const std::string& object_name) {
  if (obj.linked()) ::shm_unlink(object_name.c_str());
}

arrival wait_for_partner(const mapped_object& obj, const std::string& object_name, std::uint32_t self,
                         clock::time_point deadline) {
  shared_state* s = obj.state();
  for (;;) {
    if (s->waiter.load(std::memory_order_acquire) != self) return arrival::met;
    auto now = clock::now();
    std::uint32_t expected = self;
    if (now >= deadline) {
      if (!s->waiter.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return arrival::met;
      retire(obj, object_name);
      return arrival::timed_out;
    }
    if (!obj.linked()) {
      if (!s->waiter.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return arrival::met;
      return arrival::moved;
    }
    futex_wait(s, self, std::min<clock::duration>(deadline - now, recheck_interval));
  }
}

arrival arrive(const mapped_object& obj, const std::string& object_name, std::uint32_t self,
               clock::time_point deadline) {
  shared_state* s = obj.state();
  for (;;) {
    std::uint32_t seen = s->waiter.load(std::memory_order_acquire);
    if (seen == 0) {
      if (s->waiter.compare_exchange_strong(seen, self, std::memory_order_acq_rel)) {
        return wait_for_partner(obj, object_name, self, deadline);
      }
      continue;
    }
    if (seen == self || !thread_alive(seen)) {
      // A waiter that died (or our own id left behind by a dead thread whose id we inherited)
      // is no partner: clear it and take the first place ourselves.
      s->waiter.compare_exchange_strong(seen, 0, std::memory_order_acq_rel);
      continue;
    }
    if (s->waiter.compare_exchange_strong(seen, 0, std::memory_order_acq_rel)) {
      // The waiter is released by the exchange (it sees waiter != itself, whether or not the
      // name is still linked); the name goes before it is woken, so a woken party that crashes at
      // once leaves nothing in /dev/shm.
      retire(obj, object_name);
      futex_wake_all(s);
      return arrival::met;
    }
  }
}

}  // namespace

std::string rendezvous_object_name(std::string_view name) {
  return "/faultline-rv-" + std::to_string(::geteuid()) + "-" + std::string(name);
}

status rendezvous(std::string_view name, std::chrono::nanoseconds timeout) noexcept {
  if (name.empty() || name.size() > max_rendezvous_name_size) {
    return status(errc::invalid_argument, "rendezvous: a name has 1 to " + std::to_string(max_rendezvous_name_size) +
                                              " characters, got " + std::to_string(name.size()));
  }
  for (char c : name) {
    if (!valid_name_char(c)) {
      return status(errc::invalid_argument,
                    "rendezvous: name '" + std::string(name) + "' may use only letters, digits, '_', '.', '-'");
    }
  }
  if (timeout.count() < 0) return status(errc::invalid_argument, "rendezvous: negative timeout");

  const auto deadline = clock::now() + timeout;
  const auto self = static_cast<std::uint32_t>(::gettid());
  const std::string object_name = rendezvous_object_name(name);
  for (;;) {
    mapped_object obj;
    if (auto s = obj.open(object_name); !s) return s;
    switch (arrive(obj, object_name, self, deadline)) {
      case arrival::met: return status::ok();
      case arrival::timed_out:
        return status(errc::timeout, "rendezvous " + std::string(name) + ": no partner within " +
                                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                                         " ms");
      case arrival::moved: break;  // reopen: the name now resolves to a fresh object
    }
  }
}

}  // namespace faultline::faults
