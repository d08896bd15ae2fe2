// lock/ fault points for any program: libfaultline_lock_points.so (lock_points.cc), preloaded
// beside the agent by `faultline exec` (and agent-env) only when the spec names lock/ points, so
// that a program's lock calls pay nothing otherwise.
//
//   lock/<kind>/wait      before a waiting call: delay, kill, abort, print, fail(ERRNO) (the call
//                         is not made and fails with that errno)
//   lock/<kind>/acquired  just after a lock was taken (a wait, timed wait or try succeeded; a
//                         robust mutex's EOWNERDEAD counts): kill leaves it held by a dead process
//   lock/<kind>/release   just before a lock is released: delay, kill, abort, print
// kinds:
//   sem    sem_wait, sem_timedwait, sem_clockwait, sem_trywait (acquired), sem_post (release)
//   mutex  pthread_mutex_lock, _timedlock, _clocklock, _trylock (acquired), _unlock (release)
//   file   flock, lockf, fcntl/fcntl64 record locks (F_SETLK[W], F_OFD_SETLK[W])
// Only objects another process can wait on are points: a process-shared semaphore (sem_open's,
// or sem_init with pshared), a process-shared mutex, every file lock; a thread-private mutex or
// semaphore is passed through untouched. A filter names a function among the caller's first 10 frames
// (its name in the ELF symbol table: .symtab, else the .symtab of the separate debug file a
// stripped module names (.gnu_debuglink, build id), else .dynsym; so static and hidden functions count: lock/sem/acquired@lock_shrreg; a trailing '*' takes a prefix; C++
// functions by their mangled name). Each module's table is read once: at start for the modules
// loaded then, for a dlopen'ed one when a frame first falls in it. Optimized code (issue 39): a
// filter names the function's compiler clones (f.isra.0, f.constprop.0, f.part.0, f.cold), a
// call of it that tail-called the lock call (the instruction before the lock call's return
// address calls f, and f's code jumps to that lock call: x86-64 code, one level), and the inlined
// copies of it that `faultline exec` found in the DWARF (FAULTLINE_INLINED,
// detail/inlined_sites.h). The print line and points.PID say what matched ("reached in
// give_slot.isra.0, a tail call").
// Calls libc makes inside itself are not seen. x86-64 glibc (the process-shared tests read
// glibc's sem_t and pthread_mutex_t layouts).
#pragma once
