#include "faults/preload/preload_points.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/host_ids.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/protocol.h"
#include "faults/random.h"

namespace faultline::agent::preload {
namespace {

int points_fd = -1;
faults::generator point_rng;

void sleep_ns(std::uint64_t ns) noexcept {
  timespec left{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

}  // namespace

void open_points_file(const char* run_dir) noexcept {
  if (run_dir == nullptr || points_fd >= 0) return;
  detail::fixed_string<PATH_MAX> path;
  path.str(run_dir).str("/").str(points_file_prefix).dec(static_cast<std::uint64_t>(core::host_pid()));
  if (path.overflowed()) return;
  points_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

void seed_points(const char* seed_text) noexcept {
  std::uint64_t seed = 0;
  if (detail::parse_seed_text(seed_text, seed)) point_rng.reseed(seed);
}

void record_reached(const char* pattern) noexcept {
  if (points_fd < 0) return;
  detail::fixed_string<256> line;
  line.str(pattern).str("\n");
  if (!line.overflowed()) (void)!::write(points_fd, line.c_str(), std::strlen(line.c_str()));
}

std::uint64_t draw() noexcept { return point_rng.next(); }

void act(const detail::point_term& t, const char* name) noexcept {
  switch (t.action) {
    case detail::point_action::off:
    case detail::point_action::fail:      // the caller's: only a call can answer an error
    case detail::point_action::teardown:  // the caller's (cuda_points.cc)
      break;
    case detail::point_action::delay:
      sleep_ns(t.delay_ns);
      break;
    case detail::point_action::print: {
      detail::fd_writer err(STDERR_FILENO);
      err.str("faultline: fault point ").str(name).str(" reached (injected: print)\n");
      break;
    }
    case detail::point_action::abort:
      std::abort();
    case detail::point_action::kill:
      ::kill(::getpid(), SIGKILL);
      break;
    case detail::point_action::stop:  // until SIGCONT or a kill: the harness or a test decides
      ::raise(SIGSTOP);
      break;
  }
}

}  // namespace faultline::agent::preload
