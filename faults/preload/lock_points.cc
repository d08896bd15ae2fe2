// libfaultline_lock_points.so: the lock/ points (lock_points.h). Each wrapper checks one flag
// first: without a lock/ item it calls glibc's function at once (the library is preloaded only
// when there is one, so that check is the whole cost). With one, a shared object's call passes
// the point before (wait, release) or after (acquired) glibc's function.
#include "faults/preload/lock_points.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "faults/families.h"
#include "faults/preload/detail/elf_symbols.h"
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

// The functions lock/ filters name, found as fn/ points find theirs (fn_points.cc): in the ELF
// symbol tables (.symtab, else .dynsym) of the program and its libraries, so that static and
// hidden functions are seen (dladdr sees exported ones only). Each loaded module is read once,
// when first met (all of them at install, a dlopen'ed one when a frame first falls in it); the
// hot path only compares a frame's address with the spans found, and never allocates.
constexpr unsigned max_filters = 16;
constexpr unsigned max_filter_chars = 127;
constexpr unsigned max_spans = 256;
constexpr unsigned max_modules = 128;

struct filter_text {
  char text[max_filter_chars + 1] = {};  // a name, or a prefix and '*'
};
filter_text filters[max_filters];
unsigned filter_count = 0;

// A function a filter names: [start, end) in this process, and its name as the symbol table has it.
struct function_span {
  std::uintptr_t start = 0, end = 0;
  char name[max_filter_chars + 1] = {};
};
function_span spans[max_spans];
std::atomic<unsigned> span_count{0};

// The address ranges of the modules read so far (each PT_LOAD's extent, merged).
struct module_extent {
  std::uintptr_t start = 0, end = 0;
};
module_extent modules[max_modules];
std::atomic<unsigned> module_count{0};
std::atomic_flag scanning = ATOMIC_FLAG_INIT;

bool filter_matches(const char* name) noexcept {
  for (unsigned i = 0; i < filter_count; ++i) {
    const char* f = filters[i].text;
    const std::size_t n = std::strlen(f);
    if (n > 0 && f[n - 1] == '*' ? std::strncmp(f, name, n - 1) == 0 : std::strcmp(f, name) == 0) return true;
  }
  return false;
}

bool in_known_module(std::uintptr_t ip) noexcept {
  const unsigned n = module_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < n; ++i) {
    if (ip >= modules[i].start && ip < modules[i].end) return true;
  }
  return false;
}

constexpr std::size_t max_path = 4096;

// Where the separate debug file of the ELF image [base, base + size), read from `path`, may be,
// in the order gdb looks: its .gnu_debuglink beside it, in .debug/ beside it, under
// /usr/lib/debug/ and its directory; then /usr/lib/debug/.build-id/NN/REST.debug. Calls
// `try_path` with each candidate until it returns true.
template <class F>
void debug_file_candidates(const char* path, const char* base, std::uint64_t size, F&& try_path) noexcept {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  if (eh->e_shstrndx >= eh->e_shnum) return;
  const Elf64_Shdr& names = sh[eh->e_shstrndx];
  char dir[max_path] = {};
  if (std::strcmp(path, "/proc/self/exe") == 0) {
    const ssize_t n = ::readlink(path, dir, sizeof dir - 1);
    if (n <= 0) return;
    dir[n] = '\0';
  } else if (std::strlen(path) < sizeof dir) {
    std::strcpy(dir, path);
  }
  if (char* slash = std::strrchr(dir, '/')) *slash = '\0';
  char candidate[max_path];
  const auto join = [&](const char* a, const char* b, const char* c, const char* d) {
    const std::size_t n = std::strlen(a) + std::strlen(b) + std::strlen(c) + std::strlen(d);
    if (n >= sizeof candidate) return false;
    candidate[0] = '\0';
    std::strcat(std::strcat(std::strcat(std::strcat(candidate, a), b), c), d);
    return true;
  };
  for (unsigned i = 0; i < eh->e_shnum; ++i) {
    if (names.sh_offset + sh[i].sh_name >= size || sh[i].sh_offset + sh[i].sh_size > size) continue;
    const char* section = base + names.sh_offset + sh[i].sh_name;
    if (std::strcmp(section, ".gnu_debuglink") == 0 && sh[i].sh_size > 1) {
      const char* link = base + sh[i].sh_offset;
      if (::strnlen(link, sh[i].sh_size) == sh[i].sh_size) continue;
      if ((join(dir, "/", link, "") && try_path(candidate)) || (join(dir, "/.debug/", link, "") && try_path(candidate)) ||
          (join("/usr/lib/debug", dir, "/", link) && try_path(candidate)))
        return;
    }
    if (sh[i].sh_type == SHT_NOTE) {  // NT_GNU_BUILD_ID: namesz, descsz, type, "GNU\0", the id
      for (std::uint64_t at = sh[i].sh_offset; at + 12 <= sh[i].sh_offset + sh[i].sh_size;) {
        std::uint32_t word[3];
        std::memcpy(word, base + at, sizeof word);
        const std::uint64_t name_at = at + 12, desc_at = name_at + ((word[0] + 3u) & ~3u);
        const std::uint64_t next = desc_at + ((word[1] + 3u) & ~3u);
        if (next > sh[i].sh_offset + sh[i].sh_size) break;
        if (word[2] == NT_GNU_BUILD_ID && word[0] == 4 && std::memcmp(base + name_at, "GNU", 4) == 0 && word[1] >= 2 &&
            word[1] <= 64) {
          char hex[2 * 64 + 8];
          constexpr char digits[] = "0123456789abcdef";
          std::size_t h = 0;
          for (std::uint32_t k = 0; k < word[1]; ++k) {
            const auto byte = static_cast<unsigned char>(base[desc_at + k]);
            hex[h++] = digits[byte >> 4];
            hex[h++] = digits[byte & 15];
            if (k == 0) hex[h++] = '/';
          }
          hex[h] = '\0';
          if (join("/usr/lib/debug/.build-id/", hex, ".debug", "") && try_path(candidate)) return;
        }
        at = next;
      }
    }
  }
}

// Adds the functions of the ELF file `path` (loaded at `bias`) that a filter names: from its
// .symtab, else from the .symtab of its separate debug file, else from its .dynsym. True when a
// .symtab was read.
bool read_module(const char* path, std::uintptr_t bias, bool symtab_only = false) noexcept {
  const detail::elf_file file(path);
  if (!file.valid()) return false;
  // .symtab names every function, local ones too; .dynsym only where there is no .symtab.
  const bool had_symtab = file.has_section(SHT_SYMTAB);
  if (symtab_only && !had_symtab) return false;
  unsigned wanted = had_symtab ? SHT_SYMTAB : SHT_DYNSYM;
  if (!had_symtab) {
    bool from_debug = false;
    debug_file_candidates(path, file.base(), file.size(),
                          [&](const char* debug) { return from_debug = read_module(debug, bias, true); });
    if (from_debug) return false;  // its .symtab has the exported functions too
  }
  file.for_each_function(wanted, [&](const char* name, std::uint64_t value, std::uint64_t size, unsigned) {
    if (std::strlen(name) > max_filter_chars || !filter_matches(name)) return true;
    const unsigned at = span_count.load(std::memory_order_relaxed);
    if (at == max_spans) return false;
    function_span& f = spans[at];
    f.start = bias + value;
    f.end = f.start + (size != 0 ? size : 1);
    std::strcpy(f.name, name);
    span_count.store(at + 1, std::memory_order_release);
    return true;
  });
  return had_symtab;
}

int scan_module(dl_phdr_info* info, std::size_t, void*) {
  const char* path = info->dlpi_name != nullptr && *info->dlpi_name != '\0' ? info->dlpi_name : "/proc/self/exe";
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (unsigned i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    lo = std::min<std::uintptr_t>(lo, info->dlpi_addr + ph.p_vaddr);
    hi = std::max<std::uintptr_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (lo >= hi || in_known_module(lo)) return 0;
  const unsigned m = module_count.load(std::memory_order_relaxed);
  if (m == max_modules) return 1;
  if (std::strstr(path, "linux-vdso") == nullptr) read_module(path, info->dlpi_addr);
  modules[m] = {lo, hi};
  module_count.store(m + 1, std::memory_order_release);
  return 0;
}

// Reads the modules loaded since the last scan. One thread scans at a time; another one asking
// meanwhile goes on without (its frame is not named this once).
void scan_modules() noexcept {
  if (scanning.test_and_set(std::memory_order_acquire)) return;
  ::dl_iterate_phdr(&scan_module, nullptr);
  scanning.clear(std::memory_order_release);
}

// The names of the caller's first frames that filters name, for plan_point's filters.
struct frames {
  static constexpr int depth = 10;
  const char* names[depth + 1] = {};
  int count = 0;
  bool unknown_module = false;  // a frame in a module not read yet (loaded by dlopen)
  int seen = 0;
};

_Unwind_Reason_Code collect(_Unwind_Context* context, void* arg) {
  auto* f = static_cast<frames*>(arg);
  const std::uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0 || f->seen == frames::depth) return _URC_END_OF_STACK;
  ++f->seen;
  const unsigned n = span_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < n; ++i) {
    if (ip - 1 >= spans[i].start && ip - 1 < spans[i].end) {
      f->names[f->count++] = spans[i].name;
      return _URC_NO_REASON;
    }
  }
  // Outside every module read: a library loaded since (dladdr knows it), or code of no module (JIT).
  Dl_info info{};
  // (With the table of modules full, nothing more can be read: no rescan.)
  if (module_count.load(std::memory_order_relaxed) < max_modules && !in_known_module(ip - 1) &&
      ::dladdr(reinterpret_cast<void*>(ip - 1), &info) != 0)
    f->unknown_module = true;
  return _URC_NO_REASON;
}

void read_callers(frames& f) noexcept {
  _Unwind_Backtrace(&collect, &f);
  if (f.unknown_module) {  // a module loaded since: read it, then look again
    scan_modules();
    f = frames{};
    _Unwind_Backtrace(&collect, &f);
  }
}

// One hit of `point`: the errno to fail with (wait points), else 0.
int hit(const char* point) noexcept {
  frames f;
  if (with_filters) read_callers(f);
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
  // The filters of lock items ("lock/...@name"): their functions are looked up in the symbol
  // tables. Other items' filters do not make frames worth reading.
  faultline::faults::for_each_pattern(spec_copy, [](std::string_view pattern) {
    const std::size_t at = pattern.find('@');
    if (at == std::string_view::npos || filter_count == max_filters ||
        !faultline::faults::pattern_reaches(pattern, faultline::faults::injector::lock))
      return;
    const std::size_t n = pattern.size() - at - 1;
    if (n == 0 || n > max_filter_chars) return;
    std::memcpy(filters[filter_count].text, pattern.data() + at + 1, n);
    filters[filter_count].text[n] = '\0';
    ++filter_count;
  });
  with_filters = filter_count > 0;
  if (with_filters) scan_modules();
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
