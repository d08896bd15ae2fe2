// fl_testdata_child_crash: a program that passes although a process of it crashes, as a death
// test does: it forks a child that takes SIGSEGV in child_crash_frame(), checks that the child
// died by that signal, and exits 0 (1 when the child did not crash). A passing run whose child
// left a core: the harness must take the core away (no file in the user's directory, none held
// open) without counting the run as a crash.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

[[gnu::noinline]] void child_crash_frame() {
  int* volatile target = nullptr;  // volatile: the compiler cannot prove the store faults
  *target = 1;
  asm volatile("" ::: "memory");  // keep the frame (no tail call)
}

int main() {
  const pid_t child = ::fork();
  if (child < 0) return 2;
  if (child == 0) {
    child_crash_frame();
    ::_exit(0);
  }
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return 2;
  const bool crashed = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
  std::printf("child %s\n", crashed ? "crashed as expected" : "did not crash");
  return crashed ? 0 : 1;
}
