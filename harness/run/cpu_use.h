// What a run's processes use of the CPUs while it runs, read from its cgroup's cpu.stat
// (`usage_usec` counts every process of the cgroup, however it was reparented, and is there
// whether or not the cpu controller is enabled). A campaign that schedules by what runs use
// (campaign.h, schedule_kind::cpu) hands one to each run and samples it from another thread:
// run_once attaches it to the run's cgroup once the program has started and detaches it when the
// leader has exited or the deadline has come, so a run's own ending (stacks, kill, reaping) is
// never taken for a run that waits: that work is the harness's, done on the run's one thread
// (a hang's stacks are taken one process after another), so an ending run is said to take one CPU.
//
//   harness::run_cpu_use use;
//   rq.cpu = &use;                    // run_once attaches it
//   ... another thread:
//   if (auto s = use.read()) ...     // s->usage: CPU time so far; nullopt: not running or no cgroup
//
// Thread safety: every member may be called from any thread at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace faultline::harness {

class run_cpu_use {
 public:
  /// One reading: the CPU time the run's processes have used since its cgroup was created (a
  /// pooled cgroup carries earlier runs' time: only differences between readings mean anything),
  /// and when it was read.
  struct sample {
    std::chrono::microseconds usage{0};
    std::chrono::steady_clock::time_point at;
  };

  run_cpu_use() = default;
  run_cpu_use(const run_cpu_use&) = delete;
  run_cpu_use& operator=(const run_cpu_use&) = delete;
  ~run_cpu_use();

  /// Where the run is: starting (from begin() to attach), running (attached, or its cgroup
  /// unreadable), ending (detached: the harness is ending it).
  enum class stage { starting, running, ending };

  /// A new run begins (run_once, first thing).
  void begin();
  /// Starts reading `cgroup_dir`/cpu.stat; "" (a run without a cgroup of its own) or a file that
  /// cannot be opened leaves it unattached: the run is then never measured.
  void attach(const std::string& cgroup_dir);
  /// Stops reading (the run is ending).
  void detach();
  [[nodiscard]] stage where() const;
  /// The run's usage now; nullopt when unattached or unreadable.
  [[nodiscard]] std::optional<sample> read() const;

 private:
  mutable std::mutex mu_;
  int fd_ = -1;
  stage stage_ = stage::starting;
};

}  // namespace faultline::harness
