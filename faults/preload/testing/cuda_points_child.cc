// cuda_points_child LIBCUDA STEP...: loads LIBCUDA (the fake driver, testing/fake_libcuda.cc) as
// the CUDA runtime does — dlopen, dlsym("cuGetProcAddress_v2"), then entry points through it —
// and runs each STEP, printing one line per step; agent_test's cuda/ point tests read them.
//   free         cuMemFree (through cuGetProcAddress) of 0x1234: "free rc=N"
//   free-direct  cuMemFree_v2 through dlsym: "free-direct rc=N"
//   alloc        cuMemAlloc of 64 bytes: "alloc rc=N ptr=0x..."
//   many         cuManyArgs with eight integers and three doubles: "many rc=N"
//   device=N     makes N the current device (for teardown(device))
//   deinit       tears the fake driver down: cuMemFree then answers CUDA_ERROR_DEINITIALIZED (4)
//   at-exit      the steps after it run from an exit handler registered now, after main returned
//   report       the fake's counters: "fake: frees=... resets=... many=..."
//   interposed   whether dlsym(RTLD_DEFAULT, "faultline_interposed_marker") answers: only a
//                preloaded dlsym of the test's (testing/dlsym_interposer.cc) does: "interposed yes|no"
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using get_proc_fn = int (*)(const char*, void**, int, std::uint64_t, void*);

int run_steps(int first, int last);
void* cuda = nullptr;
get_proc_fn get_proc = nullptr;
char** steps = nullptr;
int step_count = 0;
int exit_steps = -1;  // the first step run at exit

void run_exit_steps() {
  if (run_steps(exit_steps, step_count) != 0) std::_Exit(2);
}

void* must(void* p, const char* what) {
  if (p == nullptr) {
    std::fprintf(stderr, "cuda_points_child: %s not found: %s\n", what, dlerror());
    std::exit(2);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cuda_points_child LIBCUDA STEP...\n");
    return 2;
  }
  cuda = must(dlopen(argv[1], RTLD_NOW | RTLD_LOCAL), "the driver");
  get_proc = reinterpret_cast<get_proc_fn>(must(dlsym(cuda, "cuGetProcAddress_v2"), "cuGetProcAddress_v2"));
  steps = argv;
  step_count = argc;
  return run_steps(2, argc);
}

namespace {

int run_steps(int first, int last) {
  auto proc = [&](const char* name) {
    void* fn = nullptr;
    int status = 0;
    if (get_proc(name, &fn, 13000, 0, &status) != 0) must(nullptr, name);
    return fn;
  };
  for (int i = first; i < last; ++i) {
    const char* step = steps[i];
    if (std::strcmp(step, "at-exit") == 0) {
      exit_steps = i + 1;
      std::atexit(&run_exit_steps);
      return 0;
    }
    if (std::strcmp(step, "free") == 0) {
      auto f = reinterpret_cast<int (*)(unsigned long long)>(proc("cuMemFree"));
      std::printf("free rc=%d\n", f(0x1234));
    } else if (std::strcmp(step, "free-direct") == 0) {
      auto f = reinterpret_cast<int (*)(unsigned long long)>(must(dlsym(cuda, "cuMemFree_v2"), "cuMemFree_v2"));
      std::printf("free-direct rc=%d\n", f(0x5678));
    } else if (std::strcmp(step, "alloc") == 0) {
      auto f = reinterpret_cast<int (*)(unsigned long long*, std::size_t)>(proc("cuMemAlloc"));
      unsigned long long p = 0;
      const int rc = f(&p, 64);
      std::printf("alloc rc=%d ptr=0x%llx\n", rc, p);
    } else if (std::strcmp(step, "many") == 0) {
      auto f = reinterpret_cast<int (*)(long, long, long, long, long, long, long, long, double, double, double)>(
          proc("cuManyArgs"));
      std::printf("many rc=%d\n", f(1, 2, 3, 4, 5, 6, 7, 8, 0.5, 0.25, 0.125));
    } else if (std::strncmp(step, "device=", 7) == 0) {
      auto f = reinterpret_cast<int (*)(int)>(must(dlsym(cuda, "cuCtxSetCurrentDevice_fake"), "device setter"));
      f(std::atoi(step + 7));
    } else if (std::strcmp(step, "deinit") == 0) {
      reinterpret_cast<int (*)()>(must(dlsym(cuda, "cuFakeDeinit_fake"), "cuFakeDeinit_fake"))();
    } else if (std::strcmp(step, "interposed") == 0) {
      std::printf("interposed %s\n", dlsym(RTLD_DEFAULT, "faultline_interposed_marker") != nullptr ? "yes" : "no");
    } else if (std::strcmp(step, "report") == 0) {
      reinterpret_cast<void (*)()>(must(dlsym(cuda, "fake_cuda_report"), "fake_cuda_report"))();
    } else {
      std::fprintf(stderr, "cuda_points_child: unknown step '%s'\n", step);
      return 2;
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
