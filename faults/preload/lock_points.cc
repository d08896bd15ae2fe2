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
#include "faults/preload/detail/inlined_sites.h"
#include "faults/preload/detail/next_symbol.h"
#include "faults/preload/detail/plan_table.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/preload_points.h"
#include "faults/symbol_names.h"

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
// hidden functions are seen (dladdr sees exported ones only). A filter names a function and its
// compiler clones (faults/symbol_names.h: f.isra.0, f.constprop.0, f.part.0, f.cold), and, where
// the command found them in the DWARF (FAULTLINE_INLINED, detail/inlined_sites.h), the places f
// was inlined. Each loaded module is read once, when first met (all of them at install, a
// dlopen'ed one when a frame first falls in it); the hot path only compares a frame's address
// with the spans found, and never allocates.
constexpr unsigned max_filters = 16;
constexpr unsigned max_filter_chars = 127;
constexpr unsigned max_spans = 256;
constexpr unsigned max_modules = 128;
constexpr unsigned max_segments = 512;
constexpr unsigned max_inlined = 64;

struct filter_text {
  char text[max_filter_chars + 1] = {};  // a name, or a prefix and '*'
};
filter_text filters[max_filters];
unsigned filter_count = 0;

// A function a filter names: [start, end) in this process, its name as the symbol table has it
// (or, for an inlined copy, the inlined function's), that name without a clone suffix, and for an
// inlined copy the function it was inlined into.
struct function_span {
  std::uintptr_t start = 0, end = 0;
  char name[max_filter_chars + 1] = {};
  char base[max_filter_chars + 1] = {};
  char inlined_into[max_filter_chars + 1] = {};
  // Bit k: the function's code jumps to primitive k (a tail call), found the first time it was
  // asked; only a yes is kept (a PLT slot not bound yet reads as a no).
  std::atomic<std::uint32_t> tail_jumps{0};
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

// Each loaded segment (PT_LOAD) of the modules read: the tail-call check reads code and GOT slots
// only where a segment is mapped.
struct segment {
  std::uintptr_t start = 0, end = 0;
  bool exec = false;
};
segment segments[max_segments];
std::atomic<unsigned> segment_count{0};

// The inlined copies the command found (FAULTLINE_INLINED) of functions the filters name.
detail::inlined_site inlined[max_inlined];
unsigned inlined_count = 0;

bool filter_names(const char* f, const char* name) noexcept {
  const std::size_t n = std::strlen(f);
  if (n > 0 && f[n - 1] == '*') return std::strncmp(f, name, n - 1) == 0;
  return faultline::faults::names_function(name, f);
}

bool filter_matches(const char* name) noexcept {
  for (unsigned i = 0; i < filter_count; ++i) {
    if (filter_names(filters[i].text, name)) return true;
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

// Whether [address, address + n) lies inside one loaded segment (an executable one if `exec`).
bool mapped(std::uintptr_t address, std::size_t n, bool exec) noexcept {
  const unsigned count = segment_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < count; ++i) {
    const segment& g = segments[i];
    if (address >= g.start && address + n <= g.end && address + n > address) return !exec || g.exec;
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
    const std::string_view base = faultline::faults::clone_base(name);
    std::memcpy(f.base, base.data(), base.size());
    f.base[base.size()] = '\0';
    span_count.store(at + 1, std::memory_order_release);
    return true;
  });
  return had_symtab;
}

// Adds the inlined copies (FAULTLINE_INLINED) that lie in the file `path`, loaded at `bias`.
void add_inlined(const char* path, std::uintptr_t bias) noexcept {
  if (inlined_count == 0) return;
  struct stat st {};
  if (::stat(path, &st) != 0) return;
  for (unsigned i = 0; i < inlined_count; ++i) {
    const detail::inlined_site& site = inlined[i];
    if (site.dev != st.st_dev || site.inode != st.st_ino) continue;
    for (unsigned r = 0; r < site.ranges; ++r) {
      const unsigned at = span_count.load(std::memory_order_relaxed);
      if (at == max_spans) return;
      function_span& f = spans[at];
      f.start = bias + site.low[r];
      f.end = bias + site.high[r];
      std::strcpy(f.name, site.function);
      std::strcpy(f.base, site.function);
      std::strcpy(f.inlined_into, site.caller);
      span_count.store(at + 1, std::memory_order_release);
    }
  }
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
  for (unsigned i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const unsigned g = segment_count.load(std::memory_order_relaxed);
    if (ph.p_type != PT_LOAD || g == max_segments) continue;
    // (The bytes past p_filesz up to p_memsz are mapped too: zeroed, or anonymous pages.)
    segments[g] = {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz, (ph.p_flags & PF_X) != 0};
    segment_count.store(g + 1, std::memory_order_release);
  }
  if (std::strstr(path, "linux-vdso") == nullptr) {
    read_module(path, info->dlpi_addr);
    add_inlined(path, info->dlpi_addr);
  }
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

// The lock calls the wrappers stand before, as the tail-call check names them.
enum primitive : unsigned {
  p_sem_wait, p_sem_timedwait, p_sem_clockwait, p_sem_trywait, p_sem_post,
  p_mutex_lock, p_mutex_timedlock, p_mutex_clocklock, p_mutex_trylock, p_mutex_unlock,
  p_flock, p_lockf, p_fcntl, p_fcntl64, primitive_count
};
constexpr const char* primitive_names[primitive_count] = {
  "sem_wait", "sem_timedwait", "sem_clockwait", "sem_trywait", "sem_post",
  "pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_mutex_clocklock", "pthread_mutex_trylock",
  "pthread_mutex_unlock", "flock", "lockf", "fcntl", "fcntl64"};
// Where a jump to each may land: the definition the program's calls bind to (the first in the
// lookup order: these wrappers, or a preload before them) and glibc's own.
std::uintptr_t primitive_addresses[primitive_count][2] = {};

// One wrapped call: which primitive, and the wrapper's return address (where the primitive
// returns to: the instruction after the call that reached it).
struct call_site {
  primitive what;
  std::uintptr_t return_address;
};

// The names of the caller's first frames that filters name, for plan_point's filters: per span
// a frame falls in, its base name (without a clone suffix) and its name where the two differ.
struct frames {
  static constexpr int depth = 10;
  static constexpr int max_names = 48;
  const char* names[max_names + 1] = {};
  const function_span* span_of[max_names] = {};
  int count = 0;
  bool unknown_module = false;  // a frame in a module not read yet (loaded by dlopen)
  bool tail_call = false;       // names[0] (and [1]) name a function that tail-called the primitive
  int seen = 0;

  void add(const function_span& s) noexcept {
    if (count + 2 > max_names) return;
    span_of[count] = &s;
    names[count++] = s.base;
    if (std::strcmp(s.base, s.name) != 0) {
      span_of[count] = &s;
      names[count++] = s.name;
    }
  }
};

_Unwind_Reason_Code collect(_Unwind_Context* context, void* arg) {
  auto* f = static_cast<frames*>(arg);
  const std::uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0 || f->seen == frames::depth) return _URC_END_OF_STACK;
  ++f->seen;
  const unsigned n = span_count.load(std::memory_order_acquire);
  bool named = false;
  // Every span: a frame inside an inlined copy is inside the function it was inlined into too.
  for (unsigned i = 0; i < n; ++i) {
    if (ip - 1 >= spans[i].start && ip - 1 < spans[i].end) {
      f->add(spans[i]);
      named = true;
    }
  }
  if (named) return _URC_NO_REASON;
  // Outside every module read: a library loaded since (dladdr knows it), or code of no module (JIT).
  Dl_info info{};
  // (With the table of modules full, nothing more can be read: no rescan.)
  if (module_count.load(std::memory_order_relaxed) < max_modules && !in_known_module(ip - 1) &&
      ::dladdr(reinterpret_cast<void*>(ip - 1), &info) != 0)
    f->unknown_module = true;
  return _URC_NO_REASON;
}

std::int32_t read_i32(std::uintptr_t at) noexcept {
  std::int32_t v;
  std::memcpy(&v, reinterpret_cast<const void*>(at), sizeof v);
  return v;
}

// Where a jump or call to `target` ends up: through a PLT entry ([endbr64] [bnd] jmp *slot(%rip),
// the slot bound by the loader) to the function it stands for. 0 when it cannot be read.
std::uintptr_t through_plt(std::uintptr_t target) noexcept {
  for (int hop = 0; hop < 2; ++hop) {
    if (!mapped(target, 11, true)) return hop == 0 ? 0 : target;
    const auto* p = reinterpret_cast<const std::uint8_t*>(target);
    std::size_t k = 0;
    if (p[0] == 0xF3 && p[1] == 0x0F && p[2] == 0x1E && p[3] == 0xFA) k = 4;  // endbr64
    if (p[k] == 0xF2) ++k;                                                     // bnd
    if (p[k] != 0xFF || p[k + 1] != 0x25) return target;
    const std::uintptr_t slot = target + k + 6 + static_cast<std::intptr_t>(read_i32(target + k + 2));
    if (!mapped(slot, sizeof(std::uintptr_t), false)) return target;
    std::memcpy(&target, reinterpret_cast<const void*>(slot), sizeof target);
  }
  return target;
}

bool is_primitive(std::uintptr_t address, primitive what) noexcept {
  return address != 0 && (address == primitive_addresses[what][0] || address == primitive_addresses[what][1]);
}

// Whether the code of `s` jumps to `what` (jmp rel32, jmp rel8 out of the function, jmp
// *slot(%rip)): the function tail-calls it. Every byte offset is tried (no instruction decoder):
// a byte that only looks like a jump would have to land exactly on the primitive as well.
bool jumps_to(function_span& s, primitive what) noexcept {
  const std::uint32_t bit = 1u << what;
  if ((s.tail_jumps.load(std::memory_order_relaxed) & bit) != 0) return true;
  if (s.inlined_into[0] != '\0' || s.end - s.start < 2 || !mapped(s.start, s.end - s.start, true)) return false;
  bool found = false;
  for (std::uintptr_t at = s.start; at + 2 <= s.end && !found; ++at) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(at);
    std::uintptr_t target = 0;
    if (p[0] == 0xE9 && at + 5 <= s.end) {
      target = at + 5 + static_cast<std::intptr_t>(read_i32(at + 1));
    } else if (p[0] == 0xEB) {
      target = at + 2 + static_cast<std::int8_t>(p[1]);
      if (target >= s.start && target < s.end) continue;  // a jump inside the function
    } else if (p[0] == 0xFF && p[1] == 0x25 && at + 6 <= s.end) {
      const std::uintptr_t slot = at + 6 + static_cast<std::intptr_t>(read_i32(at + 2));
      if (mapped(slot, sizeof(std::uintptr_t), false)) std::memcpy(&target, reinterpret_cast<const void*>(slot), sizeof target);
      found = is_primitive(target, what);
      continue;
    } else {
      continue;
    }
    found = is_primitive(through_plt(target), what);
  }
  if (found) s.tail_jumps.fetch_or(bit, std::memory_order_relaxed);
  return found;
}

// The function a filter names that tail-called the primitive of `site`: the instruction before
// the primitive's return address is a call (call rel32, or call *slot(%rip)) of a function (or
// of its PLT entry) whose code jumps to that primitive. x86-64 code only; null when there is none.
function_span* tail_caller(const call_site& site) noexcept {
  const std::uintptr_t ra = site.return_address;
  if (!mapped(ra - 6, 6, true)) return nullptr;
  const auto* p = reinterpret_cast<const std::uint8_t*>(ra);
  std::uintptr_t target = 0;
  if (p[-5] == 0xE8) {
    target = ra + static_cast<std::intptr_t>(read_i32(ra - 4));
  } else if (p[-6] == 0xFF && p[-5] == 0x15) {
    const std::uintptr_t slot = ra + static_cast<std::intptr_t>(read_i32(ra - 4));
    if (!mapped(slot, sizeof(std::uintptr_t), false)) return nullptr;
    std::memcpy(&target, reinterpret_cast<const void*>(slot), sizeof target);
  } else {
    return nullptr;
  }
  target = through_plt(target);
  if (target == 0 || is_primitive(target, site.what)) return nullptr;  // a direct call: no tail call
  const unsigned n = span_count.load(std::memory_order_acquire);
  for (unsigned i = 0; i < n; ++i) {
    function_span& s = spans[i];
    if (target < s.start || target >= s.end || s.inlined_into[0] != '\0') continue;
    if (jumps_to(s, site.what)) return &s;
    // The jump may be in its cold part (f.cold, split into .text.unlikely).
    for (unsigned k = 0; k < n; ++k) {
      function_span& cold = spans[k];
      if (&cold != &s && cold.inlined_into[0] == '\0' && std::strcmp(cold.base, s.base) == 0 &&
          faultline::faults::is_cold_part(cold.name) && jumps_to(cold, site.what))
        return &s;
    }
    return nullptr;
  }
  return nullptr;
}

void read_callers(frames& f, const call_site& site) noexcept {
  if (function_span* t = tail_caller(site)) {  // first: it stood where the primitive's caller's frame is
    f.add(*t);
    f.tail_call = true;
  }
  const frames start = f;
  _Unwind_Backtrace(&collect, &f);
  if (f.unknown_module) {  // a module loaded since: read it, then look again
    scan_modules();
    f = start;
    _Unwind_Backtrace(&collect, &f);
  }
}

// What the item's filter matched, for the print line and points.PID: the symbol (a clone, a
// prefix's match), the tail-caller or the inlined copy; null when the filter named it exactly.
void describe_match(const frames& f, const char* pattern, detail::fixed_string<320>& out) noexcept {
  const char* at = std::strchr(pattern, '@');
  if (at == nullptr) return;
  const char* filter = at + 1;
  for (int i = 0; i < f.count; ++i) {
    const std::size_t n = std::strlen(filter);
    const bool match = n > 0 && filter[n - 1] == '*' ? std::strncmp(filter, f.names[i], n - 1) == 0
                                                     : std::strcmp(filter, f.names[i]) == 0;
    if (!match) continue;
    const function_span& s = *f.span_of[i];
    const bool tail = f.tail_call && (i == 0 || (i == 1 && f.span_of[0] == &s));
    if (std::strcmp(s.name, filter) == 0 && !tail && s.inlined_into[0] == '\0') return;
    out.str(s.name);
    if (tail) out.str(", a tail call");
    if (s.inlined_into[0] != '\0') out.str(" inlined into ").str(s.inlined_into);
    return;
  }
}

// Items whose "reached via" line points.PID has.
std::atomic<bool> via_recorded[16];

// One hit of `point` by the call `site`: the errno to fail with (wait points), else 0.
int hit(const char* point, const call_site& site) noexcept {
  frames f;
  if (with_filters) read_callers(f, site);
  const int item = items.find(spec_copy, point, with_filters ? f.names : nullptr);
  if (item < 0) return 0;
  const detail::point_term t = items.hit(item, &preload::draw, &preload::record_reached);
  detail::fixed_string<320> via;
  if (with_filters) describe_match(f, items.pattern(item), via);
  const bool named = with_filters && via.c_str()[0] != '\0' && !via.overflowed();
  if (named && item < 16 && !via_recorded[item].load(std::memory_order_relaxed) &&
      !via_recorded[item].exchange(true, std::memory_order_relaxed)) {
    detail::fixed_string<480> line;
    line.str(items.pattern(item)).str(" in ").str(via.c_str());
    if (!line.overflowed()) preload::record_reached(line.c_str());
  }
  if (t.action == detail::point_action::fail) return t.code;
  preload::act(t, point, named ? via.c_str() : nullptr);
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
  if (with_filters) {
    detail::for_each_inlined_site(std::getenv(detail::inlined_env), [](const detail::inlined_site& site) {
      if (inlined_count < max_inlined && filter_matches(site.function)) inlined[inlined_count++] = site;
    });
    const detail::dlsym_fn lookup = detail::glibc_dlsym();
    for (unsigned k = 0; k < primitive_count; ++k) {
      primitive_addresses[k][0] = reinterpret_cast<std::uintptr_t>(lookup != nullptr ? lookup(RTLD_DEFAULT, primitive_names[k]) : nullptr);
      primitive_addresses[k][1] = reinterpret_cast<std::uintptr_t>(detail::next_symbol(primitive_names[k]));
    }
    scan_modules();
  }
  preload::open_points_file(dir);
  preload::seed_points(std::getenv("FAULTLINE_SEED"));
  active = true;
}

// A sem_ or pthread_mutex_ call that waits: wait point, the call, acquired point.
template <class Object, class Call>
int waiting(Object* o, const char* wait_point, const char* acquired_point, bool errno_style, const call_site& site,
            Call call) {
  if (!active || o == nullptr || !shared(o)) return call();
  if (const int err = hit(wait_point, site); err != 0) {
    if (!errno_style) return err;
    errno = err;
    return -1;
  }
  const int r = call();
  if (r == 0 || (!errno_style && r == EOWNERDEAD)) (void)hit(acquired_point, site);
  return r;
}

// A try: no wait, the acquired point when it took the lock.
template <class Object, class Call>
int trying(Object* o, const char* acquired_point, bool errno_style, const call_site& site, Call call) {
  const int r = call();
  if (active && o != nullptr && shared(o) && (r == 0 || (!errno_style && r == EOWNERDEAD))) (void)hit(acquired_point, site);
  return r;
}

// A release: the point, then the call.
template <class Object, class Call>
int releasing(Object* o, const char* point, const call_site& site, Call call) {
  if (active && o != nullptr && shared(o)) (void)hit(point, site);
  return call();
}

// A file lock request (flock, lockf, fcntl) by what it does.
enum class file_op { release, wait, attempt, other };

int file_lock(file_op op, const call_site& site, auto call) {
  if (!active || op == file_op::other) return call();
  if (op == file_op::release) {
    (void)hit("lock/file/release", site);
    return call();
  }
  if (op == file_op::wait) {
    if (const int err = hit("lock/file/wait", site); err != 0) {
      errno = err;
      return -1;
    }
  }
  const int r = call();
  if (r == 0) (void)hit("lock/file/acquired", site);
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
// The call a wrapper stands for: the primitive and where it returns to.
#define FAULTLINE_CALL_SITE(what) \
  call_site { what, reinterpret_cast<std::uintptr_t>(__builtin_extract_return_addr(__builtin_return_address(0))) }

FAULTLINE_EXPORT int sem_wait(sem_t* s) {
  resolve();
  return waiting(s, "lock/sem/wait", "lock/sem/acquired", true, FAULTLINE_CALL_SITE(p_sem_wait), [&] { return real.sem_wait(s); });
}
FAULTLINE_EXPORT int sem_timedwait(sem_t* s, const timespec* t) {
  resolve();
  return waiting(s, "lock/sem/wait", "lock/sem/acquired", true, FAULTLINE_CALL_SITE(p_sem_timedwait), [&] { return real.sem_timedwait(s, t); });
}
FAULTLINE_EXPORT int sem_clockwait(sem_t* s, clockid_t c, const timespec* t) {
  resolve();
  return waiting(s, "lock/sem/wait", "lock/sem/acquired", true, FAULTLINE_CALL_SITE(p_sem_clockwait), [&] { return real.sem_clockwait(s, c, t); });
}
FAULTLINE_EXPORT int sem_trywait(sem_t* s) {
  resolve();
  return trying(s, "lock/sem/acquired", true, FAULTLINE_CALL_SITE(p_sem_trywait), [&] { return real.sem_trywait(s); });
}
FAULTLINE_EXPORT int sem_post(sem_t* s) {
  resolve();
  return releasing(s, "lock/sem/release", FAULTLINE_CALL_SITE(p_sem_post), [&] { return real.sem_post(s); });
}
FAULTLINE_EXPORT int pthread_mutex_lock(pthread_mutex_t* m) {
  resolve();
  return waiting(m, "lock/mutex/wait", "lock/mutex/acquired", false, FAULTLINE_CALL_SITE(p_mutex_lock), [&] { return real.lock(m); });
}
FAULTLINE_EXPORT int pthread_mutex_timedlock(pthread_mutex_t* m, const timespec* t) {
  resolve();
  return waiting(m, "lock/mutex/wait", "lock/mutex/acquired", false, FAULTLINE_CALL_SITE(p_mutex_timedlock), [&] { return real.timedlock(m, t); });
}
FAULTLINE_EXPORT int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const timespec* t) {
  resolve();
  return waiting(m, "lock/mutex/wait", "lock/mutex/acquired", false, FAULTLINE_CALL_SITE(p_mutex_clocklock), [&] { return real.clocklock(m, c, t); });
}
FAULTLINE_EXPORT int pthread_mutex_trylock(pthread_mutex_t* m) {
  resolve();
  return trying(m, "lock/mutex/acquired", false, FAULTLINE_CALL_SITE(p_mutex_trylock), [&] { return real.trylock(m); });
}
FAULTLINE_EXPORT int pthread_mutex_unlock(pthread_mutex_t* m) {
  resolve();
  return releasing(m, "lock/mutex/release", FAULTLINE_CALL_SITE(p_mutex_unlock), [&] { return real.unlock(m); });
}
FAULTLINE_EXPORT int flock(int fd, int op) {
  resolve();
  const file_op what = (op & LOCK_UN) != 0 ? file_op::release
                       : (op & (LOCK_SH | LOCK_EX)) != 0 ? ((op & LOCK_NB) != 0 ? file_op::attempt : file_op::wait)
                                                         : file_op::other;
  return file_lock(what, FAULTLINE_CALL_SITE(p_flock), [&] { return real.flock(fd, op); });
}
FAULTLINE_EXPORT int lockf(int fd, int cmd, off_t len) {
  resolve();
  const file_op what = cmd == F_ULOCK ? file_op::release
                       : cmd == F_LOCK ? file_op::wait
                       : cmd == F_TLOCK ? file_op::attempt
                                        : file_op::other;
  return file_lock(what, FAULTLINE_CALL_SITE(p_lockf), [&] { return real.lockf(fd, cmd, len); });
}
// fcntl's third argument is an int or a pointer; both travel in one register.
FAULTLINE_EXPORT int fcntl(int fd, int cmd, ...) {
  resolve();
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return file_lock(fcntl_op(cmd, arg), FAULTLINE_CALL_SITE(p_fcntl), [&] { return real.fcntl(fd, cmd, arg); });
}
FAULTLINE_EXPORT int fcntl64(int fd, int cmd, ...) {
  resolve();
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return file_lock(fcntl_op(cmd, arg), FAULTLINE_CALL_SITE(p_fcntl64), [&] { return real.fcntl64 != nullptr ? real.fcntl64(fd, cmd, arg) : real.fcntl(fd, cmd, arg); });
}
