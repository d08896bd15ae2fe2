// The multi-process launcher: starts helper processes of one scenario run, each with its own seed
// and fault spec, and collects what became of them (DESIGN.md §6.6).
//
//   faults::generator seeds(run_seed);
//   faults::launcher workers({"/proc/self/exe", "worker"}, faults::current_spec(), seeds);
//   auto a = workers.start("accounting/holder", {path}, "accounting/lock/held=1*kill");
//   auto b = workers.start("accounting/waiter", {path});
//   if (!a || !b) return (!a ? a : b).error();
//   for (const auto& w : workers.collect(3s)) std::printf("%s\n", describe(w).c_str());
//
// A worker is `command... NAME ARG...` (e.g. the scenario binary's hidden `worker` mode), started
// with posix_spawn, never a fork: the starting process may have a device runtime up. Its
// environment is the caller's with FAULTLINE_SEED set to a value drawn from `seeds` (one run seed
// replays every process) and FAULTLINE_FAULTS set to the base spec merged with the worker's own
// items (an item of the base naming a point the worker's spec names is replaced). Workers still
// running when the launcher is destroyed are SIGKILLed and reaped. A worker program should also
// set PR_SET_PDEATHSIG itself (the scenario binary's worker mode does), so that it dies with the
// thread that started it even when the starter is SIGKILLed: start workers from a thread that
// outlives them.
//
// Errors are values: a malformed fault spec is errc::invalid_argument naming it; a failed spawn is
// the system error. Nothing here exits the process.
//
// Thread safety: a launcher belongs to one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/points/random.h"

namespace faultline::faults {

/// `base` with `extra`'s items added; an item of `base` naming a point `extra` names is dropped.
/// Both must parse (invalid_argument naming the bad one otherwise).
core::result<std::string> merge_specs(std::string_view base, std::string_view extra);

/// One started worker and, once collected, how it ended.
struct worker_record {
  std::string name;
  pid_t pid = -1;
  std::uint64_t seed = 0;
  std::string faults;     ///< the FAULTLINE_FAULTS it ran with
  bool finished = false;  ///< it ended on its own and was reaped
  bool killed = false;    ///< it was still running when the launcher SIGKILLed (and reaped) it
  int exit_code = -1;     ///< when it exited
  int signal = 0;         ///< when a signal ended it
  /// The conventional status: exit code, 128 + signal, or -1 when it had not finished.
  [[nodiscard]] int status() const noexcept {
    if (!finished || killed) return -1;
    return signal != 0 ? 128 + signal : exit_code;
  }
};

/// "accounting/holder pid 4242 seed 0x1f2e... exited 0" (or "killed by SIGKILL", "still running").
std::string describe(const worker_record& w);

class launcher {
 public:
  /// `command`: the program and leading arguments of every worker (non-empty);
  /// `base_faults`: the spec every worker starts from; `seeds`: where workers' seeds are drawn.
  launcher(std::vector<std::string> command, std::string base_faults, generator& seeds);
  ~launcher() { kill_all(); }
  launcher(const launcher&) = delete;
  launcher& operator=(const launcher&) = delete;

  /// Starts worker `name` with `args` and `extra_faults` merged into the base spec. With
  /// `go_pipe`, the worker's stdin is the read end of a pipe whose write end is returned in
  /// *go_pipe (the caller closes it to release every such worker at once: they read EOF).
  core::result<pid_t> start(std::string_view name, const std::vector<std::string>& args,
                            std::string_view extra_faults = {}, int* go_pipe = nullptr);

  /// Waits at most `timeout` for `pid`: its exit code, 128 + signal, or -1 while it still runs
  /// (then it is left running). -1 also for a pid this launcher did not start. When a pid came
  /// back (reused by a later worker), it names the newest worker with it.
  int wait(pid_t pid, std::chrono::milliseconds timeout);

  /// Waits until every started worker has ended or `timeout` passed, SIGKILLs and reaps the ones
  /// still running (recorded as not finished), and returns every worker started so far.
  std::vector<worker_record> collect(std::chrono::milliseconds timeout);

  /// Every worker started so far, with what is known of its end.
  [[nodiscard]] const std::vector<worker_record>& workers() const noexcept { return workers_; }

  /// SIGKILLs and reaps every worker still running (recorded as killed, not finished).
  void kill_all() noexcept;

 private:
  worker_record* find(pid_t pid) noexcept;
  bool reap(worker_record& w, bool block) noexcept;

  std::vector<std::string> command_;
  std::string base_faults_;
  generator& seeds_;
  std::vector<worker_record> workers_;
};

}  // namespace faultline::faults
