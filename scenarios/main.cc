// faultline-scenarios: the scenario binary the harness re-execs, one scenario per process.
//
//   faultline-scenarios list [--json]
//   faultline-scenarios run NAME        (reads FAULTLINE_SEED, FAULTLINE_FAULTS, FAULTLINE_RUN_DIR)
//
// Multi-process scenarios start their helper processes as `faultline-scenarios worker NAME ARG...`
// (hidden: not in the usage text), with FAULTLINE_SEED and FAULTLINE_FAULTS chosen by the scenario.
// A worker dies with the process that started it (PR_SET_PDEATHSIG), so one run by hand leaves
// none behind.
//
// Exit status of `run`: 0 pass, 1 an invariant was violated, 2 bad usage or set-up error; a
// crash is a crash. Runs are normally started by `faultline run`, which adds the outer timeout,
// stacks and classification; running one by hand is how a failure is debugged.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device/device.h"
#include "faults/engine.h"
#include "faults/preload/agent.h"
#include "scenarios/scenario.h"

namespace {

namespace fs = faultline::scenarios;

constexpr const char* usage =
    "usage: faultline-scenarios list [--json]\n"
    "       faultline-scenarios run NAME\n"
    "Runs one scenario of faultline's reproducer catalog in this process. Environment:\n"
    "  FAULTLINE_SEED    seed for the run's generators (decimal or 0x-hex, default 1)\n"
    "  FAULTLINE_FAULTS  fault spec, e.g. 'bug/alloc/no-drain=print'\n"
    "  FAULTLINE_DEVICE  auto|sim|cuda\n";

// The timeout a scenario declares on the backend this process would select (FAULTLINE_DEVICE:
// `auto` asks the device layer; only `list` does, never a run, whose device must initialise in
// the scenario's own order).
int declared_timeout_ms(const fs::scenario& s, bool on_cuda) {
  return on_cuda && s.cuda_timeout_ms > 0 ? s.cuda_timeout_ms : s.timeout_ms;
}

bool would_select_cuda() {
  const char* env = std::getenv("FAULTLINE_DEVICE");
  auto sel = faultline::core::device::parse_selection(env ? env : "auto");
  if (!sel || *sel == faultline::core::device::selection::sim) return false;
  auto b = faultline::core::device::select_backend();
  return b && (*b)->kind() == faultline::core::device::backend_kind::cuda;
}

int list(bool json) {
  const bool on_cuda = std::any_of(fs::catalog().all().begin(), fs::catalog().all().end(),
                                   [](const fs::scenario& s) { return s.cuda_timeout_ms > 0; }) &&
                       would_select_cuda();
  if (json) {
    auto out = nlohmann::json::array();
    for (const auto& s : fs::catalog().all()) {
      auto bugs = nlohmann::json::array();
      for (const auto& b : s.bug_points) {
        bugs.push_back({{"point", b.point}, {"faults", b.faults}, {"detect_rate", b.detect_rate},
                        {"expect", b.expect}});
      }
      out.push_back({{"name", s.name}, {"description", s.description},
                     {"timeout_ms", declared_timeout_ms(s, on_cuda)}, {"slots", s.slots}, {"bug_points", bugs},
                     {"fault_space", s.fault_space}, {"device", would_select_cuda() ? "cuda" : "sim"}});
      if (s.cpu_percent > 0) out.back()["cpu_percent"] = s.cpu_percent;
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  for (const auto& s : fs::catalog().all()) {
    std::printf("%-28s %s\n", s.name.c_str(), s.description.c_str());
    for (const auto& b : s.bug_points) std::printf("  %-26s -> %s\n", b.point.c_str(), b.expect.c_str());
  }
  return 0;
}

int run(std::string_view name) {
  const fs::scenario* s = fs::catalog().find(name);
  if (s == nullptr) {
    std::fprintf(stderr, "faultline-scenarios: no scenario named '%.*s' (see `list`)\n",
                 static_cast<int>(name.size()), name.data());
    return 2;
  }
  faultline::agent::install();
  // The engine reads FAULTLINE_SEED (and rejects a malformed one); the scenario's own generator
  // takes the same seed, so one number replays both the faults and the scenario's choices.
  if (auto st = faultline::faults::configure_from_environment(); !st) {
    std::fprintf(stderr, "faultline-scenarios: %s\n", st.to_string().c_str());
    return 2;
  }
  return fs::run_scenario(*s, faultline::faults::current_seed());
}

int worker(std::string_view name, std::vector<std::string> args) {
  // The starter may already be gone (killed by a timeout): then so must we.
  const pid_t starter = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != starter) return 2;
  faultline::agent::install();
  if (auto st = faultline::faults::configure_from_environment(); !st) {
    std::fprintf(stderr, "faultline-scenarios worker: %s\n", st.to_string().c_str());
    return 2;
  }
  return fs::run_worker(name, args, faultline::faults::current_seed());
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view cmd = argc > 1 ? argv[1] : "";
  if (cmd == "list" && (argc == 2 || (argc == 3 && std::string_view(argv[2]) == "--json"))) {
    return list(argc == 3);
  }
  if (cmd == "run" && argc == 3) return run(argv[2]);
  if (cmd == "worker" && argc >= 3) return worker(argv[2], std::vector<std::string>(argv + 3, argv + argc));
  if (cmd == "-h" || cmd == "--help") {
    std::fputs(usage, stdout);
    return 0;
  }
  std::fputs(usage, stderr);
  return 2;
}
