// fl_testdata_agent_hang: a hung scenario-like process for in-process stack dumps. It links the
// agent and installs it, starts two threads named "fl-hang-a" and "fl-hang-b" that block in
// agent_hang_thread_frame(), prints "ready" once both run, and blocks in agent_hang_main_frame().
// On the stack-dump signal the agent appends all three stacks to stacks.PID and the process goes
// on hanging until the runner kills it. Symbols are exported and every thread has the agent's
// alternate stack, so the agent names every frame of ours demangled ("agent_hang_thread_frame()").
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "faults/preload/agent.h"

namespace {

// Never written: every read on it blocks forever. The agent's handler restarts the read.
int never_ready[2] = {-1, -1};
std::atomic<int> started{0};

}  // namespace

[[gnu::noinline]] void agent_hang_thread_frame() {
  started.fetch_add(1);
  char byte;
  while (::read(never_ready[0], &byte, 1) != 0) {
  }
  asm volatile("" ::: "memory");
}

[[gnu::noinline]] void agent_hang_main_frame() {
  std::printf("ready\n");  // from inside the frame: a dump sent on "ready" finds main here
  std::fflush(stdout);
  char byte;
  while (::read(never_ready[0], &byte, 1) != 0) {
  }
  asm volatile("" ::: "memory");
}

int main() {
  faultline::agent::install();
  if (::pipe(never_ready) != 0) {
    std::perror("pipe");
    return 1;
  }
  for (const char* name : {"fl-hang-a", "fl-hang-b"}) {
    std::thread([name] {
      ::pthread_setname_np(::pthread_self(), name);
      faultline::agent::prepare_thread();  // with the agent's stack, its names come demangled
      agent_hang_thread_frame();
    }).detach();
  }
  while (started.load() < 2) std::this_thread::yield();
  agent_hang_main_frame();
  return 0;
}
