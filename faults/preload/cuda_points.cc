// cuda/<API> fault points (cuda_points.h). How a driver call is reached:
//
// The preload exports dlsym(). For a name starting "cu" that resolves into libcuda, it hands out
// a stub instead of the function when an item names it, and its own cuGetProcAddress(_v2) for
// those: every entry point the driver then hands out is checked the same way. A stub is 16 bytes
// of code that loads its slot's number and jumps to one common trampoline, which saves the
// argument registers, asks the gate what to do, and either returns the gate's error (fail) or
// restores the registers and jumps to the real function, so that the call's stack arguments and
// return address are the caller's own: any signature passes through unchanged.
//
// dlsym() itself is a trampoline too: glibc answers RTLD_NEXT relative to the caller, found from
// the return address, so every lookup this file does not replace is finished by a jump to the
// next dlsym (glibc's, or a later preload's own) with the caller's return address still on the stack (and answers NULL, never
// jumps to nowhere, in the unheard-of case that glibc's dlsym cannot be found).
//
// Unused (no cuda/ item in FAULTLINE_FAULTS, no --late-cuda), dlsym costs one call and a load,
// and no driver function is replaced; a driver function no item names is never replaced.
//
// Late driver calls (`faultline exec --late-cuda`, watch_late_driver_calls()): every driver entry
// point handed out gets a stub, whose trampoline, until exit begins, only jumps on to the real
// function (a load, a compare and an indirect jump). Once arm_late() has run it calls the real
// function instead, with the caller's stack arguments copied below it, and records a call answered
// CUDA_ERROR_DEINITIALIZED (late-cuda.PID): the driver answers that after its own teardown without
// telling CUPTI, which is why the CUPTI callbacks of late_cuda.cc cannot see such calls — the
// driver calls a program makes through entry points (cudaGetDriverEntryPoint) from a destructor
// that runs after CUDA's exit teardown.
#include "faults/preload/cuda_points.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "faults/families.h"
#include "faults/preload/agent.h"
#include "faults/preload/detail/plan_table.h"
#include "faults/preload/detail/points.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/nccl_points.h"
#include "faults/preload/preload_points.h"

namespace {

namespace detail = faultline::agent::detail;

constexpr unsigned max_items = 16;
constexpr unsigned max_name = 96;
constexpr unsigned max_spec = 4096;
constexpr int driver_deinitialized = 4;  // CUDA_ERROR_DEINITIALIZED

char spec_copy[max_spec + 1];
bool have_items = false;
bool have_runtime_items = false;
bool watch_late = false;  // --late-cuda: every driver entry point gets a stub
// Set on this thread by late_cuda.cc when CUPTI recorded the driver call now returning: the stub
// does not record it again. Initial-exec: no __tls_get_addr, so the library still needs only libc.
[[gnu::tls_model("initial-exec")]] thread_local bool cupti_recorded = false;
detail::plan_table<max_items> items;

// Slots are handed out under this spin lock (never held while acting or calling the driver).
std::atomic_flag busy = ATOMIC_FLAG_INIT;
struct spin_guard {
  spin_guard() noexcept {
    while (busy.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~spin_guard() { busy.clear(std::memory_order_release); }
};

using dlsym_fn = void* (*)(void*, const char*);
using get_proc_v1_fn = int (*)(const char*, void**, int, std::uint64_t);
using get_proc_v2_fn = int (*)(const char*, void**, int, std::uint64_t, void*);
using ctx_get_device_fn = int (*)(int*);
using primary_reset_fn = int (*)(int);

std::atomic<get_proc_v1_fn> real_get_proc_v1{nullptr};
std::atomic<get_proc_v2_fn> real_get_proc_v2{nullptr};
std::atomic<ctx_get_device_fn> ctx_get_device{nullptr};
std::atomic<primary_reset_fn> primary_reset{nullptr};

bool starts_with(const char* s, const char* prefix) noexcept {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// The item (index) whose pattern covers `cuda/<name>` best; -1.
int item_for(const char* name) noexcept {
  if (!have_items || name == nullptr || std::strlen(name) > max_name) return -1;
  detail::fixed_string<max_name + 8> point;
  point.str("cuda/").str(name);
  return items.find(spec_copy, point.c_str());
}

// The better of the items covering two names of one function (the exported name and the one
// asked of cuGetProcAddress): an exact name, else the longer wildcard.
int item_for(const char* exact, const char* asked) noexcept {
  const int a = item_for(exact);
  const int b = asked != nullptr && (exact == nullptr || std::strcmp(exact, asked) != 0) ? item_for(asked) : -1;
  if (a < 0 || b < 0) return a < 0 ? b : a;
  auto rank = [](int i) {
    const char* p = items.pattern(i);
    const std::size_t n = std::strlen(p);
    return n > 0 && p[n - 1] == '*' ? n : SIZE_MAX;
  };
  return rank(a) >= rank(b) ? a : b;
}

// teardown(device|N): the primary context of the caller's current device (or N) is reset, with
// the driver's own functions, just before the call goes on.
void tear_down(int device, const char* point) noexcept {
  detail::fd_writer err(2);
  const ctx_get_device_fn get = ctx_get_device.load(std::memory_order_acquire);
  const primary_reset_fn reset = primary_reset.load(std::memory_order_acquire);
  if (reset == nullptr) {
    err.str("faultline-agent: ").str(point).str(": teardown: cuDevicePrimaryCtxReset_v2 not found\n");
    return;
  }
  if (device == detail::current_device) {
    device = 0;
    if (get != nullptr && get(&device) != 0) device = 0;  // no current context: device 0
  }
  (void)reset(device);
}

struct slot {
  int item = -1;
  char name[max_name + 1] = {};  // the point's function name, as dladdr or the caller named it
};

}  // namespace

// The stubs and their trampoline (x86-64 System V). A stub is 16 bytes; stub i is at
// faultline_cuda_stubs + 16 * i. The trampoline jumps straight on to the real function while no
// item stands on the slot and exit has not begun. Otherwise it keeps the six argument registers,
// %rax (the vector-register count of a variadic call) and %xmm0-7 across the gate, which answers
// -1 (jump on to the real function), -2 (call it and hand its result to faultline_cuda_result)
// or the error to return without calling it. The call copies 16 stack words of the caller's
// (arguments 7 to 22: no driver function takes more) below the trampoline's frame.
extern "C" {
constexpr unsigned faultline_cuda_slot_count = 4096;
void* faultline_cuda_real[faultline_cuda_slot_count];
unsigned char faultline_cuda_item_slot[faultline_cuda_slot_count];  // 1: an item stands on it
unsigned char faultline_cuda_armed = 0;                              // exit has begun (arm_late)
void* faultline_real_dlsym = nullptr;
void faultline_cuda_stubs();
std::int64_t faultline_cuda_gate(std::uint64_t index) noexcept;
void faultline_cuda_result(std::uint64_t index, std::int64_t result) noexcept;
void* faultline_dlsym_hook(void* handle, const char* name) noexcept;
}

asm(R"(
    .text
    .p2align 4
    .hidden faultline_cuda_stubs
    .type faultline_cuda_stubs, @function
faultline_cuda_stubs:
    .set faultline_stub_index, 0
    .rept 4096
    .p2align 4
    movl $faultline_stub_index, %r11d
    jmp faultline_cuda_trampoline
    .set faultline_stub_index, faultline_stub_index + 1
    .endr
    .size faultline_cuda_stubs, . - faultline_cuda_stubs

    .p2align 4
    .type faultline_cuda_trampoline, @function
faultline_cuda_trampoline:
    .cfi_startproc
    cmpb $0, faultline_cuda_armed(%rip)
    jne 4f
    leaq faultline_cuda_item_slot(%rip), %r10
    cmpb $0, (%r10,%r11,1)
    jne 4f
    leaq faultline_cuda_real(%rip), %r10
    jmpq *(%r10,%r11,8)
4:
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    subq $320, %rsp
    movq %rdi, 128(%rsp)
    movq %rsi, 136(%rsp)
    movq %rdx, 144(%rsp)
    movq %rcx, 152(%rsp)
    movq %r8, 160(%rsp)
    movq %r9, 168(%rsp)
    movq %r11, 176(%rsp)
    movq %rax, 184(%rsp)
    movdqu %xmm0, 192(%rsp)
    movdqu %xmm1, 208(%rsp)
    movdqu %xmm2, 224(%rsp)
    movdqu %xmm3, 240(%rsp)
    movdqu %xmm4, 256(%rsp)
    movdqu %xmm5, 272(%rsp)
    movdqu %xmm6, 288(%rsp)
    movdqu %xmm7, 304(%rsp)
    movl %r11d, %edi
    call faultline_cuda_gate
    cmpq $-1, %rax
    je 5f
    cmpq $-2, %rax
    je 6f
    leave
    .cfi_remember_state
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_restore_state
5:
    call faultline_cuda_restore
    movq 176(%rsp), %r11
    leaq faultline_cuda_real(%rip), %r10
    movq (%r10,%r11,8), %r11
    leave
    .cfi_remember_state
    .cfi_def_cfa %rsp, 8
    jmpq *%r11
    .cfi_restore_state
6:
    xorl %ecx, %ecx
8:
    movq 16(%rbp,%rcx,8), %rax
    movq %rax, (%rsp,%rcx,8)
    incl %ecx
    cmpl $16, %ecx
    jb 8b
    call faultline_cuda_restore
    movq 176(%rsp), %r11
    leaq faultline_cuda_real(%rip), %r10
    movq (%r10,%r11,8), %r11
    call *%r11
    movq %rax, 184(%rsp)
    movl 176(%rsp), %edi
    movq %rax, %rsi
    call faultline_cuda_result
    movq 184(%rsp), %rax
    leave
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size faultline_cuda_trampoline, . - faultline_cuda_trampoline

    /* Restores the argument registers saved in the trampoline's frame (called from it: the
       frame is 8 bytes further up). */
    .p2align 4
    .type faultline_cuda_restore, @function
faultline_cuda_restore:
    movq 136(%rsp), %rdi
    movq 144(%rsp), %rsi
    movq 152(%rsp), %rdx
    movq 160(%rsp), %rcx
    movq 168(%rsp), %r8
    movq 176(%rsp), %r9
    movq 192(%rsp), %rax
    movdqu 200(%rsp), %xmm0
    movdqu 216(%rsp), %xmm1
    movdqu 232(%rsp), %xmm2
    movdqu 248(%rsp), %xmm3
    movdqu 264(%rsp), %xmm4
    movdqu 280(%rsp), %xmm5
    movdqu 296(%rsp), %xmm6
    movdqu 312(%rsp), %xmm7
    ret
    .size faultline_cuda_restore, . - faultline_cuda_restore

    .globl dlsym
    .type dlsym, @function
dlsym:
    pushq %rdi
    pushq %rsi
    subq $8, %rsp
    call faultline_dlsym_hook
    addq $8, %rsp
    popq %rsi
    popq %rdi
    testq %rax, %rax
    jz 2f
    ret
2:
    movq faultline_real_dlsym(%rip), %r11
    testq %r11, %r11
    jz 3f
    jmpq *%r11
3:
    ret
    .size dlsym, . - dlsym
)");

namespace {

slot slots[faultline_cuda_slot_count];
std::atomic<unsigned> slot_count{0};

void* stub_address(unsigned i) noexcept {
  return reinterpret_cast<char*>(&faultline_cuda_stubs) + 16 * static_cast<std::uintptr_t>(i);
}

dlsym_fn real_dlsym() noexcept {
  auto f = reinterpret_cast<dlsym_fn>(__atomic_load_n(&faultline_real_dlsym, __ATOMIC_ACQUIRE));
  if (f != nullptr) return f;
  // glibc's dlsym, by its version (dlvsym is not interposed)...
  void* glibc = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (glibc == nullptr) glibc = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  // ...asked for the next dlsym after this library, of any version: the one the program would
  // have had without the agent. That is glibc's, or a later preload's own: HAMi-core's
  // libvgpu.so exports an unversioned dlsym, which a versioned lookup passes over (dlvsym
  // matches hidden), and without it HAMi-core never sees the CUDA runtime's lookups.
  void* next = glibc != nullptr ? reinterpret_cast<dlsym_fn>(glibc)(RTLD_NEXT, "dlsym") : nullptr;
  void* found = next != nullptr ? next : glibc;
  __atomic_store_n(&faultline_real_dlsym, found, __ATOMIC_RELEASE);
  return reinterpret_cast<dlsym_fn>(found);
}

// The name of the libcuda symbol at `fn` when it is one (nullptr otherwise): only the driver's
// functions are ever replaced.
const char* libcuda_name(void* fn) noexcept {
  Dl_info info{};
  if (::dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return nullptr;
  const char* base = std::strrchr(info.dli_fname, '/');
  base = base != nullptr ? base + 1 : info.dli_fname;
  if (!starts_with(base, "libcuda.so")) return nullptr;
  return info.dli_saddr == fn && info.dli_sname != nullptr ? info.dli_sname : "";
}

// Slots by (real function, item): open addressing over twice the slots, under the spin lock.
constexpr unsigned slot_index_size = 2 * faultline_cuda_slot_count;
std::int16_t slot_index[slot_index_size];  // slot + 1; 0: empty

unsigned slot_hash(const void* real, int item) noexcept {
  auto h = reinterpret_cast<std::uintptr_t>(real) * 0x9E3779B97F4A7C15ull + static_cast<unsigned>(item + 1);
  return static_cast<unsigned>(h >> 40) % slot_index_size;
}

// The stub standing for `real` (a driver function named `exact`, asked for as `asked`), or
// `real` itself when neither an item nor --late-cuda asks for one, or the slots ran out.
void* wrap(void* real, const char* exact, const char* asked) noexcept {
  if (real == nullptr) return real;
  const int item = item_for(exact != nullptr && *exact != '\0' ? exact : nullptr, asked);
  if (item < 0 && !watch_late) return real;
  spin_guard g;
  unsigned at = slot_hash(real, item);
  for (; slot_index[at] != 0; at = (at + 1) % slot_index_size) {
    const unsigned i = static_cast<unsigned>(slot_index[at] - 1);
    if (faultline_cuda_real[i] == real && slots[i].item == item) return stub_address(i);
  }
  const unsigned n = slot_count.load(std::memory_order_relaxed);
  if (n == faultline_cuda_slot_count) return real;
  slot& s = slots[n];
  s.item = item;
  const char* name = exact != nullptr && *exact != '\0' ? exact : asked;
  std::strncpy(s.name, name != nullptr ? name : "?", max_name);
  faultline_cuda_real[n] = real;
  faultline_cuda_item_slot[n] = item >= 0 ? 1 : 0;
  slot_index[at] = static_cast<std::int16_t>(n + 1);
  slot_count.store(n + 1, std::memory_order_release);
  return stub_address(n);
}

void remember_driver(void* handle) noexcept {
  if (primary_reset.load(std::memory_order_acquire) != nullptr) return;
  dlsym_fn look = real_dlsym();
  ctx_get_device.store(reinterpret_cast<ctx_get_device_fn>(look(handle, "cuCtxGetDevice")), std::memory_order_release);
  primary_reset.store(reinterpret_cast<primary_reset_fn>(look(handle, "cuDevicePrimaryCtxReset_v2")),
                      std::memory_order_release);
}

void* replace_get_proc(void* real, const char* exact);

// The driver's cuGetProcAddress, seen through: each function it hands out is checked.
void* checked(const char* symbol, void* fn) noexcept {
  if (fn == nullptr || symbol == nullptr) return fn;
  const char* exact = libcuda_name(fn);
  if (exact == nullptr) return fn;
  if (starts_with(symbol, "cuGetProcAddress")) return replace_get_proc(fn, exact);
  return wrap(fn, exact, symbol);
}

int get_proc_v1(const char* symbol, void** pfn, int version, std::uint64_t flags) {
  const int r = real_get_proc_v1.load(std::memory_order_acquire)(symbol, pfn, version, flags);
  if (r == 0 && pfn != nullptr) *pfn = checked(symbol, *pfn);
  return r;
}

int get_proc_v2(const char* symbol, void** pfn, int version, std::uint64_t flags, void* status) {
  const int r = real_get_proc_v2.load(std::memory_order_acquire)(symbol, pfn, version, flags, status);
  if (r == 0 && pfn != nullptr) *pfn = checked(symbol, *pfn);
  return r;
}

void* replace_get_proc(void* real, const char* exact) {
  if (std::strcmp(exact, "cuGetProcAddress_v2") == 0) {
    real_get_proc_v2.store(reinterpret_cast<get_proc_v2_fn>(real), std::memory_order_release);
    return reinterpret_cast<void*>(&get_proc_v2);
  }
  if (std::strcmp(exact, "cuGetProcAddress") == 0) {
    real_get_proc_v1.store(reinterpret_cast<get_proc_v1_fn>(real), std::memory_order_release);
    return reinterpret_cast<void*>(&get_proc_v1);
  }
  return real;  // a version this agent does not know: left alone
}

}  // namespace

extern "C" void* faultline_dlsym_hook(void* handle, const char* name) noexcept {
  dlsym_fn look = real_dlsym();
  // An NCCL function asked of a libnccl handle: the agent's, which goes on to libnccl's
  // (nccl_points.h). Always: the rank's state is kept with or without nccl/ items.
  if (look != nullptr && name != nullptr && handle != RTLD_NEXT && std::strncmp(name, "nccl", 4) == 0) {
    return faultline::agent::nccl_points::wrap_dlsym(name, look(handle, name));
  }
  if ((!have_items && !watch_late) || look == nullptr || handle == RTLD_NEXT || name == nullptr || name[0] != 'c' ||
      name[1] != 'u') {
    return nullptr;
  }
  void* real = look(handle, name);
  if (real == nullptr) return nullptr;
  const char* exact = libcuda_name(real);
  if (exact == nullptr) return nullptr;
  remember_driver(handle);
  void* replaced = starts_with(name, "cuGetProcAddress") ? replace_get_proc(real, exact) : wrap(real, exact, name);
  return replaced != real ? replaced : nullptr;
}

// -1: jump on to the real function; -2: call it and pass its result to faultline_cuda_result;
// anything else: return that without calling it.
extern "C" std::int64_t faultline_cuda_gate(std::uint64_t index) noexcept {
  const slot& s = slots[index];
  const std::int64_t go_on = __atomic_load_n(&faultline_cuda_armed, __ATOMIC_RELAXED) != 0 ? -2 : -1;
  if (s.item < 0) return go_on;
  const detail::point_term t =
      items.hit(s.item, &faultline::agent::preload::draw, &faultline::agent::preload::record_reached);
  if (t.action == detail::point_action::off) return go_on;
  detail::fixed_string<max_name + 8> point;
  point.str("cuda/").str(s.name);
  switch (t.action) {
    case detail::point_action::fail:
      return t.code;
    case detail::point_action::teardown:
      tear_down(t.device, point.c_str());
      return go_on;
    default:
      faultline::agent::preload::act(t, point.c_str());
      return go_on;
  }
}

// A driver call made after exit began has returned `result`: one answered "deinitialized" is late.
extern "C" void faultline_cuda_result(std::uint64_t index, std::int64_t result) noexcept {
  const bool seen = cupti_recorded;
  cupti_recorded = false;
  if (static_cast<int>(result) != driver_deinitialized || seen || index >= faultline_cuda_slot_count) return;
  (void)faultline::agent::record_late_cuda(slots[index].name, static_cast<int>(result));
}

namespace faultline::agent::cuda_points {

bool install(const char* spec) noexcept {
  if (spec == nullptr || std::strlen(spec) > max_spec) return false;
  // Any item whose pattern could cover a cuda/ name, and one that covers a runtime function: the
  // families' table (faults/families.h).
  bool any = false, runtime = false;
  detail::for_each_item(spec, [&](const char* at, std::size_t n) {
    const std::string_view pattern(at, n);
    any = any || faultline::faults::pattern_reaches(pattern, faultline::faults::injector::cuda);
    runtime = runtime || faultline::faults::pattern_reaches(pattern, faultline::faults::family_named("cuda/cuda"));
  });
  if (!any) return false;
  std::memcpy(spec_copy, spec, std::strlen(spec) + 1);
  have_runtime_items = runtime;
  have_items = true;
  return true;
}

bool runtime_points() noexcept { return have_runtime_items; }

void watch_late_driver_calls() noexcept { watch_late = true; }

void arm_late() noexcept {
  if (watch_late) __atomic_store_n(&faultline_cuda_armed, 1, __ATOMIC_RELEASE);
}

void note_cupti_recorded() noexcept {
  if (watch_late) cupti_recorded = true;
}

int runtime_item(const char* cupti_name) noexcept {
  if (!have_runtime_items || cupti_name == nullptr) return -1;
  // CUPTI names a runtime function with its version: cudaFree_v3020. The point is cuda/cudaFree.
  char base[max_name + 1];
  const std::size_t n = std::strlen(cupti_name);
  if (n > max_name) return -1;
  std::memcpy(base, cupti_name, n + 1);
  if (char* v = std::strrchr(base, '_'); v != nullptr && v[1] == 'v' && v[2] >= '0' && v[2] <= '9') *v = '\0';
  return item_for(base, cupti_name);
}

void runtime_hit(int item, const char* cupti_name) noexcept {
  if (item < 0) return;
  const detail::point_term t = items.hit(item, &preload::draw, &preload::record_reached);
  if (t.action == detail::point_action::off) return;
  detail::fixed_string<max_name + 8> point;
  point.str("cuda/").str(cupti_name);
  if (t.action == detail::point_action::teardown) {
    tear_down(t.device, point.c_str());
  } else {
    preload::act(t, point.c_str());  // fail cannot be done here: the CLI refuses it
  }
}

}  // namespace faultline::agent::cuda_points
