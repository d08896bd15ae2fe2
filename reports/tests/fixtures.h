// Results files for the reports' tests, written through the harness's own record format
// (harness::to_json), so that the tests read what a campaign writes.
//
//   testing::temp_dir dir;
//   auto recs = testing::runs("exit/static-pool", 100, 3, harness::outcome::crash, "SIGSEGV: f | main");
//   testing::write_results(dir.path() / "run", recs);
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/results/results.h"

namespace faultline::reports::testing {

/// A fresh, empty directory, removed (with its contents) by the destructor.
class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// One record of variant `name`: run number `run`, seed 1000 + run, started at 2026-01-01 00:00:00
/// plus `run` seconds, lasting 20 + run % 7 ms; a failure gets phase `when` and `signature`.
harness::run_record record(const std::string& name, std::uint64_t run, harness::outcome result = harness::outcome::pass,
                           const std::string& signature = "", harness::phase when = harness::phase::none);

/// `count` runs of `name` numbered first_run, first_run + stride, ...; the first `failures` of
/// them end with `result` and `signature` (phase exit), the rest pass.
std::vector<harness::run_record> runs(const std::string& name, std::uint64_t count, std::uint64_t failures = 0,
                                      harness::outcome result = harness::outcome::crash, const std::string& signature = "",
                                      std::uint64_t first_run = 0, std::uint64_t stride = 1, const std::string& faults = "");

/// `count` runs of a user's command `argv` as `faultline exec` records them (named for its
/// program, `argv` as the command), otherwise as runs() makes them.
std::vector<harness::run_record> command_runs(const std::vector<std::string>& argv, std::uint64_t count, std::uint64_t failures = 0,
                                              harness::outcome result = harness::outcome::crash, const std::string& signature = "",
                                              std::uint64_t first_run = 0, const std::string& faults = "");

/// Writes DIR/results.jsonl (creating DIR) with one line per record, then `tail` verbatim.
/// Returns the file's path.
std::filesystem::path write_results(const std::filesystem::path& dir, const std::vector<harness::run_record>& records,
                                    const std::string& tail = "");

/// Writes DIR/campaign.json as the harness does, for shard `shard` ("i/n") of a campaign with
/// `seed` and `variants` (names, no faults).
void write_manifest(const std::filesystem::path& dir, const std::string& shard, std::uint64_t seed,
                    const std::vector<std::string>& variants);

/// A campaign set like the one issue 28 reported (a report of 8.7 MB): `campaigns` results
/// directories DIR/campaign0, DIR/campaign1, ... holding `runs` runs in all, over 20 variants of
/// which every fifth is a detection check (a bug point planted; 90% of its runs detect it). Of
/// the other variants' runs about 6% crash, each with a signature, stacks file and top frames of
/// its own (an address in the top frame), and 2% hang (one signature). A campaign's runs start
/// 2.3 s apart, campaigns an hour apart; durations spread from 10 ms to a few hundred.
/// Deterministic. Returns the directories.
std::vector<std::filesystem::path> campaign_set(const std::filesystem::path& dir, std::uint64_t runs,
                                                std::uint64_t campaigns = 4);

/// `count` runs of `name` whose first hangs as a distributed run does: rank 1 stopped by a point
/// before its third all-reduce (pid 4101), rank 0 waiting in it (pid 4100), with that signature
/// ("hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it").
std::vector<harness::run_record> distributed_hang(const std::string& name, std::uint64_t count);

/// A file's content.
std::string read_text(const std::filesystem::path& file);

/// Concatenates vectors of records.
std::vector<harness::run_record> operator+(std::vector<harness::run_record> a, const std::vector<harness::run_record>& b);

}  // namespace faultline::reports::testing
