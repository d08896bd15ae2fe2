// The bookkeeping of a campaign's worker threads (campaign.cc): which run is which, which run
// starts next, the runs and slots in flight, the checkpoints, and the counts of what has been
// recorded. No process is run and no file is touched here: run_campaign does that around it.
//
//   run_numbering numbering(o);
//   campaign_tally tally(o);                 // a resume counts the runs it finds: tally.add_resumed
//   run_scheduler sched(o, numbering, std::move(tally), &meter);
//   while (auto k = sched.claim()) {         // on each worker thread
//     ... perform run *k ...
//     sched.record(*k, rec);                 // or abandon (interrupted), or writing_failed
//   }
//
// Thread safety: run_numbering is a value; campaign_tally is used by one thread (before the
// workers start); run_scheduler may be called from any thread (one mutex over all of it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "harness/campaign/campaign.h"
#include "harness/campaign/progress.h"
#include "harness/results/results.h"
#include "harness/results/summary.h"
#include "harness/run/cpu_use.h"

namespace faultline::harness::detail {

/// Which run is which (campaign.h): run k's variant, seed, fault spec and slots follow from the
/// options alone. A view of the options, which must outlive it.
class run_numbering {
 public:
  explicit run_numbering(const campaign_options& o) : o_(o), variants_(o.variants.size()) {}

  /// Runs in the campaign, every shard's.
  [[nodiscard]] std::uint64_t total() const { return o_.repeat * variants_; }
  /// Whether run k is this shard's.
  [[nodiscard]] bool owns(std::uint64_t k) const { return o_.part.owns(k); }
  [[nodiscard]] std::size_t variant_index(std::uint64_t k) const {
    return static_cast<std::size_t>((o_.rotate_per_shard ? k / o_.part.count : k) % variants_);
  }
  [[nodiscard]] const variant& variant_of(std::uint64_t k) const { return o_.variants[variant_index(k)]; }
  [[nodiscard]] std::uint64_t seed_of(std::uint64_t k) const { return o_.rotate_per_shard ? o_.seed + k : o_.seed + k / variants_; }
  [[nodiscard]] std::string faults_of(std::uint64_t k) const {
    const variant& v = variant_of(k);
    return o_.faults_of ? o_.faults_of(k, v) : v.faults;
  }
  /// The share of jobs run k takes: its variant's slots, within 1..jobs.
  [[nodiscard]] unsigned slots_of(std::uint64_t k) const;
  /// The CPU run k declares (schedule_kind::declared), in percent: its variant's cpu_percent, else
  /// its slots x 100; within 1..jobs x 100.
  [[nodiscard]] unsigned cpu_of(std::uint64_t k) const;
  [[nodiscard]] unsigned cpu_of(const variant& v) const;

 private:
  const campaign_options& o_;
  std::uint64_t variants_;
};

/// What is recorded before the workers start: the runs a resume found in OUT/results.jsonl.
class campaign_tally {
 public:
  explicit campaign_tally(const campaign_options& o);

  /// Counts a recorded run: its bit, its summary, a failure or a pass whose files were kept.
  /// False when it was counted already (a results file put together by hand): it counts once.
  bool add_resumed(const run_record& r, std::size_t variant_index);
  [[nodiscard]] std::uint64_t resumed() const { return resumed_; }

 private:
  friend class run_scheduler;
  std::uint64_t shard_count_;
  std::vector<bool> recorded_;  // one bit per run of this shard: run k is bit k / shard count
  summary_builder summary_;
  std::vector<std::uint64_t> passes_kept_;  // per variant
  std::uint64_t failures_ = 0, resumed_ = 0;
};

/// Hands a campaign's runs to its worker threads in run-number order, skipping other shards' and
/// those already recorded. A run starts only while the slots in flight and its own fit in the
/// options' jobs (a wide run waits for room rather than being overtaken; with
/// schedule_kind::declared, a run among the next most_in_flight() that fits may start while it
/// waits, so one that computes does not drain the machine of those that wait: it starts at the
/// latest once those are claimed), never while a
/// checkpoint is due or running: after every checkpoint_runs runs recorded, the first thread to
/// see no run in flight runs the checkpoint, outside the lock, while the others wait.
/// With schedule_kind::declared a run takes its declared CPU of jobs x 100% (and its slots, where
/// they are device contexts). With schedule_kind::cpu the slots in flight are what the runs' cgroups measure them using
/// (campaign.h), sampled every cpu_sample_period by a claim that waits for room.
class run_scheduler {
 public:
  /// `progress` (may be null) is updated as runs are recorded. The options and numbering must
  /// outlive the scheduler.
  run_scheduler(const campaign_options& o, const run_numbering& numbering, campaign_tally tally,
                progress_meter* progress);

  /// Blocks until the next run may start and claims it; nullopt when none will: all performed,
  /// stopped (until_fail, a record that could not be written), cancelled or past the deadline.
  /// `use` (schedule_kind::cpu; may be null) is what the run will be measured by, until its end.
  std::optional<std::uint64_t> claim(run_cpu_use* use = nullptr);
  /// Runs that may be in flight at once: jobs, or cpu_overcommit x jobs with schedule_kind::cpu.
  [[nodiscard]] unsigned most_in_flight() const;
  /// Whether run k, which passed, keeps its files: the first keep_passes passes of each variant
  /// (every one with keep_policy::all, none with none). Counts it when it does.
  bool keep_pass(std::uint64_t k);
  /// Run k ended without a record (interrupted).
  void abandon(std::uint64_t k);
  /// Run k ended and `r` is in the results file: counted, and with until_fail a failure stops.
  void record(std::uint64_t k, const run_record& r);
  /// Run k ended but its record could not be written: no run starts any more; the first error is
  /// kept (write_error).
  void writing_failed(std::uint64_t k, const core::status& error);

  /// Whether no run starts any more (with until_fail, a failure a resume found stops it at once).
  [[nodiscard]] bool stopped() const;
  [[nodiscard]] bool stopped_early() const;
  [[nodiscard]] bool deadline_reached() const;
  [[nodiscard]] std::uint64_t resumed() const;
  [[nodiscard]] std::uint64_t performed() const;
  [[nodiscard]] core::status write_error() const;
  [[nodiscard]] std::vector<variant_summary> summaries() const;

 private:
  bool is_recorded(std::uint64_t k) const;
  bool checkpoint_due() const;
  void run_checkpoint(std::unique_lock<std::mutex>& lock);
  void end_run(std::uint64_t k);
  // A run in flight, as schedule_kind::cpu measures it.
  struct flight {
    std::uint64_t k = 0;
    unsigned slots = 1;
    const run_cpu_use* use = nullptr;
    std::optional<run_cpu_use::sample> first, last;  // first: when its measurement began
    double cpus = 0, cpus_before = 0;                 // the last two windows' use, in CPUs
  };
  bool room_for(std::uint64_t k);
  std::optional<std::uint64_t> overtaker(std::uint64_t total);
  double measured_slots();

  const campaign_options& o_;
  const run_numbering& numbering_;
  progress_meter* progress_;
  const std::uint64_t passes_to_keep_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable idle_;  // a run ended or a checkpoint did: a waiting claim looks again
  campaign_tally tally_;
  std::uint64_t next_ = 0;  // the lowest run number not claimed
  // schedule_kind::declared: runs claimed ahead of next_ (a run that fits, taken while the run at
  // next_ waits for room), at most most_in_flight() candidates past it.
  std::set<std::uint64_t> ahead_;
  unsigned in_flight_ = 0, slots_in_use_ = 0, cpu_in_use_ = 0;
  std::vector<flight> flights_;  // schedule_kind::cpu only
  std::uint64_t since_checkpoint_ = 0;
  bool checkpointing_ = false;
  std::uint64_t performed_ = 0;
  bool stop_ = false, stopped_early_ = false, deadline_reached_ = false;
  core::status write_error_;
};

}  // namespace faultline::harness::detail
