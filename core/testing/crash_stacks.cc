#include "core/testing/crash_stacks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace faultline::core::testing {
namespace {

constexpr int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// Filled before the handler is installed; the handler only reads them (and the pid buffer).
char g_tool[512];
char g_tool_name[16];
char g_pid[24];
char* g_argv[8];
volatile sig_atomic_t g_entered = 0;

void say(const char* s) noexcept {
  for (std::size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Decimal, into `out` (24 bytes); async-signal-safe.
void format_number(unsigned long v, char* out) noexcept {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = '\0';
}

void die_of(int sig) noexcept {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, sig);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  raise(sig);
}

void on_fatal_signal(int sig, siginfo_t*, void*) {
  if (g_entered != 0) {  // a second thread, or a fault inside this handler: die as before
    die_of(sig);
    return;
  }
  g_entered = 1;
  const int saved_errno = errno;
  format_number(static_cast<unsigned long>(::getpid()), g_pid);  // a fork's copy names itself
  char num[24];
  format_number(static_cast<unsigned long>(sig), num);
  say("\n*** pid ");
  say(g_pid);
  say(" dies of SIG");
  say(sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?");
  say(" (signal ");
  say(num);
  say("); every thread's stack, by ");
  say(g_tool_name);
  say(":\n");
  (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // Yama: let the reader attach
  const pid_t reader = vfork();
  if (reader == 0) {
    (void)dup2(STDERR_FILENO, STDOUT_FILENO);
    execv(g_tool, g_argv);
    _exit(127);
  }
  if (reader > 0) {
    // Bounded: a reader that cannot attach must not turn a crash into a hang.
    for (int waited_ms = 0;; waited_ms += 10) {
      int st = 0;
      const pid_t r = waitpid(reader, &st, WNOHANG);
      if (r == reader || (r < 0 && errno != EINTR)) break;
      if (waited_ms >= 30000) {
        kill(reader, SIGKILL);
        while (waitpid(reader, &st, 0) < 0 && errno == EINTR) {
        }
        say("*** the stack reader did not finish within 30 s\n");
        break;
      }
      struct timespec ts = {0, 10'000'000};
      nanosleep(&ts, nullptr);
    }
  }
  say("*** end of the stacks\n");
  errno = saved_errno;
  die_of(sig);
}

// The first of `names` found on PATH, or "".
std::string on_path(std::initializer_list<const char*> names) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (const char* name : names) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t end = dirs.find(':', start);
      std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (dir.empty()) dir = ".";
      const std::string candidate = dir + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return {};
}

}  // namespace

void install_crash_stacks() {
  const std::string tool = on_path({"eu-stack", "gdb"});
  if (tool.empty() || tool.size() >= sizeof g_tool) return;
  std::strcpy(g_tool, tool.c_str());
  const bool gdb = tool.size() >= 3 && tool.compare(tool.size() - 3, 3, "gdb") == 0;
  std::strcpy(g_tool_name, gdb ? "gdb" : "eu-stack");
  static char p_flag[] = "-p";
  static char batch[] = "-batch";
  static char nx[] = "-nx";
  static char ex[] = "-ex";
  static char bt[] = "thread apply all bt";
  int i = 0;
  g_argv[i++] = g_tool;
  if (gdb) {
    g_argv[i++] = batch;
    g_argv[i++] = nx;
    g_argv[i++] = ex;
    g_argv[i++] = bt;
  }
  g_argv[i++] = p_flag;
  g_argv[i++] = g_pid;
  g_argv[i] = nullptr;

  struct sigaction act {};
  act.sa_sigaction = &on_fatal_signal;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  for (int sig : fatal_signals) sigaction(sig, &act, nullptr);
}

bool install_crash_stacks_from_env() {
  const char* on = std::getenv("FAULTLINE_TEST_CRASH_STACKS");
  if (on == nullptr || std::strcmp(on, "1") != 0) return false;
  if (std::getenv("FAULTLINE_RUN_DIR") != nullptr) return false;
  if (!GTEST_FLAG_GET(internal_run_death_test).empty()) return false;
  install_crash_stacks();
  return g_tool[0] != '\0';
}

}  // namespace faultline::core::testing
