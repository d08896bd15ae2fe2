// fl_core_crasher [--limit BYTES] [--wait-stdin] [--sparse MIB]: dies of SIGSEGV (a write through a null
// pointer, the signal's default action) with RLIMIT_CORE's soft limit at BYTES (default: the hard
// limit). With --wait-stdin it first reads stdin to its end, so that a test can crash several at
// the same moment by closing one pipe. With --sparse it first maps MIB MiB and writes only their
// first byte: the kernel dumps the whole mapping, all but one page of it zeros. Its name is 15 characters: the comm is the whole name.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstdint>
#include <cstring>

// Read at run time, so that the compiler cannot turn the write into a trap (SIGILL).
volatile std::uintptr_t bad_address = 0;

int main(int argc, char** argv) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_CORE, &lim) != 0) return 3;
  lim.rlim_cur = lim.rlim_max;
  bool wait_stdin = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
      lim.rlim_cur = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--sparse") == 0 && i + 1 < argc) {
      const std::size_t bytes = std::strtoull(argv[++i], nullptr, 10) << 20;
      void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map == MAP_FAILED) return 4;
      *static_cast<volatile char*>(map) = 1;
    } else if (std::strcmp(argv[i], "--wait-stdin") == 0) {
      wait_stdin = true;
    } else {
      return 2;
    }
  }
  if (::setrlimit(RLIMIT_CORE, &lim) != 0) return 3;
  if (wait_stdin) {
    char c;
    while (::read(STDIN_FILENO, &c, 1) > 0) {
    }
  }
  std::signal(SIGSEGV, SIG_DFL);
  *reinterpret_cast<volatile int*>(bad_address) = 1;
  return 1;
}
