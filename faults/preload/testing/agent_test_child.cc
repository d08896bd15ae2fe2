// faultline_agent_test_child: the program agent_test runs in a child process to watch the agent
// from outside. It links the agent (built like the test, so sanitizer builds check the agent
// too) and is built with exported symbols so that the crash handler can name its frames.
//
//   faultline_agent_test_child MODE [ARG]
//     install           print install()'s status and errno ("installed 0"), twice, then exit 0
//     marks             install, mark "work-end" and "custom", try invalid markers, exit 0
//     segv              install, mark "work-end", write through a bad pointer in segv_frame(int)
//     segv-unchecked    install (printing the status, whatever it is), then crash like segv
//     raise SIG         install, raise(SIG) in raise_frame()
//     thread-segv       install, crash on a thread named "fl-crasher" in thread_segv_frame()
//     stack-overflow    install, unbounded recursion in recurse_frame() on the main thread
//     chain-segv        install a SIGSEGV handler of its own (prints, exits 42), then install the
//                       agent, then crash: the agent must report and then hand over
//     fork-segv         install, fork a child (single-threaded here) that crashes in segv_frame;
//                       print "child PID" and the child's raw wait status, exit 0
//     hang N            install, start N threads "fl-worker-K" (each with prepare_thread()), one
//                       "fl-bare" (no alternate stack) and one "fl-masked" (stack-dump signal
//                       blocked), all blocked in blocked_frame(); then print "ready" and block
//                       in main_wait_frame()
//     hang-stuck        install, start "fl-worker-0" as above and "fl-stuck", which waits for a
//                       clone(CLONE_VM | CLONE_VFORK) child that sleeps until this process is
//                       gone: a vfork wait holds off every signal but SIGKILL, so the thread
//                       cannot answer a stack dump though it does not block the signal
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "faults/preload/agent.h"

// The sanitizers' own deadly-signal handling would turn the crashes this program makes into
// "exit 1" (ASan) or "exit 66" (TSan); the agent's behaviour is what is under test here.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() {
  return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0:"
         "allow_user_segv_handler=1:detect_leaks=0";
}
#endif
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() {
  return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0:"
         "allow_user_segv_handler=1";
}
#endif

namespace agent = faultline::agent;

namespace agent_test_child {

// Not null: UBSan checks stores through null pointers, and the crash must be a real fault. The
// first page is never mapped.
std::uintptr_t volatile bad_address = 16;

[[gnu::noinline]] void segv_frame(int value) {
  *reinterpret_cast<volatile int*>(bad_address) = value;
  asm volatile("" ::: "memory");  // keep the frame (no tail call)
}

[[gnu::noinline]] void raise_frame(int sig) {
  std::raise(sig);
  asm volatile("" ::: "memory");
}

[[gnu::noinline]] void thread_segv_frame() {
  segv_frame(7);
  asm volatile("" ::: "memory");
}

int volatile stop_depth = -1;  // never reached; tells the compiler the recursion can end

[[gnu::noinline]] int recurse_frame(int depth) {
  if (depth == stop_depth) return 0;
  volatile char pad[512];
  pad[0] = static_cast<char>(depth);
  int below = recurse_frame(depth + 1);
  return below + pad[0];  // used after the call: no tail recursion
}

// Blocks forever on a condition that never comes, the way hung threads usually wait (a lost
// wake-up, a join that never returns). A condition variable rather than a read also lets TSan,
// which defers signals to its next interceptor call, deliver the stack-dump signal at once.
std::mutex never_mutex;
std::condition_variable never_signalled;

// `started` is counted from inside the frame, so that a dump taken once all have counted finds
// every thread within it.
[[gnu::noinline]] void blocked_frame(std::atomic<int>* started) {
  if (started != nullptr) started->fetch_add(1);
  std::unique_lock<std::mutex> lock(never_mutex);
  for (;;) never_signalled.wait(lock);
}

// The clone child: raw system calls only (it shares the parent's memory). It outlives the wait
// as long as the process that made it lives.
int stuck_child(void* parent) {
  pid_t owner = static_cast<pid_t>(reinterpret_cast<std::intptr_t>(parent));
  while (static_cast<pid_t>(::syscall(SYS_getppid)) == owner) {
    timespec tick{0, 50 * 1000 * 1000};
    ::syscall(SYS_nanosleep, &tick, nullptr);
  }
  ::syscall(SYS_exit, 0);
  return 0;
}

[[gnu::noinline]] void stuck_frame(std::atomic<int>* started) {
  static char child_stack[64 * 1024];
  started->fetch_add(1);
  void* parent = reinterpret_cast<void*>(static_cast<std::intptr_t>(::getpid()));
  ::clone(&stuck_child, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
          parent);
  asm volatile("" ::: "memory");
}

[[gnu::noinline]] void main_wait_frame() {
  std::printf("ready\n");
  std::fflush(stdout);
  blocked_frame(nullptr);
  asm volatile("" ::: "memory");
}

}  // namespace agent_test_child

namespace {

using namespace agent_test_child;

const char* status_name(agent::install_status status) {
  switch (status) {
    case agent::install_status::installed: return "installed";
    case agent::install_status::disabled: return "disabled";
    case agent::install_status::failed: return "failed";
  }
  return "?";
}

void must_install() {
  agent::install_result result = agent::install();
  if (result.status != agent::install_status::installed) {
    std::fprintf(stderr, "agent not installed: %s %d\n", status_name(result.status), result.error);
    std::exit(100);
  }
}

void previous_segv_handler(int) {
  const char text[] = "previous handler ran\n";
  (void)!::write(STDOUT_FILENO, text, sizeof(text) - 1);
  ::_exit(42);
}

int run_hang(int workers) {
  must_install();
  std::atomic<int> started{0};
  auto start = [&](std::string name, bool alt_stack, bool masked) {
    std::thread thread([&started, name, alt_stack, masked] {
      ::pthread_setname_np(::pthread_self(), name.c_str());
      if (alt_stack) agent::prepare_thread();
      if (masked) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, agent::stack_dump_signal());
        ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
      }
      blocked_frame(&started);
    });
    thread.detach();
  };
  for (int k = 0; k < workers; ++k) start("fl-worker-" + std::to_string(k), true, false);
  start("fl-bare", false, false);
  start("fl-masked", false, true);
  while (started.load() < workers + 2) std::this_thread::yield();
  main_wait_frame();
  return 0;
}

int run_hang_stuck() {
  must_install();
  std::atomic<int> started{0};
  std::thread([&started] {
    ::pthread_setname_np(::pthread_self(), "fl-worker-0");
    blocked_frame(&started);
  }).detach();
  std::thread([&started] {
    ::pthread_setname_np(::pthread_self(), "fl-stuck");
    stuck_frame(&started);
  }).detach();
  // The stuck thread counts itself just before clone(): give it time to get into the wait.
  while (started.load() < 2) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  main_wait_frame();
  return 0;
}

int usage() {
  std::fprintf(stderr, "usage: faultline_agent_test_child MODE [ARG] (see the source)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string mode = argv[1];
  if (mode == "install") {
    for (int i = 0; i < 2; ++i) {
      agent::install_result result = agent::install();
      std::printf("%s %d\n", status_name(result.status), result.error);
    }
    std::printf("run_dir %s\n", agent::run_dir() ? agent::run_dir() : "(none)");
    return 0;
  }
  if (mode == "marks") {
    must_install();
    std::printf("%d", agent::mark(agent::marker_work_end) ? 1 : 0);
    std::printf("%d", agent::mark("custom") ? 1 : 0);
    std::printf("%d", agent::mark("") ? 1 : 0);
    std::printf("%d", agent::mark("two\nlines") ? 1 : 0);
    std::printf("%d", agent::mark(nullptr) ? 1 : 0);
    std::printf("%d\n", agent::mark(std::string(201, 'x').c_str()) ? 1 : 0);
    return 0;
  }
  if (mode == "segv") {
    must_install();
    agent::mark(agent::marker_work_end);
    segv_frame(1);
    return 0;
  }
  if (mode == "segv-unchecked") {
    agent::install_result result = agent::install();
    std::printf("%s\n", status_name(result.status));
    std::fflush(stdout);
    segv_frame(2);
    return 0;
  }
  if (mode == "raise" && argc == 3) {
    must_install();
    raise_frame(std::atoi(argv[2]));
    return 0;
  }
  if (mode == "thread-segv") {
    must_install();
    std::thread crasher([] {
      ::pthread_setname_np(::pthread_self(), "fl-crasher");
      thread_segv_frame();
    });
    crasher.join();
    return 0;
  }
  if (mode == "stack-overflow") {
    must_install();
    return recurse_frame(0);
  }
  if (mode == "chain-segv") {
    struct sigaction previous {};
    previous.sa_handler = &previous_segv_handler;
    sigemptyset(&previous.sa_mask);
    ::sigaction(SIGSEGV, &previous, nullptr);
    must_install();
    segv_frame(3);
    return 0;
  }
  if (mode == "fork-segv") {
    must_install();
    std::fflush(stdout);
    pid_t child = ::fork();
    if (child < 0) return 102;
    if (child == 0) {
      segv_frame(5);
      ::_exit(0);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0) {
    }
    std::printf("child %d %d\n", static_cast<int>(child), status);
    return 0;
  }
  if (mode == "hang" && argc == 3) return run_hang(std::atoi(argv[2]));
  if (mode == "hang-stuck") return run_hang_stuck();
  return usage();
}
