// The scenario registry: the reproducer catalog's shape (DESIGN.md §11).
//
// A scenario re-creates one bug class. It is a function that drives the core under faults and
// checks invariants through its `context`; it is registered with a name `family/name`, a default
// timeout, and the bug points that re-create the historical bug, each with the fault spec that
// runs that variant and the detection rate `faultline verify` must see.
//
//   void static_pool(scenarios::context& ctx) {
//     ...arrange, inject, act...
//     ctx.check(pool.check_invariants(), "allocator-invariants");
//   }
//   registry.add({.name = "exit/static-pool", .timeout_ms = 20000, .run = static_pool,
//                 .bug_points = {{"bug/alloc/no-exit-guard", "bug/alloc/no-exit-guard=print"}}});
//
// Each run is its own process (`faultline-scenarios run NAME`, re-exec'd by the harness). A run
// passes when the process exits 0; `check` failures print "invariant violated: NAME: detail" and
// make the process exit 1 — at the end of the work, or at once for `require`. Checks that only
// hold after process exit (no device call after the runtime's teardown) are registered with
// `check_at_exit` and run by an atexit hook that the runner registers before the device runtime
// initialises, so it runs after the runtime's teardown.
//
// A scenario that needs several processes starts them as re-execs of the scenario binary running a
// registered worker (`faultline-scenarios worker NAME ARG...`, a mode the usage text does not
// list): never a fork of a process whose device runtime may be up (GoogleTest death-test style).
//
// Thread safety: a context may be used from the scenario's threads; checks are serialised.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/points/random.h"

namespace faultline::scenarios {

/// One bug point of a scenario: the spec that enables it (plus any fault that makes the race
/// deterministic) and the detection rate verify requires.
struct bug_variant {
  std::string point;          ///< "bug/alloc/no-exit-guard"
  std::string faults;         ///< full FAULTLINE_FAULTS spec for this variant
  double detect_rate = 0.95;  ///< fraction of runs that must not pass
  std::string expect;         ///< what detection looks like: "fail", "crash", "crash at exit", ...
};

class context;

/// A scenario's own outer timeout per run unless it declares another: the deadline of one of
/// faultline's scenarios, declared to the harness through the catalog (`list --json`). Distinct
/// from the harness's defaults (harness/detail/defaults.h: 10 min for a command it knows nothing
/// of, 60 s for a catalog entry that declares none) on purpose: a scenario is short and known, so
/// a hang is caught early. (scenarios/ may not include the harness: it is defined here.)
inline constexpr int default_scenario_timeout_ms = 20000;

/// A registered scenario.
struct scenario {
  std::string name;         ///< "family/name"
  std::string description;  ///< one line: the bug class and where it came from
  int timeout_ms = default_scenario_timeout_ms;  ///< outer timeout per run
  /// The outer timeout on the cuda backend where it must differ (0: timeout_ms): `list` declares
  /// it when the process would select cuda, so `run`, `verify` and `soak` use the right one.
  int cuda_timeout_ms = 0;
  /// The share of the machine one run takes, in `--jobs` units: the processes with a device
  /// context it has at once (CTest's PROCESSORS, nextest's threads-required). `run`, `verify` and
  /// `soak` start runs only while the slots of those in flight stay within --jobs, so `--jobs`
  /// = cores never puts more device contexts on the machine than it has cores.
  int slots = 1;
  /// The CPU one run keeps busy on the host, in percent of a CPU (CTest's PROCESSORS for what
  /// computes; 0: as many CPUs as slots). Most scenarios wait on their own timeouts, children and
  /// locks: they declare little, and `run`, `verify` and `soak` (--schedule declared) start more of
  /// them at once than --jobs, keeping the declared CPU in flight within --jobs CPUs. The figure
  /// is the most any of its variants used, clean or bug (records/overhead/README.md).
  int cpu_percent = 0;
  std::function<void(context&)> run;
  std::vector<bug_variant> bug_points;
  /// The faults the clean implementation must survive, from which `faultline soak` draws a spec
  /// per run: spec items whose numbers may be ranges LO..HI (harness/campaign/fault_space.h), e.g.
  /// "sim/stream/op=1..20%delay(10us..2ms)". Never bug points.
  std::vector<std::string> fault_space = {};
};

/// The run's seeded generator: faultline's one splitmix64 (see core/points/random.h).
using rng = faults::generator;

/// What a running scenario sees: its seed, generator, and invariant checks.
class context {
 public:
  context(std::string name, std::uint64_t seed) : name_(std::move(name)), seed_(seed), rng_(seed) {}

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  rng& random() noexcept { return rng_; }

  /// Records a violation of `invariant` when `ok` is false; the run fails at the end of its work.
  bool check(bool ok, std::string_view invariant, std::string_view detail = {});
  /// Same for a status: a non-ok status is a violation whose detail is the status text.
  bool check(const core::status& s, std::string_view invariant);
  /// A violation that makes going on meaningless: reported, then the process exits 1 at once.
  void require(bool ok, std::string_view invariant, std::string_view detail = {});
  /// Registers a check run after the device runtime's teardown (at the very end of exit).
  /// It returns a non-empty detail string to report a violation of `invariant`.
  void check_at_exit(std::string invariant, std::function<std::string()> probe);
  /// Prints a progress/info line to stderr, prefixed with the scenario name.
  void note(std::string_view text);

  [[nodiscard]] std::size_t violations() const;

 private:
  friend int run_scenario(const scenario&, std::uint64_t);
  std::string name_;
  std::uint64_t seed_;
  rng rng_;
  mutable std::mutex mu_;
  std::size_t violations_ = 0;
};

/// The body of a helper process of a multi-process scenario: gets the arguments after its name
/// and the process's generator (seeded from FAULTLINE_SEED, which the starting scenario derives
/// from its own seed), returns the process's exit status.
using worker_fn = std::function<int(const std::vector<std::string>& args, rng& random)>;

/// The catalog. `all()` is in registration order; names are unique.
class registry {
 public:
  /// Adds a scenario; invalid_argument for a duplicate or malformed name (must be family/name).
  core::status add(scenario s);
  [[nodiscard]] const std::vector<scenario>& all() const noexcept { return scenarios_; }
  [[nodiscard]] const scenario* find(std::string_view name) const noexcept;

  /// Adds a worker (a helper process's body) named family/name; same name rules as add().
  core::status add_worker(std::string name, worker_fn fn);
  [[nodiscard]] const worker_fn* find_worker(std::string_view name) const noexcept;

 private:
  std::vector<scenario> scenarios_;
  std::vector<std::pair<std::string, worker_fn>> workers_;
};

/// The full catalog, built once (every family registers itself here explicitly).
const registry& catalog();

/// r.add(s), where a refusal is a catalog bug: reported on stderr, then abort(), so it is found
/// the first time the scenario binary starts. For the family registration functions below.
void add_or_abort(registry& r, scenario s);
/// The same for r.add_worker(name, fn).
void add_worker_or_abort(registry& r, std::string name, worker_fn fn);
/// A family's `add`: add_or_abort(r, s), giving s the family's `fault_space` unless it declares
/// its own.
std::function<void(scenario)> family_adder(registry& r, std::vector<std::string> fault_space);
/// `space` less its item for `point` (a scenario that never reaches it: a soak warns about such
/// points).
std::vector<std::string> fault_space_without(const std::vector<std::string>& space, std::string_view point);

/// Family registration functions, one per scenario family file.
void register_exit_scenarios(registry& r);
void register_ipc_scenarios(registry& r);
void register_accounting_scenarios(registry& r);
void register_registry_scenarios(registry& r);

/// Runs one scenario in this process and returns the process exit status to use (0 pass,
/// 1 invariant violated). Called by the scenario binary after the agent and faults are set up.
int run_scenario(const scenario& s, std::uint64_t seed);

/// Runs worker `name` in this process (the hidden `worker` mode of the scenario binary): 2 when no
/// such worker is registered, else the worker's exit status.
int run_worker(std::string_view name, const std::vector<std::string>& args, std::uint64_t seed);

}  // namespace faultline::scenarios
