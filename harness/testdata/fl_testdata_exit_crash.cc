// fl_testdata_exit_crash: "crashes only at exit after printing success" — the RMM #2367 shape.
// main prints "all work done: success" and returns 0; then, during exit(), a static object's
// destructor writes through a null pointer in exit_crash_destructor_frame() and the process
// dies by SIGSEGV. Under the preloaded agent the phase file reads run, main-returned, exit, so
// the runner classifies it `crash` in phase `exit`.
#include <cstdio>

[[gnu::noinline]] void exit_crash_destructor_frame() {
  int* volatile target = nullptr;
  *target = 1;
  asm volatile("" ::: "memory");
}

namespace {

struct torn_down_at_exit {
  ~torn_down_at_exit() { exit_crash_destructor_frame(); }
};

torn_down_at_exit pool;

}  // namespace

int main() {
  std::printf("all work done: success\n");
  std::fflush(stdout);  // exit() flushes stdio only after the destructors, which crash first
  return 0;
}
