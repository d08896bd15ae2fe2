// fl_testdata_pass: a run that passes. Prints "ok" and exits 0, optionally after a sleep (for
// the runner's timeout, --jobs and progress tests).
//
//   fl_testdata_pass [--sleep-ms N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

int usage() {
  std::fprintf(stderr, "usage: fl_testdata_pass [--sleep-ms N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  long sleep_ms = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sleep-ms") != 0 || i + 1 >= argc) return usage();
    char* end = nullptr;
    sleep_ms = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || sleep_ms < 0) return usage();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  std::printf("ok\n");
  return 0;
}
