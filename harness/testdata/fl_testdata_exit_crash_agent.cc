// fl_testdata_exit_crash_agent: fl_testdata_exit_crash as a scenario-like binary: it links the
// agent, installs it, marks "work-end" when its work is done and returns 0 from main; a static
// destructor then crashes (SIGSEGV) in exit_crash_destructor_frame(). With symbols exported the
// agent names that frame itself. Phase file: run, work-end — a crash in phase `exit`.
#include <cstdio>

#include "faults/preload/agent.h"

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
  faultline::agent::install();
  std::printf("all work done: success\n");
  std::fflush(stdout);
  faultline::agent::mark(faultline::agent::marker_work_end);
  return 0;
}
