#include "harness/campaign/detail/scheduler.h"

#include <algorithm>

namespace faultline::harness::detail {
namespace {

std::vector<summary_key> summary_keys(const campaign_options& o) {
  std::vector<summary_key> keys;
  for (const auto& v : o.variants) keys.push_back({v.name, v.faults});
  return keys;
}

std::uint64_t passes_to_keep(const campaign_options& o) {
  switch (o.keep) {
    case keep_policy::all: return ~std::uint64_t{0};
    case keep_policy::none: return 0;
    case keep_policy::failures: break;
  }
  return o.keep_passes;
}

}  // namespace

unsigned run_numbering::slots_of(std::uint64_t k) const { return std::clamp(variant_of(k).slots, 1u, o_.jobs); }

unsigned run_numbering::cpu_of(std::uint64_t k) const { return cpu_of(variant_of(k)); }

unsigned run_numbering::cpu_of(const variant& v) const { return declared_cpu_percent(v, o_.jobs); }

campaign_tally::campaign_tally(const campaign_options& o)
    : shard_count_(o.part.count), summary_(summary_keys(o)), passes_kept_(o.variants.size(), 0) {}

bool campaign_tally::add_resumed(const run_record& r, std::size_t variant_index) {
  const std::uint64_t bit = r.run / shard_count_;
  if (bit >= recorded_.size()) recorded_.resize(bit + 1, false);
  if (recorded_[bit]) return false;
  recorded_[bit] = true;
  ++resumed_;
  summary_.add(r);
  if (r.result != outcome::pass) ++failures_;
  else if (!r.log.empty()) ++passes_kept_[variant_index];
  return true;
}

run_scheduler::run_scheduler(const campaign_options& o, const run_numbering& numbering, campaign_tally tally,
                             progress_meter* progress)
    : o_(o), numbering_(numbering), progress_(progress), passes_to_keep_(passes_to_keep(o)), tally_(std::move(tally)) {
  stop_ = stopped_early_ = o.until_fail && tally_.failures_ > 0;
  // The meter counts what a resume found as done, as its failures are: one rate of one set of runs.
  if (progress_) progress_->update(tally_.resumed_, tally_.failures_);
}

bool run_scheduler::is_recorded(std::uint64_t k) const {
  const std::uint64_t bit = k / tally_.shard_count_;
  return bit < tally_.recorded_.size() && tally_.recorded_[bit];
}

bool run_scheduler::checkpoint_due() const {
  return o_.checkpoint && o_.checkpoint_runs > 0 && since_checkpoint_ >= o_.checkpoint_runs;
}

unsigned run_scheduler::most_in_flight() const {
  if (o_.schedule == schedule_kind::cpu) return std::min(max_jobs, o_.jobs * cpu_overcommit);
  if (o_.schedule != schedule_kind::declared) return o_.jobs;
  return declared_most_in_flight(o_.variants, o_.jobs);
}

// The slots the runs in flight take now (schedule_kind::cpu): a run counts its slots until it has
// been measured for cpu_lend_after, then the larger of its last two windows' use, at most its
// slots. A run that cannot be read counts its slots, but one the harness is ending counts one:
// that work (a hang's stacks, a crash's core, the reaping) is done on the run's one thread.
double run_scheduler::measured_slots() {
  double used = 0;
  for (auto& f : flights_) {
    auto now = f.use ? f.use->read() : std::nullopt;
    if (!now) {
      f.first.reset();
      f.last.reset();
      used += f.use && f.use->where() == run_cpu_use::stage::ending ? 1 : f.slots;
      continue;
    }
    if (!f.first) {
      f.first = f.last = now;
      used += f.slots;
      continue;
    }
    const auto window = std::chrono::duration<double>(now->at - f.last->at).count();
    if (window * 1000 >= static_cast<double>(cpu_sample_period.count()) / 2) {
      f.cpus_before = f.cpus;
      f.cpus = std::chrono::duration<double>(now->usage - f.last->usage).count() / window;
      f.last = now;
    }
    used += now->at - f.first->at < cpu_lend_after ? f.slots : std::min<double>(f.slots, std::max(f.cpus, f.cpus_before));
  }
  return used;
}

bool run_scheduler::room_for(std::uint64_t k) {
  const unsigned slots = numbering_.slots_of(k);
  if (o_.schedule == schedule_kind::declared) {
    if (in_flight_ == 0) return true;
    if (in_flight_ >= most_in_flight() || cpu_in_use_ + numbering_.cpu_of(k) > o_.jobs * 100) return false;
    return !numbering_.variant_of(k).slots_are_devices || slots_in_use_ + slots <= o_.jobs;
  }
  if (slots_in_use_ + slots <= o_.jobs) return true;
  if (o_.schedule != schedule_kind::cpu || in_flight_ >= most_in_flight()) return false;
  return measured_slots() + slots <= o_.jobs;
}

std::optional<std::uint64_t> run_scheduler::overtaker(std::uint64_t total) {
  if (o_.schedule != schedule_kind::declared) return std::nullopt;
  unsigned looked = 0;
  for (std::uint64_t j = next_ + 1; j < total && looked < most_in_flight(); ++j) {
    if (!numbering_.owns(j) || is_recorded(j) || ahead_.count(j)) continue;
    ++looked;
    if (room_for(j)) return j;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> run_scheduler::claim(run_cpu_use* use) {
  std::unique_lock lock(mu_);
  std::uint64_t k = 0;
  for (;;) {
    const std::uint64_t total = numbering_.total();
    while (next_ < total && (!numbering_.owns(next_) || is_recorded(next_) || ahead_.erase(next_) != 0)) ++next_;
    if (stop_ || next_ >= total || (o_.cancel && o_.cancel->load())) return std::nullopt;
    if (o_.deadline && std::chrono::steady_clock::now() >= *o_.deadline) {
      deadline_reached_ = true;
      return std::nullopt;
    }
    const bool due = checkpoint_due();
    if (!due && !checkpointing_) {
      if (room_for(next_)) {
        k = next_++;
        break;
      }
      if (auto later = overtaker(total)) {
        k = *later;
        ahead_.insert(k);
        break;
      }
    }
    if (due && !checkpointing_ && in_flight_ == 0) {
      run_checkpoint(lock);
      continue;
    }
    idle_.wait_for(lock, o_.schedule == schedule_kind::cpu ? cpu_sample_period : std::chrono::milliseconds(100));
  }
  ++in_flight_;
  slots_in_use_ += numbering_.slots_of(k);
  cpu_in_use_ += numbering_.cpu_of(k);
  if (use) use->begin();  // not the thread's last run, which was ending
  if (o_.schedule == schedule_kind::cpu) flights_.push_back({.k = k, .slots = numbering_.slots_of(k), .use = use, .first = {}, .last = {}, .cpus = 0, .cpus_before = 0});
  return k;
}

// With no run in flight, and none starting until it returns: the checkpoint sees every run
// recorded so far, and nothing changes under it.
void run_scheduler::run_checkpoint(std::unique_lock<std::mutex>& lock) {
  checkpointing_ = true;
  since_checkpoint_ = 0;
  const std::uint64_t recorded = tally_.resumed_ + performed_, failures = tally_.failures_;
  lock.unlock();
  o_.checkpoint(recorded, failures);
  lock.lock();
  checkpointing_ = false;
  idle_.notify_all();
}

bool run_scheduler::keep_pass(std::uint64_t k) {
  std::lock_guard lock(mu_);
  std::uint64_t& kept = tally_.passes_kept_[numbering_.variant_index(k)];
  if (kept >= passes_to_keep_) return false;
  ++kept;
  return true;
}

void run_scheduler::end_run(std::uint64_t k) {
  --in_flight_;
  slots_in_use_ -= numbering_.slots_of(k);
  cpu_in_use_ -= numbering_.cpu_of(k);
  std::erase_if(flights_, [k](const flight& f) { return f.k == k; });
  idle_.notify_all();  // a checkpoint waiting for no run in flight, a wide run for room
}

void run_scheduler::abandon(std::uint64_t k) {
  std::lock_guard lock(mu_);
  end_run(k);
}

void run_scheduler::record(std::uint64_t k, const run_record& r) {
  std::lock_guard lock(mu_);
  end_run(k);
  ++since_checkpoint_;
  ++performed_;
  tally_.summary_.add(r);
  if (r.result != outcome::pass) {
    ++tally_.failures_;
    if (o_.until_fail) stop_ = stopped_early_ = true;
  }
  if (progress_) progress_->update(tally_.resumed_ + performed_, tally_.failures_);
}

void run_scheduler::writing_failed(std::uint64_t k, const core::status& error) {
  std::lock_guard lock(mu_);
  end_run(k);
  // Nothing more can be recorded (a full disk, say): a run performed now would be lost.
  if (write_error_.is_ok()) write_error_ = error;
  stop_ = true;
}

bool run_scheduler::stopped() const {
  std::lock_guard lock(mu_);
  return stop_;
}

bool run_scheduler::stopped_early() const {
  std::lock_guard lock(mu_);
  return stopped_early_;
}

bool run_scheduler::deadline_reached() const {
  std::lock_guard lock(mu_);
  return deadline_reached_;
}

std::uint64_t run_scheduler::resumed() const {
  std::lock_guard lock(mu_);
  return tally_.resumed_;
}

std::uint64_t run_scheduler::performed() const {
  std::lock_guard lock(mu_);
  return performed_;
}

core::status run_scheduler::write_error() const {
  std::lock_guard lock(mu_);
  return write_error_;
}

std::vector<variant_summary> run_scheduler::summaries() const {
  std::lock_guard lock(mu_);
  return tally_.summary_.summaries();
}

}  // namespace faultline::harness::detail
