// Helpers for the harness's end-to-end tests: where the built programs are, running the
// `faultline` binary, and checking that no process of a run survived it.
#pragma once

#include "harness/results/results.h"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace faultline::harness::testing {

/// BUILD/bin: where every executable of the build lands (beside the test binary).
std::filesystem::path bin_dir();
/// BUILD/bin/NAME; records a test failure when it does not exist (built by another target).
std::filesystem::path program(const std::string& name);
/// BUILD/lib/libfaultline_agent.so.
std::filesystem::path agent_preload();

/// A fresh, empty directory for one test, removed by the destructor.
class scratch_dir {
 public:
  scratch_dir();
  ~scratch_dir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// What `faultline ARGS` did.
struct command_result {
  int status = -1;  ///< exit status (-1: did not exit normally)
  std::string out, err;
};

/// Runs BUILD/bin/faultline with `args` and `env` overrides (K -> V; an empty V removes K).
command_result run_faultline(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                             std::chrono::seconds timeout = std::chrono::seconds(120));

/// run_faultline with `dir` as faultline's working directory (where `exec` runs a command).
command_result run_faultline_in(const std::filesystem::path& dir, const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env = {},
                                std::chrono::seconds timeout = std::chrono::seconds(120));

/// The regular files named `core` or `core.*` under `dir` (at any depth): cores left behind.
std::vector<std::filesystem::path> core_files_under(const std::filesystem::path& dir);

/// Waits up to `wait` for FILE to exist, then reads "label PID" lines.
std::map<std::string, pid_t> read_pid_file(const std::filesystem::path& file,
                                           std::chrono::milliseconds wait = std::chrono::milliseconds(0));

/// True while `pid` is a live (not zombie) process.
bool alive(pid_t pid);

/// Live processes whose environment has FAULTLINE_RUN_DIR=`run_dir` (they belong to that run).
std::vector<pid_t> processes_of_run(const std::filesystem::path& run_dir);

/// Polls `pred` every 20 ms until it holds (true) or `bound` has passed (false).
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds bound);

/// The lines of a file.
std::vector<std::string> read_lines(const std::filesystem::path& file);

/// A file's whole content ("" when it cannot be read).
std::string slurp(const std::filesystem::path& file);

/// The records of the campaign in `out` (its results.jsonl); a failure to read them fails the test.
std::vector<run_record> results_in(const std::filesystem::path& out);

}  // namespace faultline::harness::testing
