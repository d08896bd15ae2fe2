#include "faults/preload/fn_points.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "faults/preload/detail/elf_symbols.h"
#include "faults/preload/detail/inlined_sites.h"
#include "faults/preload/detail/sys.h"
#include "faults/preload/detail/plan_table.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/preload_points.h"
#include "faults/symbol_names.h"

namespace {

namespace detail = faultline::agent::detail;
namespace preload = faultline::agent::preload;

constexpr unsigned max_breakpoints = 32;
constexpr unsigned max_spec = 4096;
constexpr unsigned max_symbol = 200;

struct breakpoint {
  std::uintptr_t address = 0;
  std::uint8_t original = 0;
  int item = -1;
  char point[max_symbol + 4] = {};  // "fn/" + symbol
  // Where the breakpoint stands when that is not the symbol named: a clone (f.isra.0), or an
  // inlined copy ("f inlined into g"); empty otherwise.
  char where[2 * max_symbol + 16] = {};
  // Threads stepping over it now: the breakpoint is set again only when the last one is done
  // (set while another thread is about to run the restored first instruction, it would run the
  // int3 instead and resume in the middle of that instruction).
  std::atomic<int> steppers{0};
};

char spec_copy[max_spec + 1];
breakpoint breakpoints[max_breakpoints];
unsigned breakpoint_count = 0;
detail::plan_table<max_breakpoints> items;
struct sigaction previous_trap {};
// The breakpoint this thread is stepping over (its byte restored), or -1.
[[gnu::tls_model("initial-exec")]] __thread int stepping = -1;

constexpr std::uint8_t int3 = 0xCC;
constexpr greg_t trap_flag = 0x100;

// Writes to the code are serialised: two threads toggling one page's protection would otherwise
// take it away from each other between mprotect and the store.
std::atomic_flag writing = ATOMIC_FLAG_INIT;

bool write_byte(std::uintptr_t address, std::uint8_t value) noexcept {
  while (writing.test_and_set(std::memory_order_acquire)) {
  }
  struct release {
    ~release() { writing.clear(std::memory_order_release); }
  } unlock;
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* start = reinterpret_cast<void*>(address & ~static_cast<std::uintptr_t>(page - 1));
  const std::size_t span = (address + 1 - reinterpret_cast<std::uintptr_t>(start)) > static_cast<std::size_t>(page)
                               ? 2 * static_cast<std::size_t>(page) : static_cast<std::size_t>(page);
  if (detail::sys::mprotect(start, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return false;
  *reinterpret_cast<volatile std::uint8_t*>(address) = value;
  __builtin___clear_cache(reinterpret_cast<char*>(address), reinterpret_cast<char*>(address + 1));
  return detail::sys::mprotect(start, span, PROT_READ | PROT_EXEC) == 0;
}

void pass_on(int sig, siginfo_t* info, void* context) {
  if ((previous_trap.sa_flags & SA_SIGINFO) != 0 && previous_trap.sa_sigaction != nullptr) {
    previous_trap.sa_sigaction(sig, info, context);
  } else if (previous_trap.sa_handler != SIG_IGN && previous_trap.sa_handler != SIG_DFL) {
    previous_trap.sa_handler(sig);
  } else {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

void on_trap(int sig, siginfo_t* info, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  greg_t& rip = uc->uc_mcontext.gregs[REG_RIP];
  greg_t& flags = uc->uc_mcontext.gregs[REG_EFL];
  if (stepping >= 0 && info->si_code == TRAP_TRACE) {  // the first instruction ran
    breakpoint& b = breakpoints[stepping];
    flags &= ~trap_flag;
    stepping = -1;
    if (b.steppers.fetch_sub(1, std::memory_order_acq_rel) == 1) (void)write_byte(b.address, int3);
    return;
  }
  for (unsigned i = 0; i < breakpoint_count; ++i) {
    breakpoint& b = breakpoints[i];
    if (static_cast<std::uintptr_t>(rip) - 1 != b.address) continue;
    const detail::point_term t = items.hit(b.item, &preload::draw, &preload::record_reached);
    preload::act(t, b.point, b.where[0] != '\0' ? b.where : nullptr);
    b.steppers.fetch_add(1, std::memory_order_acq_rel);
    (void)write_byte(b.address, b.original);
    rip = static_cast<greg_t>(b.address);
    flags |= trap_flag;
    stepping = static_cast<int>(i);
    return;
  }
  pass_on(sig, info, context);
}

// The address of `symbol` in the ELF symbol table of a loaded object (for functions the dynamic
// table does not export).
struct symtab_search {
  const char* symbol;
  std::uintptr_t found;
  std::uint64_t size;
};

std::uintptr_t search_file(const char* path, std::uintptr_t bias, const char* symbol, std::uint64_t* size_out) noexcept {
  std::uintptr_t found = 0;
  detail::elf_file(path).for_each_function(SHT_SYMTAB, [&](const char* name, std::uint64_t value, std::uint64_t size,
                                                          unsigned type) {
    if (type != STT_FUNC || std::strcmp(name, symbol) != 0) return true;
    found = bias + value;
    *size_out = size;
    return false;
  });
  return found;
}

int search_object(dl_phdr_info* info, std::size_t, void* arg) {
  auto* s = static_cast<symtab_search*>(arg);
  const char* path = info->dlpi_name != nullptr && *info->dlpi_name != '\0' ? info->dlpi_name : "/proc/self/exe";
  if (std::strstr(path, "linux-vdso") != nullptr) return 0;
  s->found = search_file(path, info->dlpi_addr, s->symbol, &s->size);
  return s->found != 0 ? 1 : 0;
}

// The address of `symbol` and its size in bytes (0 where the symbol table does not say).
std::uintptr_t resolve(const char* symbol, std::uint64_t* size) noexcept {
  *size = 0;
  if (void* p = ::dlsym(RTLD_DEFAULT, symbol)) {
    Dl_info info{};
    void* entry = nullptr;
    if (::dladdr1(p, &info, &entry, RTLD_DL_SYMENT) != 0 && entry != nullptr) {
      *size = static_cast<const Elf64_Sym*>(entry)->st_size;
    }
    return reinterpret_cast<std::uintptr_t>(p);
  }
  symtab_search s{symbol, 0, 0};
  ::dl_iterate_phdr(&search_object, &s);
  *size = s.size;
  return s.found;
}

// Calls fn(address, name) for each entry of a compiler clone of `symbol` (f.isra.0,
// f.constprop.0, f.part.0: faults/symbol_names.h) in the .symtab of the loaded objects; a cold
// part (f.cold) is no entry of the function and is left out.
template <class F>
void for_each_clone(const char* symbol, F&& fn) noexcept {
  struct search {
    const char* symbol;
    F* fn;
  } wanted{symbol, &fn};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* arg) {
        auto* s = static_cast<search*>(arg);
        const char* path = info->dlpi_name != nullptr && *info->dlpi_name != '\0' ? info->dlpi_name : "/proc/self/exe";
        if (std::strstr(path, "linux-vdso") != nullptr) return 0;
        detail::elf_file(path).for_each_function(SHT_SYMTAB, [&](const char* name, std::uint64_t value, std::uint64_t,
                                                                 unsigned type) {
          if (type == STT_FUNC && std::strcmp(name, s->symbol) != 0 && faultline::faults::names_function(name, s->symbol) &&
              !faultline::faults::is_cold_part(name))
            (*s->fn)(info->dlpi_addr + value, name);
          return true;
        });
        return 0;
      },
      &wanted);
}

// The load bias of the loaded object whose file is (dev, inode), or 0 with *found false.
std::uintptr_t bias_of(std::uint64_t dev, std::uint64_t inode, bool* found) noexcept {
  struct search {
    std::uint64_t dev, inode;
    std::uintptr_t bias;
    bool found;
  } file{dev, inode, 0, false};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* arg) {
        auto* s = static_cast<search*>(arg);
        const char* path = info->dlpi_name != nullptr && *info->dlpi_name != '\0' ? info->dlpi_name : "/proc/self/exe";
        struct stat st {};
        if (::stat(path, &st) != 0 || st.st_dev != s->dev || st.st_ino != s->inode) return 0;
        s->bias = info->dlpi_addr;
        s->found = true;
        return 1;
      },
      &file);
  *found = file.found;
  return file.bias;
}

// Splits "SYMBOL+OFFSET" (decimal or 0x hex) in place: the '+' becomes the symbol's end. False
// when what follows '+' is not a number.
bool split_offset(char* symbol, std::uint64_t* offset) noexcept {
  *offset = 0;
  char* plus = std::strchr(symbol, '+');
  if (plus == nullptr) return true;
  const char* digits = plus + 1;
  unsigned base = 10;
  if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits += 2;
  }
  if (*digits == '\0') return false;
  std::uint64_t v = 0;
  for (const char* c = digits; *c != '\0'; ++c) {
    unsigned d;
    if (*c >= '0' && *c <= '9') d = static_cast<unsigned>(*c - '0');
    else if (base == 16 && *c >= 'a' && *c <= 'f') d = static_cast<unsigned>(*c - 'a' + 10);
    else if (base == 16 && *c >= 'A' && *c <= 'F') d = static_cast<unsigned>(*c - 'A' + 10);
    else return false;
    if (v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  *plus = '\0';
  *offset = v;
  return true;
}

}  // namespace

namespace faultline::agent::fn_points {

bool install(const char* spec) noexcept {
  if (spec == nullptr || std::strlen(spec) > max_spec || std::strstr(spec, "fn/") == nullptr) return false;
  std::memcpy(spec_copy, spec, std::strlen(spec) + 1);
  detail::fd_writer err(STDERR_FILENO);
  detail::for_each_item(spec_copy, [&](const char* at, std::size_t n) {
    if (breakpoint_count == max_breakpoints || n <= 3 || n - 3 > max_symbol || std::strncmp(at, "fn/", 3) != 0) return;
    breakpoint& b = breakpoints[breakpoint_count];
    std::memcpy(b.point, at, n);
    b.point[n] = '\0';
    char symbol[max_symbol + 1];
    std::memcpy(symbol, at + 3, n - 3);
    symbol[n - 3] = '\0';
    std::uint64_t offset = 0, size = 0;
    if (!split_offset(symbol, &offset)) {
      err.str("faultline-agent: ").str(b.point).str(": the offset after '+' is not a number\n");
      return;
    }
    b.address = resolve(symbol, &size);
    b.item = b.address != 0 ? items.find(spec_copy, b.point) : -1;
    if (b.address == 0) {
      // No function of that name: its compiler clones' entries, else the places the command
      // found it inlined (FAULTLINE_INLINED), each a breakpoint of the same item.
      const int item = items.find(spec_copy, b.point);
      unsigned added = 0;
      const auto add = [&](std::uintptr_t address, const char* where, const char* into) {
        if (breakpoint_count == max_breakpoints || item < 0) return;
        breakpoint& c = breakpoints[breakpoint_count];
        if (&c != &b) std::memcpy(c.point, b.point, sizeof c.point);
        detail::fixed_string<sizeof c.where> text;
        text.str(where);
        if (into != nullptr) text.str(" inlined into ").str(into);
        std::memcpy(c.where, text.c_str(), text.size() + 1);
        c.address = address;
        c.item = item;
        c.original = *reinterpret_cast<const std::uint8_t*>(address);
        ++breakpoint_count;
        ++added;
      };
      for_each_clone(symbol, [&](std::uintptr_t address, const char* name) {
        if (offset == 0) add(address, name, nullptr);
      });
      if (added == 0 && offset == 0) {
        detail::for_each_inlined_site(std::getenv(detail::inlined_env), [&](const detail::inlined_site& site) {
          bool found = false;
          const std::uintptr_t bias = std::strcmp(site.function, symbol) == 0 ? bias_of(site.dev, site.inode, &found) : 0;
          if (found) add(bias + site.entry, site.function, site.caller);
        });
      }
      if (added == 0) {
        err.str("faultline-agent: ").str(b.point).str(offset != 0 ? ": no such function (an offset needs the symbol itself)\n"
                                                                  : ": no such function in the program or its libraries\n");
      }
      return;
    }
    if (b.item < 0) {
      err.str("faultline-agent: ").str(b.point).str(": no such function in the program or its libraries\n");
      return;
    }
    if (offset != 0 && (size == 0 || offset >= size)) {
      err.str("faultline-agent: ").str(b.point).str(": the offset is not inside the function (")
          .dec(static_cast<std::int64_t>(size)).str(" bytes)\n");
      return;
    }
    b.address += offset;
    b.original = *reinterpret_cast<const std::uint8_t*>(b.address);
    ++breakpoint_count;
  });
  if (breakpoint_count == 0) return false;
  struct sigaction trap {};
  trap.sa_sigaction = &on_trap;
  trap.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&trap.sa_mask);
  if (detail::sys::sigaction(SIGTRAP, &trap, &previous_trap) != 0) return false;
  for (unsigned i = 0; i < breakpoint_count; ++i) {
    if (!write_byte(breakpoints[i].address, int3)) {
      err.str("faultline-agent: ").str(breakpoints[i].point).str(": cannot set its breakpoint\n");
    }
  }
  return true;
}

}  // namespace faultline::agent::fn_points
