// spawn/parent and process/start (spawn_points.h). fork() is wrapped in C (it returns twice, each
// on its own stack); vfork(), clone() and the exec calls go through trampolines that ask the gate
// and then jump to glibc's function with the caller's registers, stack and return address as they
// were: vfork's child must not return through a frame of ours, clone's child starts on its own
// stack, and every signature passes through unchanged. Without an item, each costs one call and
// a load.
#include "faults/preload/spawn_points.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>

#include "faults/preload/agent.h"
#include "faults/preload/detail/next_symbol.h"
#include "faults/preload/detail/plan_table.h"
#include "faults/preload/detail/sys.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/preload_points.h"

namespace {

namespace detail = faultline::agent::detail;

constexpr unsigned max_spec = 4096;
char spec_copy[max_spec + 1];
bool have_items = false;
detail::plan_table<8> items;

// This process's names for filters: /proc/self/exe's basename and argv[0]'s.
char exe_name[NAME_MAX + 1];
const char* self_names[3] = {nullptr, nullptr, nullptr};

void learn_names() noexcept {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  unsigned k = 0;
  if (n > 0) {
    path[n] = '\0';
    const char* base = ::strrchr(path, '/');
    base = base != nullptr ? base + 1 : path;
    const std::size_t len = ::strnlen(base, NAME_MAX);
    ::memcpy(exe_name, base, len);
    exe_name[len] = '\0';
    self_names[k++] = exe_name;
  }
  if (program_invocation_short_name != nullptr && *program_invocation_short_name != '\0') {
    self_names[k++] = program_invocation_short_name;
  }
}

const char* base_name(const char* path) noexcept {
  const char* slash = ::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// One hit of `point` where `programs` name the process concerned; the errno to fail with, or 0.
int hit(const char* point, const char* const* programs) noexcept {
  const int item = items.find(spec_copy, point, programs);
  if (item < 0) return 0;
  const detail::point_term t = items.hit(item, &faultline::agent::preload::draw,
                                         &faultline::agent::preload::record_reached);
  if (t.action == detail::point_action::fail) return t.code;
  faultline::agent::preload::act(t, point);
  return 0;
}

// process/start's N* counts are the run's: each process reaches the point once, so a count kept
// per process could never be spent ("1*off->stop" would never stop). A claim is one byte appended
// to RUN_DIR/start-count.HASH.TERM: the offset our own write ends at is this claim's place among
// every process's, whatever their order (an O_APPEND write moves the end and our offset as one).
bool claim_run_count(const char* pattern, std::size_t term, std::uint64_t limit) noexcept {
  const char* dir = faultline::agent::run_dir();
  if (dir == nullptr) return false;
  std::uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a of the item's name as written
  for (const char* c = pattern; *c != '\0'; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
  char path[PATH_MAX];
  const std::size_t n = ::strnlen(dir, PATH_MAX);
  static constexpr char name[] = "/start-count.";
  if (n + sizeof name + 16 + 4 > sizeof path) return false;
  ::memcpy(path, dir, n);
  char* at = path + n;
  ::memcpy(at, name, sizeof name - 1);
  at += sizeof name - 1;
  for (int shift = 60; shift >= 0; shift -= 4) *at++ = "0123456789abcdef"[(hash >> shift) & 0xf];
  *at++ = '.';
  *at++ = static_cast<char>('0' + term % 10);
  *at = '\0';
  namespace sys = faultline::agent::detail::sys;
  const int fd = sys::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const char one = '+';
  off_t place = -1;
  if (sys::write(fd, &one, 1) == 1) place = sys::lseek(fd, 0, SEEK_CUR);
  (void)sys::close(fd);
  return place > 0 && static_cast<std::uint64_t>(place) <= limit;
}

void process_start() noexcept {
  const int item = items.find(spec_copy, "process/start", self_names);
  if (item < 0) return;
  const bool run_wide = faultline::agent::run_dir() != nullptr;
  const detail::point_term t = items.hit(item, &faultline::agent::preload::draw,
                                         &faultline::agent::preload::record_reached,
                                         run_wide ? &claim_run_count : nullptr);
  faultline::agent::preload::act(t, "process/start");
}

using fork_fn = pid_t (*)();
fork_fn real_fork = nullptr;

}  // namespace

extern "C" {
void* faultline_real_vfork = nullptr;
void* faultline_real_clone = nullptr;
void* faultline_real_execve = nullptr;
void* faultline_real_execv = nullptr;
void* faultline_real_execvp = nullptr;
void* faultline_real_execvpe = nullptr;
void* faultline_real_posix_spawn = nullptr;
void* faultline_real_posix_spawnp = nullptr;

void faultline_spawn_resolve() noexcept;

// The gate of the trampolines: 0 to go on, else the errno to fail with. `path`: the program to
// be started (execve, posix_spawn), else null.
int faultline_spawn_gate(const char* path) noexcept {
  // A library's constructor that runs before this one's may already spawn.
  if (__atomic_load_n(&faultline_real_posix_spawnp, __ATOMIC_ACQUIRE) == nullptr) faultline_spawn_resolve();
  if (!have_items) return 0;
  const char* target[2] = {path != nullptr ? base_name(path) : nullptr, nullptr};
  return hit("spawn/parent", path != nullptr ? target : self_names);
}

// A refused fork, vfork, clone or execve: -1 with errno.
long faultline_spawn_refused(int err) noexcept {
  errno = err;
  return -1;
}
}

// Each trampoline keeps the six argument registers across the gate, then jumps to glibc's
// function (or answers the refusal). PATH_REG: the register holding the program's path, or
// "none". REFUSE: "errno" (-1 and errno) or "value" (posix_spawn returns the error).
#define FAULTLINE_SPAWN_TRAMPOLINE(name, path_reg, refuse) \
  "    .globl " #name "\n"                                  \
  "    .type " #name ", @function\n"                        \
  #name ":\n"                                               \
  "    pushq %rdi\n"                                        \
  "    pushq %rsi\n"                                        \
  "    pushq %rdx\n"                                        \
  "    pushq %rcx\n"                                        \
  "    pushq %r8\n"                                         \
  "    pushq %r9\n"                                         \
  "    subq $8, %rsp\n"                                     \
  path_reg                                                  \
  "    call faultline_spawn_gate\n"                         \
  "    addq $8, %rsp\n"                                     \
  "    popq %r9\n"                                          \
  "    popq %r8\n"                                          \
  "    popq %rcx\n"                                         \
  "    popq %rdx\n"                                         \
  "    popq %rsi\n"                                         \
  "    popq %rdi\n"                                         \
  "    testl %eax, %eax\n"                                  \
  "    jnz 1f\n"                                            \
  "    jmpq *faultline_real_" #name "(%rip)\n"             \
  "1:\n"                                                    \
  refuse                                                    \
  "    .size " #name ", . - " #name "\n"

#define FAULTLINE_PATH_NONE "    xorl %edi, %edi\n"
#define FAULTLINE_PATH_ARG0 "    movq 48(%rsp), %rdi\n"  // the saved %rdi
#define FAULTLINE_PATH_ARG1 "    movq 40(%rsp), %rdi\n"  // the saved %rsi
#define FAULTLINE_REFUSE_ERRNO \
  "    movl %eax, %edi\n"      \
  "    jmp faultline_spawn_refused\n"
#define FAULTLINE_REFUSE_VALUE "    ret\n"

asm("    .text\n"
    FAULTLINE_SPAWN_TRAMPOLINE(vfork, FAULTLINE_PATH_NONE, FAULTLINE_REFUSE_ERRNO)
    FAULTLINE_SPAWN_TRAMPOLINE(clone, FAULTLINE_PATH_NONE, FAULTLINE_REFUSE_ERRNO)
    FAULTLINE_SPAWN_TRAMPOLINE(execve, FAULTLINE_PATH_ARG0, FAULTLINE_REFUSE_ERRNO)
    FAULTLINE_SPAWN_TRAMPOLINE(execv, FAULTLINE_PATH_ARG0, FAULTLINE_REFUSE_ERRNO)
    FAULTLINE_SPAWN_TRAMPOLINE(execvp, FAULTLINE_PATH_ARG0, FAULTLINE_REFUSE_ERRNO)
    FAULTLINE_SPAWN_TRAMPOLINE(execvpe, FAULTLINE_PATH_ARG0, FAULTLINE_REFUSE_ERRNO)
    FAULTLINE_SPAWN_TRAMPOLINE(posix_spawn, FAULTLINE_PATH_ARG1, FAULTLINE_REFUSE_VALUE)
    FAULTLINE_SPAWN_TRAMPOLINE(posix_spawnp, FAULTLINE_PATH_ARG1, FAULTLINE_REFUSE_VALUE));

extern "C" [[gnu::visibility("default")]] pid_t fork() {
  if (real_fork == nullptr) faultline_spawn_resolve();
  if (have_items) {
    if (const int err = faultline_spawn_gate(nullptr); err != 0) {
      errno = err;
      return -1;
    }
  }
  const pid_t pid = real_fork();
  if (pid == 0 && have_items) process_start();
  return pid;
}

// glibc's functions, resolved by the first wrapper called or the preload's constructor,
// whichever comes first (posix_spawnp last: it says all are there).
extern "C" void faultline_spawn_resolve() noexcept {
  real_fork = reinterpret_cast<fork_fn>(faultline::agent::detail::next_symbol("fork"));
  __atomic_store_n(&faultline_real_vfork, faultline::agent::detail::next_symbol("vfork"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_clone, faultline::agent::detail::next_symbol("clone"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_execve, faultline::agent::detail::next_symbol("execve"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_execv, faultline::agent::detail::next_symbol("execv"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_execvp, faultline::agent::detail::next_symbol("execvp"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_execvpe, faultline::agent::detail::next_symbol("execvpe"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_posix_spawn, faultline::agent::detail::next_symbol("posix_spawn"), __ATOMIC_RELEASE);
  __atomic_store_n(&faultline_real_posix_spawnp, faultline::agent::detail::next_symbol("posix_spawnp"), __ATOMIC_RELEASE);
}

namespace faultline::agent::spawn_points {

bool install(const char* spec) noexcept {
  faultline_spawn_resolve();
  if (spec == nullptr || ::strlen(spec) > max_spec) return false;
  if (::strstr(spec, "spawn/") == nullptr && ::strstr(spec, "process/") == nullptr) return false;
  ::memcpy(spec_copy, spec, ::strlen(spec) + 1);
  learn_names();
  have_items = true;
  process_start();
  return true;
}

}  // namespace faultline::agent::spawn_points
