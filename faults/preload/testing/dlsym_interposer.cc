// A preload that exports its own dlsym() as HAMi-core's libvgpu.so does (unversioned, reaching
// glibc's through dlvsym): it answers the name "faultline_interposed_marker" itself and passes
// every other lookup on. cuda_points_test preloads it after the agent, whose dlsym must pass
// lookups on to it rather than to glibc's.
#include <dlfcn.h>

#include <cstring>

namespace {
int marker;
}

extern "C" [[gnu::visibility("default")]] void* dlsym(void* handle, const char* name) {
  using dlsym_fn = void* (*)(void*, const char*);
  static dlsym_fn next = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  if (name != nullptr && std::strcmp(name, "faultline_interposed_marker") == 0) return &marker;
  return next != nullptr ? next(handle, name) : nullptr;
}
