#include "faults/preload/preload_points.h"

#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/host_ids.h"
#include "faults/preload/detail/next_symbol.h"
#include "faults/preload/detail/sys.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/protocol.h"
#include "core/points/random.h"

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
  points_fd = detail::sys::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

namespace {

std::uint64_t base_seed = 0;
// Whether this process's stream was picked (again false in a forked child): picked at the first
// draw, when the agent has its place among the run's processes.
std::atomic<bool> stream_picked{false};

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

using index_fn = long (*)() noexcept;
// The agent's faultline_agent_process_index, looked up when seeding (in a constructor): the first
// draw may come from a signal handler (the fn/ points' SIGTRAP handler), where dlsym must not run.
index_fn process_index = nullptr;

void pick_stream() noexcept {
  const index_fn index = process_index;
  const long k = index != nullptr ? index() : -1;
  // The run's first process draws from the seed itself, every other from the seed and its place.
  // Without a place (no phase table in the run directory: faultline's runner always makes one)
  // every process draws from the seed itself.
  point_rng.reseed(k <= 0 ? base_seed : mix(base_seed ^ mix(static_cast<std::uint64_t>(k))));
  stream_picked.store(true, std::memory_order_release);
}

void repick_in_child() noexcept { stream_picked.store(false, std::memory_order_relaxed); }

}  // namespace

void seed_points(const char* seed_text) noexcept {
  if (!detail::parse_seed_text(seed_text, base_seed)) return;
  point_rng.reseed(base_seed);
  stream_picked.store(false, std::memory_order_relaxed);
  detail::dlsym_fn look = detail::glibc_dlsym();
  process_index =
      reinterpret_cast<index_fn>(look != nullptr ? look(RTLD_DEFAULT, "faultline_agent_process_index") : nullptr);
  static bool registered = false;
  if (!registered) registered = ::pthread_atfork(nullptr, nullptr, &repick_in_child) == 0;
}

void record_reached(const char* pattern) noexcept {
  if (points_fd < 0) return;
  detail::fixed_string<256> line;
  line.str(pattern).str("\n");
  if (!line.overflowed()) (void)!detail::sys::write(points_fd, line.c_str(), std::strlen(line.c_str()));
}

std::uint64_t draw() noexcept {
  if (!stream_picked.load(std::memory_order_acquire)) pick_stream();
  return point_rng.next();
}

void act(const detail::point_term& t, const char* name, const char* where) noexcept {
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
      err.str("faultline: fault point ").str(name).str(" reached");
      if (where != nullptr) err.str(" in ").str(where);
      err.str(" (injected: print)\n");
      break;
    }
    case detail::point_action::abort:
      std::abort();
    case detail::point_action::kill:
      detail::sys::kill(::getpid(), SIGKILL);
      break;
    case detail::point_action::stop:  // until SIGCONT or a kill: the harness or a test decides
      ::raise(SIGSTOP);
      break;
  }
}

}  // namespace faultline::agent::preload
