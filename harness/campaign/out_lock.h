// One live campaign per output directory. Two campaigns on one --out (a `soak --resume` started
// while the soak still runs) would perform the same run numbers side by side, and the two copies
// of a run would share their names: its region files, its log, its run directory. The campaign
// entry points (run_campaign, run_soak) therefore hold OUT/.faultline.lock for as long as they
// write into OUT, and a second campaign there is refused with the holder's pid.
//
//   auto lock = harness::out_dir_lock::acquire(out_dir);
//   if (!lock) return lock.error();   // busy: "... in use by another campaign: pid 4242 (faultline soak ...)"
//   ...                               // released when `lock` is destroyed
//
// The lock is an flock(2) on the file, so the kernel drops it when its holder dies, even by
// SIGKILL: a dead campaign never blocks the next. The file is opened close-on-exec, so the runs
// never inherit it (and containment's keepers close every close-on-exec descriptor they start
// with). After locking, the holder writes "PID\nCOMMAND LINE\n" into the file for the refusal
// message; what the file says is only a hint, the flock is the truth. The holder removes the file
// before it unlocks, so a finished campaign leaves OUT as it wrote it (a killed one leaves the
// file, which blocks nobody); whoever locks a file checks that the path still names it, else it
// opens the path again — so two campaigns never hold two different files of one name.
//
// One process must not acquire the same directory twice: flock locks belong to the open file
// description, so a second out_dir_lock of the directory in the holder's process is refused like
// any other (a soak passes its lock to the campaign it runs instead, campaign.h).
//
// Thread safety: acquire may be called from any thread; an out_dir_lock is not shared.
#pragma once

#include <filesystem>

#include "core/status.h"

namespace faultline::harness {

/// The lock file's name in an output directory.
inline constexpr const char* out_lock_file = ".faultline.lock";

/// The exclusive hold of one output directory by one campaign (movable, not copyable).
class out_dir_lock {
 public:
  /// Creates `out_dir` when missing and locks OUT/.faultline.lock without waiting.
  /// Errors: busy when another campaign (or another out_dir_lock in this process) holds it — the
  /// message names the directory and the holder's pid and command line, as far as the holder
  /// wrote them; io_error when the directory or the file cannot be created, opened or locked.
  static core::result<out_dir_lock> acquire(const std::filesystem::path& out_dir);

  out_dir_lock(out_dir_lock&& other) noexcept;
  out_dir_lock& operator=(out_dir_lock&& other) noexcept;
  out_dir_lock(const out_dir_lock&) = delete;
  out_dir_lock& operator=(const out_dir_lock&) = delete;
  /// Removes the lock file and releases the lock.
  ~out_dir_lock();

  /// The directory it holds, as given to acquire.
  const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  out_dir_lock(int fd, std::filesystem::path dir) noexcept : fd_(fd), dir_(std::move(dir)) {}
  void release() noexcept;

  int fd_ = -1;
  std::filesystem::path dir_;
};

}  // namespace faultline::harness
