// fl_testdata_crash_in_work: a run that crashes during its work (outcome `crash`, phase `run`):
// SIGSEGV from a write through a null volatile pointer in crash_in_work_frame(). Symbols are not
// exported, so under the preloaded agent the crash frame reads "??" and the runner must name it
// with addr2line from MODULE+OFFSET.
#include <cstdio>

[[gnu::noinline]] void crash_in_work_frame() {
  int* volatile target = nullptr;  // volatile: the compiler cannot prove the store faults
  *target = 1;
  asm volatile("" ::: "memory");  // keep the frame (no tail call)
}

int main() {
  std::printf("starting work\n");
  std::fflush(stdout);
  crash_in_work_frame();
  std::printf("not reached\n");
  return 0;
}
