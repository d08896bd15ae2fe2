// fl_testdata_leak_child: a run that passes but leaks a process — outcome `leak`. It starts a
// daemon the classic way (fork; the child calls setsid() and forks again; the middle process
// exits), so the daemon is orphaned and, outside the runner, reparented to init. The daemon
// sleeps 300 s. The main process exits 0 right after the middle process has exited.
//
//   fl_testdata_leak_child [--keep-stdio] [--print-pids FILE]
//     --keep-stdio   the daemon keeps stdout/stderr (by default it points them at /dev/null,
//                    as daemons do); kept, they hold the runner's output pipes open
//     --print-pids   FILE gets "daemon PID\n" (through FILE.tmp and a rename) before the main
//                    process exits
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  bool keep_stdio = false;
  std::string pid_file;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keep-stdio") == 0) {
      keep_stdio = true;
    } else if (std::strcmp(argv[i], "--print-pids") == 0 && i + 1 < argc) {
      pid_file = argv[++i];
    } else {
      std::fprintf(stderr, "usage: fl_testdata_leak_child [--keep-stdio] [--print-pids FILE]\n");
      return 2;
    }
  }
  std::fflush(stdout);
  // The middle process reports the daemon's pid through this pipe.
  int report[2];
  if (::pipe(report) != 0) {
    std::perror("pipe");
    return 1;
  }
  pid_t middle = ::fork();
  if (middle < 0) {
    std::perror("fork");
    return 1;
  }
  if (middle == 0) {
    ::close(report[0]);
    ::setsid();
    pid_t daemon = ::fork();
    if (daemon < 0) ::_exit(1);
    if (daemon == 0) {
      ::close(report[1]);
      if (!keep_stdio) {
        int null_fd = ::open("/dev/null", O_RDWR);
        if (null_fd >= 0) {
          ::dup2(null_fd, STDIN_FILENO);
          ::dup2(null_fd, STDOUT_FILENO);
          ::dup2(null_fd, STDERR_FILENO);
          if (null_fd > STDERR_FILENO) ::close(null_fd);
        }
      }
      unsigned left = 300;
      while (left > 0) left = ::sleep(left);
      ::_exit(0);
    }
    (void)!::write(report[1], &daemon, sizeof(daemon));
    ::_exit(0);
  }
  ::close(report[1]);
  pid_t daemon = -1;
  ssize_t got = ::read(report[0], &daemon, sizeof(daemon));
  ::close(report[0]);
  int status;
  while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof(daemon)) && !pid_file.empty()) {
    std::string tmp = pid_file + ".tmp";
    if (FILE* out = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(out, "daemon %d\n", static_cast<int>(daemon));
      if (std::fclose(out) == 0) std::rename(tmp.c_str(), pid_file.c_str());
    }
  }
  std::printf("done, leaving a daemon behind\n");
  return 0;
}
