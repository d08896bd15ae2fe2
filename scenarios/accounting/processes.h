// Helpers of the accounting/ scenarios: a region file private to the run, and helper processes
// started as re-execs of the scenario binary (`faultline-scenarios worker NAME ARG...`) through
// faults::launcher.
//
//   scratch_region file(ctx, "writer-death");           // $FAULTLINE_RUN_DIR/writer-death.region
//   worker_group workers(ctx);
//   pid_t w = workers.start("accounting/die-mid-update", {file.path()},
//                           "accounting/slot/mid-update=1*off->kill");
//   int rc = workers.wait(w, 3s);                        // exit code, 128 + signal, or -1
//
// Each worker gets its own seed, drawn from the scenario's generator (so one run seed replays every
// process) and noted in the run's log, and a fault spec: the scenario's own spec (bug points
// included: the whole node runs the pre-fix code) with the worker's items added or replacing items
// naming the same points. Workers still running when the group is destroyed are SIGKILLed and
// reaped; they also die with the thread that started them (the worker mode sets
// PR_SET_PDEATHSIG), so start them from the scenario's main thread.
//
// Thread safety: a worker_group belongs to one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "faults/launcher.h"
#include "scenarios/scenario.h"

namespace faultline::scenarios::accounting_support {

/// A region path no other run shares: in $FAULTLINE_RUN_DIR when the harness set one, else a
/// unique /dev/shm name. The file (and a `.link` beside it, used by bad-region) is removed when
/// the object is destroyed.
class scratch_region {
 public:
  scratch_region(context& ctx, std::string_view tag);
  ~scratch_region();
  scratch_region(const scratch_region&) = delete;
  scratch_region& operator=(const scratch_region&) = delete;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Another path in the same directory, removed with this object.
  std::string sibling(std::string_view suffix);

 private:
  std::string path_;
  std::vector<std::string> extra_;
};

/// ctx.require() that first removes every live scratch_region's files: require ends the process
/// with _exit, which runs no destructor.
void require(context& ctx, bool ok, std::string_view invariant, std::string_view detail = {});

/// Helper processes of one scenario run.
class worker_group {
 public:
  explicit worker_group(context& ctx);
  worker_group(const worker_group&) = delete;
  worker_group& operator=(const worker_group&) = delete;

  /// Starts worker `name` with `args`; `extra_faults` is merged into the scenario's spec (above).
  /// With `go_pipe`, the worker's stdin is the read end of a pipe whose write end is returned in
  /// *go_pipe: closing it is a signal every such worker sees at once (EOF). A failed start is a
  /// `require` violation ("worker-started").
  pid_t start(std::string_view name, const std::vector<std::string>& args, std::string_view extra_faults = {},
              int* go_pipe = nullptr);
  /// Waits at most `timeout` for `pid`: its exit code, 128 + signal, or -1 while it still runs
  /// (it is left running).
  int wait(pid_t pid, std::chrono::milliseconds timeout) { return launcher_.wait(pid, timeout); }
  /// As wait(), but an ended worker is left unreaped (a zombie, waitid WNOWAIT): until wait()
  /// or kill_all() reaps it, its pid cannot be handed to another process, so the dead worker's
  /// (pid, start time) cannot be mistaken for a live one (start times count 10 ms clock ticks, and
  /// a pid freed and reissued within one tick, which a rewound /proc/sys/kernel/ns_last_pid allows,
  /// names a live process with the dead one's identity).
  int wait_unreaped(pid_t pid, std::chrono::milliseconds timeout);
  /// SIGKILLs and reaps every worker still running.
  void kill_all() noexcept { launcher_.kill_all(); }

 private:
  context& ctx_;
  faults::launcher launcher_;
};

void sleep_ms(int ms);

/// Polls `done` every millisecond until it holds or `timeout` passes; whether it held.
template <class F>
bool wait_until(F&& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    sleep_ms(1);
  }
  return true;
}

/// Reads a whole stdin pipe until EOF (the go signal of worker_group::start's go_pipe).
void wait_for_go();

}  // namespace faultline::scenarios::accounting_support
