#include "faults/detail/actions.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/device/device.h"
#include "faults/rendezvous.h"

namespace faultline::faults::detail {

namespace {

void sleep_for_ns(std::int64_t ns) noexcept {
  if (ns <= 0) return;
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  deadline.tv_nsec += static_cast<long>(ns % 1'000'000'000);
  if (deadline.tv_nsec >= 1'000'000'000) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1'000'000'000;
  }
  // An absolute deadline makes a signal-interrupted sleep resume without drifting.
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

void teardown(const char* point, int device) noexcept {
  if (device == current_device) {  // cuda/ points only (the preloaded agent); the CLI refuses it elsewhere
    log_injected("point=%s teardown(device) ignored: a core point names its device", point);
    return;
  }
  log_injected("point=%s action=teardown(%d)", point, device);
  auto backend = core::device::select_backend();
  if (!backend) {
    log_injected("point=%s teardown(%d) failed: %s", point, device, backend.error().to_string().c_str());
    return;
  }
  if (auto s = (*backend)->reset_context(device); !s) {
    log_injected("point=%s teardown(%d) failed: %s", point, device, s.to_string().c_str());
  }
}

}  // namespace

void log_injected(const char* format, ...) noexcept {
  char line[512];
  constexpr char prefix[] = "[faultline:injected] ";
  std::memcpy(line, prefix, sizeof prefix - 1);
  std::size_t used = sizeof prefix - 1;
  va_list args;
  va_start(args, format);
  int n = std::vsnprintf(line + used, sizeof line - used - 1, format, args);
  va_end(args);
  if (n > 0) used += std::min(static_cast<std::size_t>(n), sizeof line - used - 2);
  line[used++] = '\n';
  // One write keeps the line whole when several threads or processes share stderr.
  ssize_t rc;
  do {
    rc = ::write(STDERR_FILENO, line, used);
  } while (rc < 0 && errno == EINTR);
}

action_record make_record(const action& a) noexcept {
  action_record r;
  r.kind = a.kind;
  r.code = a.code;
  r.duration_ns = a.duration.count();
  r.timeout_ns = a.timeout.count();
  r.device = a.device;
  std::size_t n = std::min(a.rendezvous.size(), max_rendezvous_name_size);
  std::memcpy(r.rendezvous, a.rendezvous.data(), n);
  r.rendezvous[n] = '\0';
  return r;
}

points::outcome run_action(const char* point, const action_record& a) noexcept {
  switch (a.kind) {
    case action_kind::off: return {};
    case action_kind::fail: return {true, a.code};
    case action_kind::delay: sleep_for_ns(a.duration_ns); return {true, 0};
    case action_kind::pause: {
      auto s = rendezvous(a.rendezvous, std::chrono::nanoseconds(a.timeout_ns));
      if (s.code() == core::errc::timeout) {
        log_injected("pause %s timed out (point=%s, after %lld ms)", a.rendezvous, point,
                     static_cast<long long>(a.timeout_ns / 1'000'000));
      } else if (!s) {
        log_injected("pause %s failed (point=%s): %s", a.rendezvous, point, s.to_string().c_str());
      }
      return {true, 0};
    }
    case action_kind::kill:
      log_injected("point=%s action=kill", point);
      ::kill(::getpid(), SIGKILL);
      for (;;) ::pause();  // SIGKILL is delivered before kill() returns to user code
    case action_kind::abort:
      log_injected("point=%s action=abort", point);
      std::abort();
    case action_kind::teardown: teardown(point, a.device); return {true, 0};
    case action_kind::print: log_injected("point=%s action=print", point); return {true, 0};
    case action_kind::stop:
      // The whole process stops here until SIGCONT (or a kill): the harness, a test or a person
      // decides what happens next.
      log_injected("point=%s action=stop (pid %d)", point, static_cast<int>(::getpid()));
      ::raise(SIGSTOP);
      return {true, 0};
  }
  return {};
}

}  // namespace faultline::faults::detail
