// faultline_agent_test_plain: a program that knows nothing of faultline, for agent_test to run
// with libfaultline_agent.so preloaded. Never built with sanitizers (the ASan runtime refuses to
// start behind a preloaded library); built with exported symbols so crash frames carry names.
//
//   faultline_agent_test_plain MODE [ARG]
//     return N       print "ok", return N from main
//     exit N         print "ok", call exit(N) from exit_frame() (main never returns)
//     segv           print "working", crash in plain_segv_frame()
//     exit-segv      print "done", return 0; a static object's destructor then crashes in
//                    plain_exit_segv_frame()
//     spawn          posix_spawn this program with "return 0" (the child inherits the
//                    environment, LD_PRELOAD included), wait for it, print "child PID STATUS"
//     hang N         start N threads named "fl-plain-K" blocked in plain_blocked_frame(), print
//                    "ready", block in the main thread too
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

extern char** environ;

namespace agent_test_plain {

std::uintptr_t volatile bad_address = 16;

[[gnu::noinline]] void plain_segv_frame() {
  *reinterpret_cast<volatile int*>(bad_address) = 1;
  asm volatile("" ::: "memory");
}

[[gnu::noinline]] void plain_exit_segv_frame() {
  *reinterpret_cast<volatile int*>(bad_address) = 2;
  asm volatile("" ::: "memory");
}

[[gnu::noinline]] void exit_frame(int code) {
  std::exit(code);
}

int block_fds[2] = {-1, -1};

[[gnu::noinline]] void plain_blocked_frame(std::atomic<int>* started) {
  if (started != nullptr) started->fetch_add(1);  // counted inside the frame a dump must find
  char byte;
  while (::read(block_fds[0], &byte, 1) != 0) {
  }
  asm volatile("" ::: "memory");
}

struct crash_at_exit {
  bool armed = false;
  ~crash_at_exit() {
    if (armed) plain_exit_segv_frame();
  }
};

crash_at_exit exit_crash;

}  // namespace agent_test_plain

int main(int argc, char** argv) {
  using namespace agent_test_plain;
  std::string mode = argc > 1 ? argv[1] : "";
  int arg = argc > 2 ? std::atoi(argv[2]) : 0;
  if (mode == "return") {
    std::printf("ok\n");
    return arg;
  }
  if (mode == "exit") {
    std::printf("ok\n");
    std::fflush(stdout);
    exit_frame(arg);
  }
  if (mode == "segv") {
    std::printf("working\n");
    std::fflush(stdout);
    plain_segv_frame();
    return 0;
  }
  if (mode == "exit-segv") {
    exit_crash.armed = true;
    std::printf("done\n");
    std::fflush(stdout);
    return 0;
  }
  if (mode == "spawn") {
    char* child_argv[] = {argv[0], const_cast<char*>("return"), const_cast<char*>("0"), nullptr};
    pid_t child = 0;
    if (::posix_spawn(&child, argv[0], nullptr, nullptr, child_argv, environ) != 0) return 101;
    int status = 0;
    while (::waitpid(child, &status, 0) < 0) {
    }
    std::printf("child %d %d\n", static_cast<int>(child), status);
    return 0;
  }
  if (mode == "exec") {  // the same process becomes `return ARG`: its markers must carry on
    char* next_argv[] = {argv[0], const_cast<char*>("return"), argv[2], nullptr};
    ::execv(argv[0], next_argv);
    return 103;
  }
  if (mode == "hang") {
    if (::pipe(block_fds) != 0) return 102;
    std::atomic<int> started{0};
    for (int k = 0; k < arg; ++k) {
      std::thread([&started, k] {
        ::pthread_setname_np(::pthread_self(), ("fl-plain-" + std::to_string(k)).c_str());
        plain_blocked_frame(&started);
      }).detach();
    }
    while (started.load() < arg) std::this_thread::yield();
    std::printf("ready\n");
    std::fflush(stdout);
    plain_blocked_frame(nullptr);
    return 0;
  }
  std::fprintf(stderr, "usage: faultline_agent_test_plain MODE [ARG] (see the source)\n");
  return 2;
}
