// fl_testdata_hang_grandchild: a run that hangs with its descendants out of reach of a process
// group kill — the cuda-python #2124 shape of a child that outlives its parent's join. The
// process forks a child that calls setsid() (its own session and process group) and forks a
// grandchild that sleeps forever; the child waits for the grandchild and the parent waits for
// the child, so all three block forever. The runner must dump their stacks, then find and kill
// all three (it is their subreaper) and reap them.
//
//   fl_testdata_hang_grandchild [--print-pids FILE]
//     FILE gets three lines, "parent PID", "child PID", "grandchild PID", written by the child
//     once the grandchild exists (through FILE.tmp and a rename, so FILE appears complete).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

[[noreturn]] void block_forever() {
  for (;;) ::pause();
}

void wait_for(pid_t pid) {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

bool write_pids(const std::string& file, pid_t parent, pid_t child, pid_t grandchild) {
  std::string tmp = file + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) return false;
  std::fprintf(out, "parent %d\nchild %d\ngrandchild %d\n", static_cast<int>(parent),
               static_cast<int>(child), static_cast<int>(grandchild));
  bool ok = std::fclose(out) == 0;
  return ok && std::rename(tmp.c_str(), file.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pid_file;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--print-pids") == 0 && i + 1 < argc) {
      pid_file = argv[++i];
    } else {
      std::fprintf(stderr, "usage: fl_testdata_hang_grandchild [--print-pids FILE]\n");
      return 2;
    }
  }
  std::printf("starting\n");
  std::fflush(stdout);
  pid_t parent = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    ::setsid();
    pid_t grandchild = ::fork();
    if (grandchild < 0) ::_exit(1);
    if (grandchild == 0) block_forever();
    if (!pid_file.empty() && !write_pids(pid_file, parent, ::getpid(), grandchild)) {
      std::fprintf(stderr, "cannot write %s: %s\n", pid_file.c_str(), std::strerror(errno));
    }
    wait_for(grandchild);
    block_forever();
  }
  wait_for(child);
  block_forever();
}
