// next_symbol(NAME): what dlsym(RTLD_NEXT, NAME) answers for the calling library, asked of glibc's
// own dlsym. A preloaded library must not find its next definitions through the dlsym symbol:
// the agent exports one (cuda_points.cc), and a program's own preload may export another
// (HAMi-core's libvgpu.so does) that locks a pthread mutex, which the lock/ points' wrapper
// would resolve through it again, without end.
#pragma once

#include <dlfcn.h>

namespace faultline::agent::detail {

/// The definition of `name` after the calling library in the lookup order, or nullptr. Inline
/// and hidden: each library has its own copy, so glibc reads "next" relative to that library.
using dlsym_fn = void* (*)(void*, const char*);

/// glibc's own dlsym (nullptr if it cannot be found), looked up once.
inline dlsym_fn glibc_dlsym() noexcept {
  // Constant-initialised (no guard: the agent needs no libstdc++); a race only looks it up twice.
  static dlsym_fn glibc = nullptr;
  dlsym_fn f = __atomic_load_n(&glibc, __ATOMIC_ACQUIRE);
  if (f == nullptr) {
    // dlvsym is not interposed, and a versioned lookup finds glibc's dlsym past any unversioned one.
    void* found = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (found == nullptr) found = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    f = reinterpret_cast<dlsym_fn>(found);
    __atomic_store_n(&glibc, f, __ATOMIC_RELEASE);
  }
  return f;
}

inline void* next_symbol(const char* name) noexcept {
  dlsym_fn f = glibc_dlsym();
  return f != nullptr ? f(RTLD_NEXT, name) : nullptr;
}

}  // namespace faultline::agent::detail
