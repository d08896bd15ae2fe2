// clone3 with the child on a stack of the caller's from its first instruction: what CLONE_VM |
// CLONE_VFORK needs when clone3's other flags are wanted (CLONE_INTO_CGROUP, CLONE_PIDFD) — glibc's
// clone() takes no cgroup, and a raw clone3 that returns twice into one frame, as vfork does,
// lets the child overwrite the return address its suspended parent will use. The child runs
// entry(arg), which must not return (it execs or exits), and may make system calls only: it
// shares the caller's memory, thread pointer (errno) included, while the caller waits.
//
// x86-64 only; elsewhere clone_on_stack fails with ENOSYS and callers take their other way.
#pragma once

#include <linux/sched.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstdint>

namespace faultline::harness::detail {

#if defined(__x86_64__)
inline constexpr bool clone_on_stack_supported = true;

/// ca->stack and ca->stack_size must name the child's stack (its top 16-byte aligned). Returns
/// the child's pid in the caller, or -1 with errno.
inline long clone_on_stack(clone_args* ca, void (*entry)(void*), void* arg) noexcept {
  long ret;
  asm volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      // The child: on its own stack, with the registers of the call (but rax, rcx, r11).
      "xor %%ebp, %%ebp\n\t"
      "mov %[arg], %%rdi\n\t"
      "call *%[entry]\n\t"
      "ud2\n\t"
      "1:\n\t"
      : "=a"(ret)
      : "a"(static_cast<long>(SYS_clone3)), "D"(ca), "S"(sizeof *ca), [entry] "r"(entry), [arg] "r"(arg)
      : "rcx", "r11", "memory");
  if (ret < 0) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return ret;
}
#else
inline constexpr bool clone_on_stack_supported = false;

inline long clone_on_stack(clone_args*, void (*)(void*), void*) noexcept {
  errno = ENOSYS;
  return -1;
}
#endif

}  // namespace faultline::harness::detail
