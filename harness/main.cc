// faultline: the command (see cli.h, and `faultline --help`).
//
// main() owns what is process-wide: SIGINT, SIGTERM and SIGHUP are blocked in every thread and
// taken by one thread with sigwait, which asks the campaign to stop (runs in flight are killed
// with their trees; nothing is left behind). A second signal exits at once.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <thread>

#include "harness/cli.h"

int main(int argc, char** argv) {
  static std::atomic<bool> cancel{false};
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::thread([set] {
    for (int n = 0;; ++n) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (n > 0) std::_Exit(faultline::harness::exit_interrupted);
      cancel.store(true);
    }
  }).detach();

  faultline::harness::cli_context ctx{std::cout, std::cerr, ::isatty(1) == 1, ::isatty(2) == 1, &cancel};
  std::vector<std::string> args(argv, argv + argc);
  return faultline::harness::run_cli(args, ctx);
}
