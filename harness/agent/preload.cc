// libfaultline_agent.so: the agent for programs run under `faultline exec`, through LD_PRELOAD.
// A constructor installs the agent; __libc_start_main is interposed to wrap main() so that its
// return is marked "main-returned"; exit() is interposed to mark "exit". Everything else is the
// same agent that scenario binaries link statically. Without FAULTLINE_RUN_DIR it changes
// nothing: install() does nothing and the wrappers only forward. Children inherit LD_PRELOAD
// (and the agent, after fork()), and write their own PID files.
//
// Built with hidden visibility: only the two interposed C symbols are exported, so a program
// that also links the agent statically keeps its own copy distinct from this one.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "harness/agent/agent.h"
#include "harness/agent/protocol.h"

namespace {

using main_fn = int (*)(int, char**, char**);
using start_main_fn = int (*)(main_fn, int, char**, void (*)(), void (*)(), void (*)(), void*);
using exit_fn = void (*)(int);

main_fn real_main = nullptr;
exit_fn real_exit = nullptr;

[[noreturn]] void die(const char* what) {
  const char prefix[] = "faultline-agent (preload): cannot find ";
  (void)!::write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  (void)!::write(STDERR_FILENO, what, std::strlen(what));
  (void)!::write(STDERR_FILENO, "\n", 1);
  std::abort();
}

exit_fn next_exit() {
  if (real_exit == nullptr) {
    real_exit = reinterpret_cast<exit_fn>(::dlsym(RTLD_NEXT, "exit"));
    if (real_exit == nullptr) die("exit");
  }
  return real_exit;
}

[[gnu::constructor]] void preload_init() {
  next_exit();  // resolve now: dlsym at exit time would run in a process that may be damaged
  faultline::agent::install();
}

int wrapped_main(int argc, char** argv, char** envp) {
  int status = real_main(argc, argv, envp);
  faultline::agent::mark(faultline::agent::marker_main_returned);
  // What __libc_start_main does with main's result, but through the interposed exit() so that
  // "exit" follows "main-returned".
  std::exit(status);
}

}  // namespace

extern "C" [[gnu::visibility("default")]] int __libc_start_main(
    main_fn main, int argc, char** argv, void (*init)(), void (*fini)(), void (*rtld_fini)(),
    void* stack_end) {
  auto next = reinterpret_cast<start_main_fn>(::dlsym(RTLD_NEXT, "__libc_start_main"));
  if (next == nullptr) die("__libc_start_main");
  real_main = main;
  return next(&wrapped_main, argc, argv, init, fini, rtld_fini, stack_end);
}

extern "C" [[gnu::visibility("default")]] void exit(int status) noexcept {
  faultline::agent::mark(faultline::agent::marker_exit);
  next_exit()(status);
  ::_exit(status);  // not reached: the real exit() does not return
}
