#include "scenarios/scenario.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/device/device.h"
#include "faults/preload/agent.h"

namespace faultline::scenarios {

namespace {

struct exit_probe {
  std::string invariant;
  std::function<std::string()> probe;
};

// Leaked on purpose: the probes run from an atexit hook after static destructors may have run.
std::vector<exit_probe>& exit_probes() {
  static auto* probes = new std::vector<exit_probe>();
  return *probes;
}
std::mutex& exit_probes_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}

void report(std::string_view invariant, std::string_view detail) {
  std::string line = "invariant violated: " + std::string(invariant);
  if (!detail.empty()) line += ": " + std::string(detail);
  line += "\n";
  // write(2), not stdio: this also runs from the exit hook, after stdio may be torn down.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void run_exit_probes() {
  bool violated = false;
  std::lock_guard lock(exit_probes_mu());
  for (const auto& p : exit_probes()) {
    std::string detail = p.probe();
    if (!detail.empty()) {
      report(p.invariant, detail);
      violated = true;
    }
  }
  if (violated) ::_exit(1);
}

bool valid_name(std::string_view name) {
  auto slash = name.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == name.size()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '/' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool context::check(bool ok, std::string_view invariant, std::string_view detail) {
  if (ok) return true;
  std::lock_guard lock(mu_);
  ++violations_;
  report(invariant, detail);
  return false;
}

bool context::check(const core::status& s, std::string_view invariant) {
  return check(s.is_ok(), invariant, s.is_ok() ? std::string() : s.to_string());
}

void context::require(bool ok, std::string_view invariant, std::string_view detail) {
  if (ok) return;
  report(invariant, detail);
  std::fflush(nullptr);
  ::_exit(1);
}

void context::check_at_exit(std::string invariant, std::function<std::string()> probe) {
  std::lock_guard lock(exit_probes_mu());
  exit_probes().push_back({std::move(invariant), std::move(probe)});
}

void context::note(std::string_view text) {
  std::fprintf(stderr, "[%s] %.*s\n", name_.c_str(), static_cast<int>(text.size()), text.data());
}

std::size_t context::violations() const {
  std::lock_guard lock(mu_);
  return violations_;
}

core::status registry::add(scenario s) {
  if (!valid_name(s.name)) {
    return {core::errc::invalid_argument,
            "scenario name '" + s.name + "' must be family/name in lower case"};
  }
  if (find(s.name) != nullptr) {
    return {core::errc::already_exists, "scenario '" + s.name + "' registered twice"};
  }
  if (!s.run) return {core::errc::invalid_argument, "scenario '" + s.name + "' has no body"};
  scenarios_.push_back(std::move(s));
  return {};
}

const scenario* registry::find(std::string_view name) const noexcept {
  for (const auto& s : scenarios_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

core::status registry::add_worker(std::string name, worker_fn fn) {
  if (!valid_name(name)) {
    return {core::errc::invalid_argument, "worker name '" + name + "' must be family/name in lower case"};
  }
  if (find_worker(name) != nullptr) {
    return {core::errc::already_exists, "worker '" + name + "' registered twice"};
  }
  if (!fn) return {core::errc::invalid_argument, "worker '" + name + "' has no body"};
  workers_.emplace_back(std::move(name), std::move(fn));
  return {};
}

const worker_fn* registry::find_worker(std::string_view name) const noexcept {
  for (const auto& [n, fn] : workers_) {
    if (n == name) return &fn;
  }
  return nullptr;
}

void add_or_abort(registry& r, scenario s) {
  if (auto st = r.add(std::move(s)); !st) {
    std::fprintf(stderr, "faultline-scenarios: %s\n", st.to_string().c_str());
    std::abort();
  }
}

std::function<void(scenario)> family_adder(registry& r, std::vector<std::string> fault_space) {
  return [&r, space = std::move(fault_space)](scenario s) {
    if (s.fault_space.empty()) s.fault_space = space;
    add_or_abort(r, std::move(s));
  };
}

std::vector<std::string> fault_space_without(const std::vector<std::string>& space, std::string_view point) {
  std::vector<std::string> out;
  for (const auto& item : space)
    if (std::string_view(item).substr(0, item.find('=')) != point) out.push_back(item);
  return out;
}

void add_worker_or_abort(registry& r, std::string name, worker_fn fn) {
  if (auto st = r.add_worker(std::move(name), std::move(fn)); !st) {
    std::fprintf(stderr, "faultline-scenarios: %s\n", st.to_string().c_str());
    std::abort();
  }
}

const registry& catalog() {
  static const registry* r = [] {
    auto* built = new registry();
    register_exit_scenarios(*built);
    register_ipc_scenarios(*built);
    register_accounting_scenarios(*built);
    register_registry_scenarios(*built);
    return built;
  }();
  return *r;
}

int run_scenario(const scenario& s, std::uint64_t seed) {
  // Registered before anything initialises the device runtime, so it runs after the runtime's
  // own teardown: the only place "no device call after teardown" can be checked.
  if (std::atexit(run_exit_probes) != 0) {
    std::fprintf(stderr, "faultline-scenarios: atexit failed\n");
    return 2;
  }
  // A bad FAULTLINE_DEVICE is a usage error, reported before the scenario runs. Only the value
  // is checked: selecting the backend would initialise the CUDA runtime here, before the
  // scenario's own first device object, which changes the very exit order exit/ scenarios test.
  const char* device_env = std::getenv("FAULTLINE_DEVICE");
  if (auto sel = core::device::parse_selection(device_env != nullptr ? device_env : ""); !sel) {
    std::fprintf(stderr, "faultline-scenarios: %s\n", sel.error().to_string().c_str());
    return 2;
  }
  context ctx(s.name, seed);
  s.run(ctx);
  agent::mark(agent::marker_work_end);
  return ctx.violations() == 0 ? 0 : 1;
}

int run_worker(std::string_view name, const std::vector<std::string>& args, std::uint64_t seed) {
  const worker_fn* fn = catalog().find_worker(name);
  if (fn == nullptr) {
    std::fprintf(stderr, "faultline-scenarios: no worker named '%.*s'\n", static_cast<int>(name.size()), name.data());
    return 2;
  }
  rng random(seed);
  return (*fn)(args, random);
}

}  // namespace faultline::scenarios
