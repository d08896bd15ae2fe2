// The system calls faultline's own code makes inside a user's process (the agent's records and
// reports, its actions, the fault engine's record of points reached), made around every library
// that wraps libc: the user's posix/ faults are the user's, and none of them may take a count or a
// probability draw from faultline's own I/O, or cost it a record.
//
//   int fd = detail::sys::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
//   detail::sys::write(fd, line, n);
//   detail::sys::close(fd);
//
// Why system calls rather than the functions libc names them by: libfiu's POSIX preload
// (fiu_posix_preload.so) defines open, read, write, close, ftruncate, mmap, munmap, mprotect,
// kill, sigaction, ... for the whole process, and asks libfiu at each call that is not made inside one
// of its own wrappers. The alternatives do not hold:
//  - dlsym(RTLD_NEXT, "write") from the agent finds libfiu's wrapper, not libc's: faultline
//    preloads libfiu after the agent (and after the lock/ points' library), as LD_PRELOAD lists
//    them; a lookup in libc's own handle would work, at the price of a dlopen and a table of
//    pointers filled before any of them is needed (a fork handler, a signal handler);
//  - libfiu's recursion guard (_fiu_called, a thread-local counter its wrappers test) is private
//    to its preload: not in its headers, named differently from one version to the next, and the
//    agent would have to find a thread-local variable of another library by name.
// A system call is what the libc function would have made (these are thin wrappers in glibc), so
// it costs the same; it needs no lookup, so it works in constructors, fork handlers and signal
// handlers alike, is async-signal-safe, and bypasses any other interposer of the program as well.
// sigaction is the exception: rt_sigaction needs the restorer that glibc supplies, so it goes to
// glibc's own entry point under its other exported name (__sigaction), which no wrapper of
// `sigaction` replaces.
//
// Under ASan or TSan (the statically linked agent in sanitizer builds) every call goes to libc
// as before: the sanitizers track memory mappings and descriptors through their interceptors,
// and libfiu's preload is never in such a process (the sanitizer runtimes refuse to start behind
// a preloaded library).
//
// Every function returns what the libc function of the same name returns, with errno set the
// same way (-1 / MAP_FAILED and errno on failure).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FAULTLINE_SYS_THROUGH_LIBC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define FAULTLINE_SYS_THROUGH_LIBC 1
#endif
#endif
#ifndef FAULTLINE_SYS_THROUGH_LIBC
#define FAULTLINE_SYS_THROUGH_LIBC 0
#endif

extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*) noexcept;

namespace faultline::agent::detail::sys {

inline int open(const char* path, int flags, mode_t mode = 0) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::open(path, flags, mode);
#else
  return static_cast<int>(::syscall(SYS_openat, AT_FDCWD, path, flags, mode));
#endif
}

inline ssize_t read(int fd, void* data, std::size_t n) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::read(fd, data, n);
#else
  return static_cast<ssize_t>(::syscall(SYS_read, fd, data, n));
#endif
}

inline ssize_t write(int fd, const void* data, std::size_t n) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::write(fd, data, n);
#else
  return static_cast<ssize_t>(::syscall(SYS_write, fd, data, n));
#endif
}

inline int rename(const char* from, const char* to) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::rename(from, to);
#else
  return static_cast<int>(::syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to));
#endif
}

inline int close(int fd) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::close(fd);
#else
  return static_cast<int>(::syscall(SYS_close, fd));
#endif
}

inline off_t lseek(int fd, off_t offset, int whence) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::lseek(fd, offset, whence);
#else
  return static_cast<off_t>(::syscall(SYS_lseek, fd, offset, whence));
#endif
}

inline int ftruncate(int fd, off_t bytes) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::ftruncate(fd, bytes);
#else
  return static_cast<int>(::syscall(SYS_ftruncate, fd, bytes));
#endif
}

inline void* mmap(void* at, std::size_t n, int prot, int flags, int fd, off_t offset) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::mmap(at, n, prot, flags, fd, offset);
#else
  return reinterpret_cast<void*>(::syscall(SYS_mmap, at, n, prot, flags, fd, offset));
#endif
}

inline int munmap(void* at, std::size_t n) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::munmap(at, n);
#else
  return static_cast<int>(::syscall(SYS_munmap, at, n));
#endif
}

inline int mprotect(void* at, std::size_t n, int prot) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::mprotect(at, n, prot);
#else
  return static_cast<int>(::syscall(SYS_mprotect, at, n, prot));
#endif
}

inline int kill(pid_t pid, int sig) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::kill(pid, sig);
#else
  return static_cast<int>(::syscall(SYS_kill, pid, sig));
#endif
}

inline int sigaction(int sig, const struct sigaction* action, struct sigaction* previous) noexcept {
#if FAULTLINE_SYS_THROUGH_LIBC
  return ::sigaction(sig, action, previous);
#else
  return ::__sigaction(sig, action, previous);
#endif
}

}  // namespace faultline::agent::detail::sys
