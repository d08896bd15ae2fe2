// posix_writer FILE N [crash]: a program that writes a file, for posix_points_test. It writes N
// lines to FILE, one write(2) each, and says by its exit status which write failed first, since
// under posix/io/rw/write faults it may have no working stdout or stderr to say it on:
//   0        every write succeeded
//   K        write K (1..N) failed with ENOSPC
//   100 + K  write K failed with another errno
//   99       FILE could not be opened, or bad arguments
// With `crash` it then takes SIGSEGV (whatever the writes did), for the agent's crash report; with
// `hang` it then sleeps for 30 s, for the agent's stack dump.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>

int main(int argc, char** argv) {
  if (argc < 3) return 99;
  const int n = std::atoi(argv[2]);
  if (n < 1 || n > 50) return 99;
  const int fd = ::open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 99;
  int status = 0;
  for (int k = 1; k <= n; ++k) {
    if (::write(fd, "line\n", 5) != 5) {
      status = errno == ENOSPC ? k : 100 + k;
      break;
    }
  }
  ::close(fd);
  if (argc > 3 && std::strcmp(argv[3], "crash") == 0) std::raise(SIGSEGV);
  if (argc > 3 && std::strcmp(argv[3], "hang") == 0) {
    const std::time_t until = std::time(nullptr) + 30;
    while (std::time(nullptr) < until) {
      const timespec second{1, 0};
      ::nanosleep(&second, nullptr);  // the stack dump's signal ends a sleep early
    }
  }
  return status;
}
