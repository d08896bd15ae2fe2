// spawn_points_child STEP...: starts processes in the ways spawn/parent stands before, one line
// per step, for spawn_points_test.
//   fork          fork(); the child prints "child PID" and exits 0: "fork rc=0" or "fork errno=NAME"
//   vfork         vfork() + _exit(0) in the child: "vfork rc=0" or "vfork errno=NAME"
//   spawn PROG    posix_spawnp(PROG) and wait: "spawn rc=0 status=N" or "spawn rc=NAME"
//   exec PROG     execvp(PROG): "exec errno=NAME" when it fails (else PROG replaces this process)
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace {

// In a function of its own: vfork's child shares main's frame.
[[gnu::noinline]] void do_vfork() {
  const pid_t pid = vfork();
  if (pid == 0) _exit(0);
  if (pid < 0) {
    std::printf("vfork errno=%s\n", strerrorname_np(errno));
  } else {
    waitpid(pid, nullptr, 0);
    std::printf("vfork rc=0\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* step = argv[i];
    if (std::strcmp(step, "fork") == 0) {
      const pid_t pid = fork();
      if (pid == 0) {
        std::printf("child %d\n", static_cast<int>(getpid()));
        std::fflush(stdout);
        _exit(0);
      }
      if (pid < 0) {
        std::printf("fork errno=%s\n", strerrorname_np(errno));
      } else {
        waitpid(pid, nullptr, 0);
        std::printf("fork rc=0\n");
      }
    } else if (std::strcmp(step, "vfork") == 0) {
      do_vfork();
    } else if (std::strcmp(step, "spawn") == 0 && i + 1 < argc) {
      char* args[] = {argv[++i], nullptr};
      pid_t pid = 0;
      const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args, environ);
      if (rc != 0) {
        std::printf("spawn rc=%s\n", strerrorname_np(rc));
      } else {
        int status = 0;
        waitpid(pid, &status, 0);
        std::printf("spawn rc=0 status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      }
    } else if (std::strcmp(step, "exec") == 0 && i + 1 < argc) {
      char* args[] = {argv[++i], nullptr};
      std::fflush(stdout);
      execvp(args[0], args);
      std::printf("exec errno=%s\n", strerrorname_np(errno));
    } else {
      std::fprintf(stderr, "spawn_points_child: bad step '%s'\n", step);
      return 2;
    }
    std::fflush(stdout);
  }
  return 0;
}
