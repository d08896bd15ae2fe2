// spawn/ and process/ fault points for any program (spawn_points.cc): the preloaded agent stands
// where a program starts processes and where each new process starts.
//
//   spawn/parent   in the parent, just before fork(), vfork(), clone(), execve(), execv(),
//                  execvp(), execvpe(), posix_spawn() or posix_spawnp() (the calls through the
//                  dynamic linker: glibc's system(), popen() and the variadic execl*() call inside
//                  libc and are not seen): delay, kill, abort, print,
//                  fail(<errno>) — the call is not made and fails with that errno (posix_spawn
//                  returns it). A filter names the program to be started, by the basename of the
//                  path given to execve/posix_spawn (spawn/parent@python3), or for fork, vfork
//                  and clone the parent's own.
//   process/start  in every new process of the tree before main (or an interpreter) runs: in
//                  the agent's constructor after an exec, in the child after fork(): delay,
//                  kill, abort, print. A filter names the process's program: the basename of
//                  /proc/self/exe or of argv[0] (process/start@python3 covers python3.12 run as
//                  python3; process/start@python3* either).
// Python's multiprocessing children are reached with every start method: spawn and forkserver
// exec a new interpreter (which loads the agent), fork and the forkserver's children come from
// fork(). x86-64 only (vfork, clone and the exec calls pass through trampolines).
#pragma once

namespace faultline::agent::spawn_points {

/// Reads the spawn/ and process/ items of FAULTLINE_FAULTS (`spec`, copied) and, when one
/// applies, hits process/start for this process. True when there is an item. Called once, from
/// the preload's constructor, with the agent installed.
bool install(const char* spec) noexcept;

}  // namespace faultline::agent::spawn_points
