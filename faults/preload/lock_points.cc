// libfaultline_lock_points.so: the lock/ points (lock_points.h). Each wrapper checks one flag
// first: without a lock/ item it calls glibc's function at once (the library is preloaded only
// when there is one, so that check is the whole cost). With one, a shared object's call passes
// the point before (wait, release) or after (acquired) glibc's function.
#include "faults/preload/lock_points.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "faults/families.h"
#include "faults/preload/detail/next_symbol.h"
#include "faults/preload/detail/plan_table.h"
#include "faults/preload/preload_points.h"

namespace {

namespace detail = faultline::agent::detail;
namespace preload = faultline::agent::preload;

constexpr unsigned max_spec = 4096;
char spec_copy[max_spec + 1];
bool active = false;        // a lock/ item exists and a run directory is set
bool with_filters = false;  // a lock/ item names a function: callers' frames are read
detail::plan_table<16> items;

// glibc's semaphore keeps its "private" word after its 64-bit value: 0 for a thread-private one
// (LLL_PRIVATE), FUTEX_PRIVATE_FLAG (128, LLL_SHARED) for a shared one; a mutex keeps
// PTHREAD_MUTEX_PSHARED_BIT (128) in __kind.
bool shared(const sem_t* s) noexcept {
  int flag = 0;
  std::memcpy(&flag, reinterpret_cast<const char*>(s) + 8, sizeof flag);
  return flag != 0;
}
bool shared(const pthread_mutex_t* m) noexcept { return (m->__data.__kind & 128) != 0; }

// The names of the caller's first frames (from the dynamic symbol tables), for filters.
struct frames {
  static constexpr int depth = 10;
  const char* names[depth + 1] = {};
  int count = 0;
};

_Unwind_Reason_Code collect(_Unwind_Context* context, void* arg) {
  auto* f = static_cast<frames*>(arg);
  const std::uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0 || f->count == frames::depth) return _URC_END_OF_STACK;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(ip - 1), &info) != 0 && info.dli_sname != nullptr) {
    f->names[f->count++] = info.dli_sname;
  }
  return _URC_NO_REASON;
}

// One hit of `point`: the errno to fail with (wait points), else 0.
int hit(const char* point) noexcept {
  frames f;
  if (with_filters) _Unwind_Backtrace(&collect, &f);
  const int item = items.find(spec_copy, point, with_filters ? f.names : nullptr);
  if (item < 0) return 0;
  const detail::point_term t = items.hit(item, &preload::draw, &preload::record_reached);
  if (t.action == detail::point_action::fail) return t.code;
  preload::act(t, point);
  return 0;
}

template <class F>
F next(const char* name) noexcept {
  return reinterpret_cast<F>(detail::next_symbol(name));
}

using sem_fn = int (*)(sem_t*);
using sem_timed_fn = int (*)(sem_t*, const timespec*);
using sem_clock_fn = int (*)(sem_t*, clockid_t, const timespec*);
using mutex_fn = int (*)(pthread_mutex_t*);
using mutex_timed_fn = int (*)(pthread_mutex_t*, const timespec*);
using mutex_clock_fn = int (*)(pthread_mutex_t*, clockid_t, const timespec*);
using flock_fn = int (*)(int, int);
using lockf_fn = int (*)(int, int, off_t);
using fcntl_fn = int (*)(int, int, ...);

struct real_functions {
  sem_fn sem_wait, sem_trywait, sem_post;
  sem_timed_fn sem_timedwait;
  sem_clock_fn sem_clockwait;
  mutex_fn lock, trylock, unlock;
  mutex_timed_fn timedlock;
  mutex_clock_fn clocklock;
  flock_fn flock;
  lockf_fn lockf;
  fcntl_fn fcntl, fcntl64;
};
real_functions real{};
std::atomic<bool> resolved{false};

void resolve() noexcept {
  if (resolved.load(std::memory_order_acquire)) return;
  real.sem_wait = next<sem_fn>("sem_wait");
  real.sem_trywait = next<sem_fn>("sem_trywait");
  real.sem_post = next<sem_fn>("sem_post");
  real.sem_timedwait = next<sem_timed_fn>("sem_timedwait");
  real.sem_clockwait = next<sem_clock_fn>("sem_clockwait");
  real.lock = next<mutex_fn>("pthread_mutex_lock");
  real.trylock = next<mutex_fn>("pthread_mutex_trylock");
  real.unlock = next<mutex_fn>("pthread_mutex_unlock");
  real.timedlock = next<mutex_timed_fn>("pthread_mutex_timedlock");
  real.clocklock = next<mutex_clock_fn>("pthread_mutex_clocklock");
  real.flock = next<flock_fn>("flock");
  real.lockf = next<lockf_fn>("lockf");
  real.fcntl = next<fcntl_fn>("fcntl");
  real.fcntl64 = next<fcntl_fn>("fcntl64");
  resolved.store(true, std::memory_order_release);
}

[[gnu::constructor]] void install() {
  resolve();
  const char* spec = std::getenv("FAULTLINE_FAULTS");
  const char* dir = std::getenv("FAULTLINE_RUN_DIR");
  if (spec == nullptr || dir == nullptr || *dir == '\0' || std::strlen(spec) > max_spec) return;
  if (!faultline::faults::spec_reaches(spec, faultline::faults::injector::lock)) return;
  std::memcpy(spec_copy, spec, std::strlen(spec) + 1);
  // A filter on a lock item: "lock/...@name". Other items' filters do not make frames worth reading.
  for (const char* at = std::strstr(spec_copy, "lock/"); at != nullptr; at = std::strstr(at + 1, "lock/")) {
    const char* end = std::strpbrk(at, "=;");
    const char* filter = std::strchr(at, '@');
    if (filter != nullptr && (end == nullptr || filter < end)) with_filters = true;
  }
  preload::open_points_file(dir);
  preload::seed_points(std::getenv("FAULTLINE_SEED"));
  active = true;
}

// A sem_ or pthread_mutex_ call that waits: wait point, the call, acquired point.
template <class Object, class Call>
int waiting(Object* o, const char* wait_point, const char* acquired_point, bool errno_style, Call call) {
  if (!active || o == nullptr || !shared(o)) return call();
  if (const int err = hit(wait_point); err != 0) {
    if (!errno_style) return err;
    errno = err;
    return -1;
  }
  const int r = call();
  if (r == 0 || (!errno_style && r == EOWNERDEAD)) (void)hit(acquired_point);
  return r;
}

// A try: no wait, the acquired point when it took the lock.
template <class Object, class Call>
int trying(Object* o, const char* acquired_point, bool errno_style, Call call) {
  const int r = call();
  if (active && o != nullptr && shared(o) && (r == 0 || (!errno_style && r == EOWNERDEAD))) (void)hit(acquired_point);
  return r;
}

// A release: the point, then the call.
template <class Object, class Call>
int releasing(Object* o, const char* point, Call call) {
  if (active && o != nullptr && shared(o)) (void)hit(point);
  return call();
}

// A file lock request (flock, lockf, fcntl) by what it does.
enum class file_op { release, wait, attempt, other };

int file_lock(file_op op, auto call) {
  if (!active || op == file_op::other) return call();
  if (op == file_op::release) {
    (void)hit("lock/file/release");
    return call();
  }
  if (op == file_op::wait) {
    if (const int err = hit("lock/file/wait"); err != 0) {
      errno = err;
      return -1;
    }
  }
  const int r = call();
  if (r == 0) (void)hit("lock/file/acquired");
  return r;
}

file_op fcntl_op(int cmd, void* arg) {
  const bool wait = cmd == F_SETLKW || cmd == F_OFD_SETLKW;
  if (cmd != F_SETLK && cmd != F_OFD_SETLK && !wait) return file_op::other;
  const auto* l = static_cast<const struct flock*>(arg);
  if (l == nullptr) return file_op::other;
  if (l->l_type == F_UNLCK) return file_op::release;
  return wait ? file_op::wait : file_op::attempt;
}

}  // namespace

#define FAULTLINE_EXPORT extern "C" [[gnu::visibility("default")]]

FAULTLINE_EXPORT int sem_wait(sem_t* s) {
  resolve();
  return waiting(s, "lock/sem/wait", "lock/sem/acquired", true, [&] { return real.sem_wait(s); });
}
FAULTLINE_EXPORT int sem_timedwait(sem_t* s, const timespec* t) {
  resolve();
  return waiting(s, "lock/sem/wait", "lock/sem/acquired", true, [&] { return real.sem_timedwait(s, t); });
}
FAULTLINE_EXPORT int sem_clockwait(sem_t* s, clockid_t c, const timespec* t) {
  resolve();
  return waiting(s, "lock/sem/wait", "lock/sem/acquired", true, [&] { return real.sem_clockwait(s, c, t); });
}
FAULTLINE_EXPORT int sem_trywait(sem_t* s) {
  resolve();
  return trying(s, "lock/sem/acquired", true, [&] { return real.sem_trywait(s); });
}
FAULTLINE_EXPORT int sem_post(sem_t* s) {
  resolve();
  return releasing(s, "lock/sem/release", [&] { return real.sem_post(s); });
}
FAULTLINE_EXPORT int pthread_mutex_lock(pthread_mutex_t* m) {
  resolve();
  return waiting(m, "lock/mutex/wait", "lock/mutex/acquired", false, [&] { return real.lock(m); });
}
FAULTLINE_EXPORT int pthread_mutex_timedlock(pthread_mutex_t* m, const timespec* t) {
  resolve();
  return waiting(m, "lock/mutex/wait", "lock/mutex/acquired", false, [&] { return real.timedlock(m, t); });
}
FAULTLINE_EXPORT int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const timespec* t) {
  resolve();
  return waiting(m, "lock/mutex/wait", "lock/mutex/acquired", false, [&] { return real.clocklock(m, c, t); });
}
FAULTLINE_EXPORT int pthread_mutex_trylock(pthread_mutex_t* m) {
  resolve();
  return trying(m, "lock/mutex/acquired", false, [&] { return real.trylock(m); });
}
FAULTLINE_EXPORT int pthread_mutex_unlock(pthread_mutex_t* m) {
  resolve();
  return releasing(m, "lock/mutex/release", [&] { return real.unlock(m); });
}
FAULTLINE_EXPORT int flock(int fd, int op) {
  resolve();
  const file_op what = (op & LOCK_UN) != 0 ? file_op::release
                       : (op & (LOCK_SH | LOCK_EX)) != 0 ? ((op & LOCK_NB) != 0 ? file_op::attempt : file_op::wait)
                                                         : file_op::other;
  return file_lock(what, [&] { return real.flock(fd, op); });
}
FAULTLINE_EXPORT int lockf(int fd, int cmd, off_t len) {
  resolve();
  const file_op what = cmd == F_ULOCK ? file_op::release
                       : cmd == F_LOCK ? file_op::wait
                       : cmd == F_TLOCK ? file_op::attempt
                                        : file_op::other;
  return file_lock(what, [&] { return real.lockf(fd, cmd, len); });
}
// fcntl's third argument is an int or a pointer; both travel in one register.
FAULTLINE_EXPORT int fcntl(int fd, int cmd, ...) {
  resolve();
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return file_lock(fcntl_op(cmd, arg), [&] { return real.fcntl(fd, cmd, arg); });
}
FAULTLINE_EXPORT int fcntl64(int fd, int cmd, ...) {
  resolve();
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return file_lock(fcntl_op(cmd, arg), [&] { return real.fcntl64 != nullptr ? real.fcntl64(fd, cmd, arg) : real.fcntl(fd, cmd, arg); });
}
