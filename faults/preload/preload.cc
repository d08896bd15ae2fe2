// libfaultline_agent.so: the agent for programs run under `faultline exec`, through LD_PRELOAD.
// A constructor installs the agent; __libc_start_main is interposed to wrap main() so that its
// return is marked "main-returned"; exit() is interposed to mark "exit". chdir() and fchdir() are
// interposed so that a process that leaves its run's core home says where it stands (cwd.PID,
// protocol.h). Everything else is the
// same agent that scenario binaries link statically. Without FAULTLINE_RUN_DIR it changes
// nothing: install() does nothing and the wrappers only forward. Children inherit LD_PRELOAD
// (and the agent, after fork()), and write their own PID files.
//
// Two fault points of its own make exit races reproducible in any program, named in
// FAULTLINE_FAULTS like every other point (actions off, delay, abort, kill, print):
//   exit/start  when exit() begins (main returned or exit() was called), before any handler;
//   exit/end    after every atexit handler, static destructor and shared-library destructor has
//               run, just before the process ends: exit/end=delay(100ms) keeps the process alive
//               in its torn-down state while its other threads run into what was torn down.
// exit/end is an exit handler registered before __libc_start_main registers the loader's, so it
// runs after all of them. Neither is reached by _exit(), quick_exit() or a fatal signal.
// When nothing names them, they cost one branch at exit. The cuda/<API> points stand before CUDA
// calls (cuda_points.h; they export dlsym), and the agent is also the CUDA injection library for
// late calls (late_cuda.h).
//
// Built with hidden visibility: only the interposed C symbols and InitializeInjection are
// exported (preload.map), so a program that also links the agent statically keeps its own copy
// distinct from this one.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <time.h>

#include <cerrno>
#include <climits>

#include "faults/families.h"
#include "core/points/random.h"
#include "core/host_ids.h"
#include "faults/preload/agent.h"
#include "faults/preload/detail/next_symbol.h"
#include "faults/preload/detail/points.h"
#include "faults/preload/detail/sys.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/cuda_points.h"
#include "faults/preload/fn_points.h"
#include "faults/preload/late_cuda.h"
#include "faults/preload/nccl_points.h"
#include "faults/preload/posix_points.h"
#include "faults/preload/preload_points.h"
#include "faults/preload/spawn_points.h"
#include "faults/preload/protocol.h"

extern "C" int __cxa_atexit(void (*fn)(void*), void* arg, void* dso_handle);

namespace {

using main_fn = int (*)(int, char**, char**);
using start_main_fn = int (*)(main_fn, int, char**, void (*)(), void (*)(), void (*)(), void*);
using exit_fn = void (*)(int);

main_fn real_main = nullptr;
exit_fn real_exit = nullptr;

namespace detail = faultline::agent::detail;

detail::point_plan exit_start_plan;
detail::point_plan exit_end_plan;
// One hit of an exit point: at most once per process each (exit runs once).
void hit_exit_point(detail::point_plan& plan, const char* name) {
  if (!plan.enabled) return;
  faultline::agent::preload::record_reached(plan.pattern);
  faultline::agent::preload::act(detail::evaluate_plan(plan, &faultline::agent::preload::draw), name);
}

void exit_end_handler(void*) { hit_exit_point(exit_end_plan, "exit/end"); }

[[noreturn]] void die(const char* what) {
  const char prefix[] = "faultline-agent (preload): cannot find ";
  (void)!detail::sys::write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  (void)!detail::sys::write(STDERR_FILENO, what, std::strlen(what));
  (void)!detail::sys::write(STDERR_FILENO, "\n", 1);
  std::abort();
}

exit_fn next_exit() {
  if (real_exit == nullptr) {
    real_exit = reinterpret_cast<exit_fn>(faultline::agent::detail::next_symbol("exit"));
    if (real_exit == nullptr) die("exit");
  }
  return real_exit;
}

[[gnu::constructor]] void preload_init() {
  next_exit();  // resolve now: dlsym at exit time would run in a process that may be damaged
  if (faultline::agent::install().status != faultline::agent::install_status::installed) return;
#if FAULTLINE_LATE_CUDA && FAULTLINE_CUDA_POINTS
  // --late-cuda (the agent is CUDA's injection library, FAULTLINE_LATE_CUDA is not 0): the driver's
  // entry points get stubs now, before CUDA looks them up, that check results once exit begins.
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  const char* late = std::getenv("FAULTLINE_LATE_CUDA");
  if (injection != nullptr && *injection != '\0' && (late == nullptr || std::strcmp(late, "0") != 0)) {
    faultline::agent::cuda_points::watch_late_driver_calls();
  }
#endif
  const char* spec = std::getenv("FAULTLINE_FAULTS");
#if FAULTLINE_CUDA_POINTS
  // Before the return below: a rank keeps its NCCL state (nccl.PID) with or without a spec.
  const bool nccl = faultline::agent::nccl_points::install(spec);
#else
  const bool nccl = false;
#endif
  if (spec == nullptr || *spec == '\0') return;
  detail::plan_point(spec, "exit/start", exit_start_plan);
  detail::plan_point(spec, "exit/end", exit_end_plan);
#if FAULTLINE_CUDA_POINTS
  const bool cuda = faultline::agent::cuda_points::install(spec);
  const bool spawn = faultline::faults::spec_reaches(spec, faultline::faults::injector::spawn);
#else
  const bool cuda = false, spawn = false;
#endif
  // Which injectors the spec needs: the families' table (faults/families.h).
  const bool posix = faultline::faults::spec_reaches(spec, faultline::faults::injector::posix);
  const bool fn = faultline::faults::spec_reaches(spec, faultline::faults::injector::fn);
  if (exit_start_plan.enabled || exit_end_plan.enabled || cuda || spawn || posix || fn || nccl) {
    faultline::agent::preload::open_points_file(faultline::agent::run_dir());
  }
  faultline::agent::preload::seed_points(std::getenv("FAULTLINE_SEED"));
#if FAULTLINE_CUDA_POINTS
  (void)faultline::agent::fn_points::install(spec);  // after the agent's crash handlers: it chains to them
  // It hits process/start for this process, with the points file open and the seed set.
  if (spawn) (void)faultline::agent::spawn_points::install(spec);
#endif
  // Last: from here on libfiu asks the agent at every wrapped libc call, and only the program's
  // calls should be asked about. The agent's own system calls never pass libfiu's wrappers
  // (detail/sys.h), but the set-up above also calls into ld.so (dlsym, dl_iterate_phdr), which
  // may allocate through the wrapped malloc.
  if (posix) (void)faultline::agent::posix_points::install(spec);
}

int wrapped_main(int argc, char** argv, char** envp) {
  int status = real_main(argc, argv, envp);
  faultline::agent::mark(faultline::agent::marker_main_returned);
#if FAULTLINE_LATE_CUDA
  faultline::agent::arm_late_cuda();
#endif
  // What __libc_start_main does with main's result, but through the interposed exit() so that
  // "exit" follows "main-returned".
  std::exit(status);
}

}  // namespace

namespace faultline::agent {
bool started_main() noexcept { return real_main != nullptr; }
}  // namespace faultline::agent

// For the lock/ points' library (preload_points.cc): which stream this process draws from.
extern "C" [[gnu::visibility("default")]] long faultline_agent_process_index() noexcept {
  return faultline::agent::process_index();
}

extern "C" [[gnu::visibility("default")]] int __libc_start_main(
    main_fn main, int argc, char** argv, void (*init)(), void (*fini)(), void (*rtld_fini)(),
    void* stack_end) {
  auto next = reinterpret_cast<start_main_fn>(faultline::agent::detail::next_symbol("__libc_start_main"));
  if (next == nullptr) die("__libc_start_main");
  real_main = main;
  // Registered before the real __libc_start_main registers the loader's exit handler, and before
  // any static constructor of the program runs: it runs after all of them.
  if (exit_end_plan.enabled) __cxa_atexit(&exit_end_handler, nullptr, nullptr);
  return next(&wrapped_main, argc, argv, init, fini, rtld_fini, stack_end);
}

extern "C" [[gnu::visibility("default")]] void exit(int status) noexcept {
  faultline::agent::mark(faultline::agent::marker_exit);
#if FAULTLINE_CUDA_POINTS
  faultline::agent::nccl_points::note_exit(status);
#endif
#if FAULTLINE_LATE_CUDA
  faultline::agent::arm_late_cuda();
#endif
  hit_exit_point(exit_start_plan, "exit/start");
  next_exit()(status);
  ::_exit(status);  // not reached: the real exit() does not return
}

// The working directory decides where a relative core_pattern puts a core: the agent records
// where a process that left its run's core home stands (agent.h, working_directory_changed).
extern "C" [[gnu::visibility("default")]] int chdir(const char* path) noexcept {
  // The system call itself, not libc's next chdir: no symbol lookup (dlsym wants more stack than a
  // vfork()/CLONE_VM child may have, and the first chdir can be made in one).
  const long result = ::syscall(SYS_chdir, path);
  if (result == 0) {
    const int saved_errno = errno;
    faultline::agent::working_directory_changed();
    errno = saved_errno;
  }
  return static_cast<int>(result);
}

extern "C" [[gnu::visibility("default")]] int fchdir(int fd) noexcept {
  const long result = ::syscall(SYS_fchdir, fd);
  if (result == 0) {
    const int saved_errno = errno;
    faultline::agent::working_directory_changed();
    errno = saved_errno;
  }
  return static_cast<int>(result);
}
