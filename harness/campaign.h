// A campaign: many runs of one or more variants (a scenario, a scenario with a bug point
// planted, a user's command), spread over worker threads, each run isolated by run_once and
// recorded as one line of OUT/results.jsonl the moment it ends.
//
// Runs are numbered globally, round-robin over the variants (run k is repetition k / V of
// variant k % V), so a shard (`--shard i/n`) takes every n-th run and a campaign stopped early
// has tried every variant about equally. Repetition r of a variant gets seed S + r: the seed of
// a failure is all it takes to replay it.
//
//   harness::campaign_options o;
//   o.variants = {{.name = "exit/static-pool", .argv = {bin, "run", "exit/static-pool"}, .timeout = 20s}};
//   o.repeat = 100;
//   o.seed = 42;
//   o.out_dir = "out";
//   auto r = harness::run_campaign(o);   // r->records: one per run performed
//
// Thread safety: run_campaign blocks; it may not be called twice at once in one process when
// `check_shm` attribution matters (it is then only done with one job).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "core/status.h"
#include "harness/results.h"
#include "harness/shard.h"
#include "harness/stacks.h"

namespace faultline::harness {

/// One thing to run repeatedly.
struct variant {
  std::string name;                      ///< recorded in results ("exit/static-pool", "my_test")
  std::vector<std::string> argv;         ///< the command
  std::string faults;                    ///< FAULTLINE_FAULTS for its runs ("" = none)
  std::chrono::milliseconds timeout{600'000};
  std::vector<std::string> env;          ///< extra "K=V" for its runs
  bool gtest_output = false;             ///< ask gtest programs for RUNDIR/gtest.xml
};

/// How to run the campaign.
struct campaign_options {
  std::vector<variant> variants;
  std::uint64_t repeat = 1;              ///< runs per variant (before sharding)
  std::uint64_t seed = 0;                ///< repetition r runs with seed + r
  bool until_fail = false;               ///< start no new run after the first failure
  unsigned jobs = 1;                     ///< runs at once
  shard part;                            ///< which runs this process performs
  std::filesystem::path out_dir = "faultline-out";
  std::chrono::milliseconds grace{1'000};
  stack_options stacks;
  std::vector<std::string> env;          ///< base environment of every run
  std::ostream* progress = nullptr;      ///< progress line (null: none)
  bool progress_tty = false;
  const std::atomic<bool>* cancel = nullptr;  ///< stop: kill runs in flight, start no more
};

/// What a campaign did.
struct campaign_result {
  std::vector<run_record> records;       ///< every completed run, in run-number order
  bool interrupted = false;              ///< cancelled before the end
  bool stopped_early = false;            ///< --until-fail stopped it
  std::vector<int> stray_pids;           ///< unattributed processes killed at the end
  std::vector<std::string> stray_shm;    ///< /dev/shm/faultline* entries left (removed)
};

/// "exit-static-pool.s42": the variant name made file-safe, plus the seed.
std::string make_run_id(const std::string& name, std::uint64_t seed);

/// The runs of `total` that `part` owns, counted.
std::uint64_t owned_runs(std::uint64_t total, const shard& part);

/// Performs the campaign. Errors: io_error when the output directory or results file cannot
/// be created, invalid_argument for an empty variant list or jobs == 0.
core::result<campaign_result> run_campaign(const campaign_options& o);

}  // namespace faultline::harness
