// fl_nccl_allreduce_local: runs nccl_allreduce.cc built as a library (libfl_nccl_allreduce_plugin.so,
// in ../lib beside this program's folder), loaded with dlopen(RTLD_LOCAL) as Python loads an
// extension: its libnccl.so.2 is then outside the global scope, where a preload's RTLD_NEXT
// cannot see it (the case of libtorch_cuda.so). Arguments as fl_nccl_allreduce's.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 2;
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));
  const std::string plugin = dir.substr(0, dir.rfind('/')) + "/lib/libfl_nccl_allreduce_plugin.so";
  void* lib = ::dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", plugin.c_str(), ::dlerror());
    return 2;
  }
  auto entry = reinterpret_cast<int (*)(int, char**)>(::dlsym(lib, "fl_nccl_allreduce_main"));
  if (entry == nullptr) return 2;
  return entry(argc, argv);
}
