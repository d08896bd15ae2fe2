// Keeps the core of every crashed run where core_pattern gives every core of a directory one name.
//
// With core_pattern "core" (and core_uses_pid 0), the default of many machines and containers,
// the kernel writes each crashing process's core to the one file CWD/core: it unlinks the file
// there and creates a new one. Runs of a campaign that share a working directory (every `exec`
// run starts in the user's directory) and crash at the same moment then lose each other's cores:
// measured on an H100 at --jobs 6, 22 of 26 crashes of an RMM client were named by their signal
// alone. Changing core_pattern needs root and changes the machine; changing the runs' working
// directory changes the program. Neither is needed: the kernel unlinks the old core, it does not
// truncate it, so whoever holds the file open keeps it. The keeper watches the directory
// (inotify, IN_CREATE) and opens every new file of that name the moment it appears; the run that
// crashed reads its core through the descriptor (/proc/self/fd/N) once it has been reaped, after
// the kernel finished writing it, whatever other cores replaced the name since. A core is whose
// its notes say (core_dump.cc checks the pid), so a held core is never taken for another run's.
//
//   auto& keeper = core_keeper::instance();
//   keeper.watch("/home/me/proj", "core");               // before the runs start
//   for (const auto& c : keeper.held("/home/me/proj")) { ... read c.path ...; keeper.release(c, whose == mine); }
//
// Runs say when they begin and end (begin_run, end_run); a run claims its own cores once it has
// ended (core_dump.h, claim_cores), and a core no run claimed (another program's, crashed in the
// same directory) is let go once every run that was running when it appeared has ended, so the
// keeper holds a core only while a run may still claim it.
//
// Limit: a core replaced in the microseconds between its creation and the keeper's open is lost
// as before; so is one replaced in a directory a run's process moved to before the keeper has
// read that process's record and watched the directory (a crash within moments of the move,
// together with another crash there). Held cores are bounded besides (the oldest is let go past 64, and any past 10 minutes).
//
// Thread safety: every member may be called from any thread; one watcher thread per process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace faultline::harness {

class core_keeper {
 public:
  /// One core held open.
  struct held_core {
    std::filesystem::path path;  ///< "/proc/self/fd/N": reads the file whatever replaced its name
    std::filesystem::path name;  ///< where it was created (DIR/core)
    int fd = -1;
    dev_t device = 0;
    ino_t inode = 0;
  };

  /// The process's keeper (its watcher thread starts at the first watch()).
  static core_keeper& instance();

  /// Holds every file named `name` created in `dir` from now on (idempotent per directory and
  /// name). Errors: io_error when inotify cannot watch the directory (then cores there are only
  /// found by name, as before).
  core::status watch(const std::filesystem::path& dir, const std::string& name);

  /// Follows a run's processes where they go: each record the agent renames into `run_dir`
  /// (cwd.PID, faults/preload/protocol.h) names a directory, which is then watched for `name` as
  /// watch() does. Errors: as watch().
  core::status follow(const std::filesystem::path& run_dir, const std::string& name);

  /// Stops following `run_dir` (its run has ended); a directory only its records named is no
  /// longer watched. At most 32 directories are watched for one run directory's records (a
  /// program that walks a tree): cores in the others are still found by name after the run.
  void unfollow(const std::filesystem::path& run_dir);

  /// The cores held for files in `dir`, oldest first, each through a descriptor of the caller's
  /// own (pass every one to release()).
  std::vector<held_core> held(const std::filesystem::path& dir);

  /// Closes the caller's descriptor of `core`; with `mine` (the core was read and belongs to the
  /// caller's run) the keeper lets it go too, and its name leaves the directory when the name
  /// still points to it.
  void release(const held_core& core, bool mine);

  /// A run whose cores may fall in a watched directory begins: the keeper holds what appears
  /// until the run has claimed its cores. Pass the ticket to end_run() once it has (any thread).
  std::uint64_t begin_run();

  /// The run of `ticket` has claimed its cores. A held core that no run claimed is let go (closed;
  /// its name is left as it is: it is another process's) once every run that was running when it
  /// appeared has ended.
  void end_run(std::uint64_t ticket);

  /// Every descriptor the keeper has open on purpose: its inotify descriptor, the cores it holds
  /// and those it lent through held() and not yet got back. (The soak's leak check leaves them out.)
  std::set<int> descriptors();

  core_keeper(const core_keeper&) = delete;
  core_keeper& operator=(const core_keeper&) = delete;

 private:
  core_keeper() = default;
  void watch_loop();
  void hold(const std::filesystem::path& file);
  core::status start();  // the inotify descriptor and the watcher thread, once (mu_ held)
  // `follower`: the run directory whose record names `dir` (empty: watch() or follow() itself).
  core::status add_watch(const std::filesystem::path& dir, const std::string& name, bool follow,
                         const std::filesystem::path& follower = {});
  // Takes out of held_ every core no live run can own any more; returns their descriptors (mu_ held).
  std::vector<int> take_unowned();

  struct watched {
    int wd;
    std::filesystem::path dir;
    std::string name;     // the core's file name
    bool follow = false;  // a run directory: its cwd.PID records name directories to watch
    bool lasting = false;  // watch(): for as long as the harness runs
    std::set<std::filesystem::path> followers;  // the run directories whose records named it
  };
  struct entry {
    held_core core;
    std::chrono::steady_clock::time_point since;
    std::uint64_t newest_run;  // the last ticket handed out when it appeared
  };

  std::mutex mu_;
  int inotify_fd_ = -1;
  std::vector<watched> watched_;
  std::vector<entry> held_;
  std::uint64_t tickets_ = 0;     // handed out so far
  std::set<std::uint64_t> live_;  // runs begun and not ended
  std::set<int> lent_;            // descriptors held() gave out, not yet released
};

}  // namespace faultline::harness
