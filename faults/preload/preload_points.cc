#include "faults/preload/preload_points.h"

#include <fcntl.h>
#include <pthread.h>
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

namespace {

std::uint64_t base_seed = 0;
pid_t seed_owner = 0;  // the run's first process: it draws from the seed itself

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void reseed_for(pid_t pid) noexcept {
  point_rng.reseed(pid == seed_owner ? base_seed : mix(base_seed ^ mix(static_cast<std::uint64_t>(pid))));
}

void reseed_in_child() noexcept { reseed_for(core::host_pid()); }

}  // namespace

void seed_points(const char* seed_text) noexcept {
  if (!detail::parse_seed_text(seed_text, base_seed)) return;
  // FAULTLINE_SEED_PID names the run's first process: the first library to seed in it sets it,
  // and every process started from it inherits it.
  const pid_t self = core::host_pid();
  const char* owner = std::getenv("FAULTLINE_SEED_PID");
  std::uint64_t parsed = 0;
  if (owner == nullptr || !detail::parse_seed_text(owner, parsed)) {
    detail::fixed_string<24> text;
    text.dec(static_cast<std::uint64_t>(self));
    ::setenv("FAULTLINE_SEED_PID", text.c_str(), 0);
    parsed = static_cast<std::uint64_t>(self);
  }
  seed_owner = static_cast<pid_t>(parsed);
  reseed_for(self);
  static bool registered = false;
  if (!registered) registered = ::pthread_atfork(nullptr, nullptr, &reseed_in_child) == 0;
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
