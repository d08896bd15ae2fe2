// A preload that exports its own dlsym() as HAMi-core's libvgpu.so does: unversioned, reaching
// glibc's through dlvsym, and holding a pthread mutex around RTLD_NEXT lookups. It answers the
// name "faultline_interposed_marker" itself and passes every other lookup on. The tests preload it
// after the agent (and the lock/ points' library): the agent's dlsym must pass lookups on to it
// rather than to glibc's, and the lock wrappers must not find their next functions through it
// (its mutex would call them back, without end).
#include <dlfcn.h>
#include <pthread.h>

#include <cstring>

namespace {
int marker;
pthread_mutex_t next_lock = PTHREAD_MUTEX_INITIALIZER;
}  // namespace

extern "C" [[gnu::visibility("default")]] void* dlsym(void* handle, const char* name) {
  using dlsym_fn = void* (*)(void*, const char*);
  static dlsym_fn next = reinterpret_cast<dlsym_fn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  if (name != nullptr && std::strcmp(name, "faultline_interposed_marker") == 0) return &marker;
  if (next == nullptr) return nullptr;
  if (handle != RTLD_NEXT) return next(handle, name);
  pthread_mutex_lock(&next_lock);
  void* found = next(RTLD_NEXT, name);
  pthread_mutex_unlock(&next_lock);
  return found;
}
