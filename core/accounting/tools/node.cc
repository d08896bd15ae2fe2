// fl_accounting_node — the shared accounting on a node, end to end with real device memory:
// N worker processes allocate and free through a limiting_adaptor that charges one region (so
// together they can never pass the device's limit), a watcher process publishes the device's
// utilisation (NVML on the cuda backend) through watch_once, and optionally one worker is
// SIGKILLed while it holds the region's lock. Workers are re-execs of this program, never forks
// of a process with a device runtime up. Prints one JSON object: per-worker allocation latency
// (p50, p99), refusals, the region's state afterwards (healthy, repairs), and how long the
// others took to get the lock after the kill.
//
//   FAULTLINE_DEVICE=cuda fl_accounting_node --procs 8 --size-mib 256 --limit-gib 8 --seconds 3 --kill-one
//   ... --bare      the same processes allocating from the device directly (the baseline)
//
// Exit status: 0 when every surviving worker finished and the region is healthy with its
// aggregate back at 0; 1 otherwise; 2 on bad arguments or set-up errors.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/accounting/region.h"
#include "core/alloc/device_resource.h"
#include "core/alloc/limiting_adaptor.h"
#include "core/alloc/region_account.h"
#include "core/device/device.h"

namespace {

namespace acc = faultline::accounting;
namespace alloc = faultline::core::alloc;
using clock_type = std::chrono::steady_clock;

struct args {
  int procs = 8;
  std::uint64_t size = 256ull << 20;
  std::uint64_t limit = 8ull << 30;
  double seconds = 3;
  bool kill_one = false;
  bool bare = false;  // allocate from the device directly: the baseline without accounting
};

double ms_since(clock_type::time_point t) { return std::chrono::duration<double, std::milli>(clock_type::now() - t).count(); }

acc::options region_options(const args& a) {
  acc::options o;
  o.limits_bytes = {a.limit};
  o.max_slots = 64;
  o.lock_bound = std::chrono::seconds(5);
  return o;
}

// A worker: allocates and frees `size` through the region-limited adaptor until the time is up.
int worker(const std::string& path, const args& a, bool die_in_lock) {
  auto r = acc::region::attach(path, region_options(a));
  if (!r) {
    std::printf("{\"error\": \"%s\"}\n", r.error().message().c_str());
    return 2;
  }
  if (auto st = (*r)->register_process(); !st) {
    std::printf("{\"error\": \"%s\"}\n", st.message().c_str());
    return 2;
  }
  alloc::device_resource upstream;
  alloc::region_byte_account account(**r, 0);
  alloc::limiting_adaptor capped(upstream, account);
  std::vector<double> us;
  std::uint64_t refused = 0, failed = 0;
  const auto start = clock_type::now();
  while (ms_since(start) < a.seconds * 1000) {
    if (die_in_lock && ms_since(start) > a.seconds * 300) {
      auto held = capped.allocate(a.size);  // dies holding memory too: the repair must give it back
      auto g = (*r)->lock();
      std::fflush(stdout);
      ::raise(SIGKILL);  // inside the critical section, holding memory
    }
    alloc::device_memory_resource& through = a.bare ? static_cast<alloc::device_memory_resource&>(upstream) : capped;
    const auto t0 = clock_type::now();
    auto p = through.allocate(a.size);
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    if (!p) {
      (p.code() == faultline::core::errc::out_of_memory ? refused : failed)++;
      continue;
    }
    if (!through.deallocate(*p, a.size)) ++failed;
  }
  std::sort(us.begin(), us.end());
  nlohmann::json j = {{"pid", ::getpid()}, {"allocations", us.size()}, {"refused", refused}, {"failed", failed}};
  if (!us.empty()) {
    j["p50_us"] = us[us.size() / 2];
    j["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  }
  std::printf("%s\n", j.dump().c_str());
  return failed == 0 ? 0 : 1;
}

// The watcher: the device query runs outside the lock; the lock is held only to publish. Its
// lock waits show how long the others were kept out after a holder died.
int watcher(const std::string& path, const args& a) {
  auto r = acc::region::attach(path, region_options(a));
  if (!r || !(*r)->register_process()) return 2;
  auto& dev = faultline::core::device::current();
  std::vector<double> waits_ms;
  std::uint64_t published = 0, errors = 0;
  int last = -1;
  const auto start = clock_type::now();
  while (ms_since(start) < a.seconds * 1000) {
    const auto t0 = clock_type::now();
    auto st = (*r)->watch_once(0, [&]() -> faultline::core::result<std::uint32_t> {
      auto u = dev.utilization(0);
      if (!u) return u.error();
      last = *u;
      return static_cast<std::uint32_t>(*u);
    });
    waits_ms.push_back(ms_since(t0));
    st ? ++published : ++errors;
  }
  std::sort(waits_ms.begin(), waits_ms.end());
  nlohmann::json j = {{"watcher", true}, {"published", published}, {"errors", errors}, {"last_utilisation", last},
                      {"max_step_ms", waits_ms.empty() ? 0.0 : waits_ms.back()},
                      {"p50_step_ms", waits_ms.empty() ? 0.0 : waits_ms[waits_ms.size() / 2]}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// Parses the options; the hidden modes (`worker PATH die|live`, `watcher PATH`) the program starts
// itself with arrive in `rest`. Returns the exit status to end with, or -1 to go on.
int parse(int argc, char** argv, args& a, std::vector<std::string>& rest) {
  CLI::App app{"N processes allocating real device memory through one shared accounting region, a watcher\n"
               "publishing the device's utilisation, optionally one holder SIGKILLed inside the lock.\n"
               "Prints one JSON object; exit 0 when every survivor finished and the region is healthy."};
  app.name("fl_accounting_node");
  double size_mib = static_cast<double>(a.size >> 20), limit_gib = static_cast<double>(a.limit >> 30);
  app.add_option("--procs", a.procs, "allocating processes")->check(CLI::Range(1, 60));
  app.add_option("--size-mib", size_mib, "bytes of each allocation, MiB")->check(CLI::PositiveNumber);
  app.add_option("--limit-gib", limit_gib, "the region's device limit, GiB")->check(CLI::PositiveNumber);
  app.add_option("--seconds", a.seconds, "how long the processes allocate")->check(CLI::PositiveNumber);
  app.add_flag("--kill-one", a.kill_one, "SIGKILL one process while it holds the region's lock");
  app.add_flag("--bare", a.bare, "allocate from the device directly (the baseline without accounting)");
  app.add_option("mode", rest)->group("");  // hidden: worker/watcher modes
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  a.size = static_cast<std::uint64_t>(size_mib * (1 << 20));
  a.limit = static_cast<std::uint64_t>(limit_gib * (1ull << 30));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  std::vector<std::string> rest;
  if (const int rc = parse(argc, argv, a, rest); rc >= 0) return rc == 0 ? 0 : 2;
  if (rest.size() == 3 && rest[0] == "worker") return worker(rest[1], a, rest[2] == "die");
  if (rest.size() == 2 && rest[0] == "watcher") return watcher(rest[1], a);
  if (!rest.empty()) {
    std::fprintf(stderr, "fl_accounting_node: unexpected argument '%s'\n", rest[0].c_str());
    return 2;
  }
  const std::string path = "/dev/shm/fl-accounting-node." + std::to_string(::getpid());
  ::unlink(path.c_str());
  {
    auto r = acc::region::create_or_attach(path, region_options(a));
    if (!r) {
      std::fprintf(stderr, "fl_accounting_node: %s\n", r.error().message().c_str());
      return 2;
    }
  }
  // Children write their JSON line into one pipe; started by re-exec of this program.
  int out[2];
  if (::pipe(out) != 0) return 2;
  std::vector<pid_t> pids;
  auto start_child = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv_s = {"/proc/self/exe", "--procs", std::to_string(a.procs), "--size-mib",
                                       std::to_string(a.size >> 20), "--limit-gib",
                                       std::to_string(static_cast<double>(a.limit) / (1ull << 30)), "--seconds",
                                       std::to_string(a.seconds)};
    if (a.bare) argv_s.push_back("--bare");
    argv_s.insert(argv_s.end(), extra.begin(), extra.end());
    const pid_t pid = ::fork();  // this process has no device runtime up: exec follows at once
    if (pid == 0) {
      ::dup2(out[1], 1);
      std::vector<char*> v;
      for (auto& s : argv_s) v.push_back(s.data());
      v.push_back(nullptr);
      ::execv(v[0], v.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  };
  for (int i = 0; i < a.procs; ++i) start_child({"worker", path, a.kill_one && i == 0 ? "die" : "live"});
  start_child({"watcher", path});
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  int killed = 0, bad = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) ++killed;
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++bad;
  }
  nlohmann::json result = {{"procs", a.procs}, {"bare", a.bare}, {"size_mib", a.size >> 20}, {"limit_gib", static_cast<double>(a.limit) / (1ull << 30)},
                           {"killed_in_lock", killed}, {"failed_processes", bad}};
  result["device"] = std::string(faultline::core::device::current().name());
  nlohmann::json workers = nlohmann::json::array();
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    auto j = nlohmann::json::parse(text.substr(at, nl - at), nullptr, false);
    if (!j.is_discarded()) workers.push_back(j);
  }
  result["processes"] = workers;
  // The dead worker's slot is reclaimed by the repair its death triggered (or by this one).
  auto before = acc::inspect(path);
  auto rep = acc::repair(path, region_options(a));
  auto after = acc::inspect(path);
  if (before) {
    result["repairs_during_run"] = before->repairs;
    result["aggregate_bytes_at_end"] = before->aggregate_bytes.empty() ? 0 : before->aggregate_bytes[0];
  }
  const bool healthy = after && after->healthy() && !after->aggregate_bytes.empty() && after->aggregate_bytes[0] == 0;
  result["healthy_after_repair"] = healthy;
  if (rep) result["reclaimed_at_end"] = rep->dead_slots_reclaimed;
  std::printf("%s\n", result.dump(1).c_str());
  ::unlink(path.c_str());
  return healthy && bad == 0 && killed == (a.kill_one ? 1 : 0) ? 0 : 1;
}
