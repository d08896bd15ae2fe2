// The exit-race amplifier and faithful crash capture, end to end through `faultline exec` on the
// project's CPU exit races (harness/testdata/race): detached workers that touch memory which a
// static destructor, an atexit handler or a shared library's destructor unmaps at exit. Bare,
// they crash in some fraction of runs; with exit/end=delay(100ms) the process stays alive in its
// torn-down state and every run must crash, while the fixed program (--drain) never may. The
// crash report of a program built without debug information must name the worker's function.
// What the races write at exit (--exit-stderr, --exit-printf, --exit-flood) must reach the run's
// log byte for byte: all of it when the run passes, everything written before the crash when it
// crashes; a MiB written at exit must not hold the run up. And ci/fidelity.py, which measures
// these programs, must run end to end and count what it sees.
// Rates here are counts of outcomes under a deterministic injector, not timings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "harness/results/results.h"
#include "harness/run/core_dump.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::slurp;

using testing::program;
using testing::run_faultline;
using testing::scratch_dir;

constexpr const char* amplifier = "exit/end=delay(100ms)";

namespace fs = std::filesystem;

nlohmann::json exec_summary(const scratch_dir& dir, int runs, const std::vector<std::string>& cmd,
                            const std::vector<std::string>& options, int jobs = 2) {
  std::vector<std::string> args = {"exec", "--repeat", std::to_string(runs), "--jobs", std::to_string(jobs), "--seed", "1",
                                   "--timeout", "30s", "--out", (dir.path() / "out").string(), "--json"};
  args.insert(args.end(), options.begin(), options.end());
  args.push_back("--");
  args.insert(args.end(), cmd.begin(), cmd.end());
  auto r = run_faultline(args);
  EXPECT_TRUE(r.status == 0 || r.status == 1) << r.err;
  auto last = r.out.find_last_of('\n', r.out.size() - 2);
  return nlohmann::json::parse(r.out.substr(last == std::string::npos ? 0 : last + 1));
}

class amplifier_test : public ::testing::TestWithParam<const char*> {};

TEST_P(amplifier_test, reproduces_the_exit_race_in_every_run) {
  scratch_dir dir;
  auto s = exec_summary(dir, 20, {program(GetParam()).string()}, {"--faults", amplifier});
  EXPECT_EQ(s["runs"], 20);
  EXPECT_GE(s["outcomes"].value("crash", 0), 19) << s.dump(1);  // the target: >= 95%
  for (const auto& g : s["signatures"]) EXPECT_EQ(g["phase"], "exit") << g.dump();
}

TEST_P(amplifier_test, leaves_the_fixed_program_clean) {
  scratch_dir dir;
  auto s = exec_summary(dir, 40, {program(GetParam()).string(), "--drain"}, {"--faults", amplifier});
  EXPECT_EQ(s["outcomes"].value("pass", 0), 40) << s.dump(1);
}

INSTANTIATE_TEST_SUITE_P(cpu_exit_races, amplifier_test,
                         ::testing::Values("fl_race_static_dtor", "fl_race_atexit", "fl_race_shlib_dtor"));

TEST(crash_capture, a_signature_names_the_workers_function_without_debug_info) {
  // The default capture: the kernel's core, read by gdb. Cores land in the run's working
  // directory (core_pattern "core" on most machines): a fresh one, so that no core/ folder and no
  // other test's crash is in the way.
  if (auto why = enable_core_capture(); !why.empty()) GTEST_SKIP() << "no core capture here: " << why;
  scratch_dir dir;
  struct restore_cwd {
    std::filesystem::path was = std::filesystem::current_path();
    ~restore_cwd() { std::filesystem::current_path(was); }
  } restore;
  std::filesystem::current_path(dir.path());
  if (auto why = core_destination_problem(dir.path()); !why.empty()) GTEST_SKIP() << why;
  // One run at a time: with core_pattern "core", crashes at the same moment share one file name.
  auto s = exec_summary(dir, 4, {program("fl_race_static_dtor").string()}, {"--faults", amplifier}, 1);
  ASSERT_FALSE(s["signatures"].empty()) << s.dump(1);
  EXPECT_NE(s["signatures"][0]["signature"].get<std::string>().find("race_worker_touch"), std::string::npos)
      << s.dump(1);
}

// The exit-time writes of the race programs (race_common.h), through `faultline exec` with the
// amplifier, every log kept.


std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Every run of `exec_summary(dir, ...)` with `--keep all`: its record and its log's text.
std::vector<std::pair<run_record, std::string>> runs_with_logs(const scratch_dir& dir) {
  std::vector<std::pair<run_record, std::string>> out;
  auto r = read_results(dir.path() / "out" / "results.jsonl");
  EXPECT_TRUE(r) << r.error().message();
  if (!r) return out;
  for (const auto& rec : r->records) {
    EXPECT_FALSE(rec.log.empty()) << rec.run_id << ": --keep all keeps every log";
    out.emplace_back(rec, rec.log.empty() ? std::string() : slurp(dir.path() / "out" / rec.log));
  }
  return out;
}

const std::string flood_line = "fl_race: exit flood, 64-byte lines to stdout, 1 MiB in all.....\n";
constexpr std::size_t flood_lines = (std::size_t{1} << 20) / 64;

struct exit_writer {
  const char* program;
  const char* who;  // how race_common.h's release_at_exit names the exit-time code
};

void PrintTo(const exit_writer& w, std::ostream* os) { *os << w.program; }

class exit_output_test : public ::testing::TestWithParam<exit_writer> {};

TEST_P(exit_output_test, a_crashed_runs_log_keeps_everything_written_before_the_crash) {
  // The flood (1 MiB to stdout) is written and flushed before the exit-time code releases the
  // buffer, so every byte precedes the crash; a harness that did not drain the output as it came
  // would make these runs hang. --exit-stderr's line follows the release: the worker may crash
  // the process before it is written, so it may be missing, never repeated.
  scratch_dir dir;
  auto s = exec_summary(dir, 10, {program(GetParam().program).string(), "--exit-flood", "--exit-stderr"},
                        {"--faults", amplifier, "--keep", "all"});
  EXPECT_GE(s["outcomes"].value("crash", 0), 9) << s.dump(1);
  EXPECT_EQ(s["outcomes"].value("hang", 0), 0) << s.dump(1);
  const std::string line = std::string("fl_race: ") + GetParam().who + " released the worker's buffer\n";
  auto runs = runs_with_logs(dir);
  EXPECT_EQ(runs.size(), 10u);
  for (const auto& [rec, log] : runs) {
    EXPECT_EQ(count_of(log, "work done\n"), 1u) << rec.run_id << " (" << to_string(rec.result) << ")";
    EXPECT_EQ(count_of(log, flood_line), flood_lines) << rec.run_id << ": " << log.size() << " bytes";
    EXPECT_LE(count_of(log, line), 1u) << rec.run_id;
  }
}

TEST_P(exit_output_test, the_fixed_program_writes_every_exit_line_into_its_log) {
  // --drain: nothing crashes, so the exit-time code's line is written and exit() reaches stdio's
  // last flush, which writes --exit-printf's line (left in the buffer when main returned) after
  // "work done" (both on stdout; where stderr's line falls among them is not asserted).
  scratch_dir dir;
  auto s = exec_summary(dir, 10, {program(GetParam().program).string(), "--drain", "--exit-printf", "--exit-stderr"},
                        {"--faults", amplifier, "--keep", "all"});
  EXPECT_EQ(s["outcomes"].value("pass", 0), 10) << s.dump(1);
  const std::string line = std::string("fl_race: ") + GetParam().who + " released the worker's buffer\n";
  auto runs = runs_with_logs(dir);
  EXPECT_EQ(runs.size(), 10u);
  for (const auto& [rec, log] : runs) {
    const auto done = log.find("work done\n");
    const auto last = log.find("fl_race: main returns; exit() flushes this line\n");
    ASSERT_NE(done, std::string::npos) << rec.run_id << ":\n" << log;
    ASSERT_NE(last, std::string::npos) << rec.run_id << ":\n" << log;
    EXPECT_LT(done, last) << rec.run_id << ":\n" << log;
    EXPECT_EQ(count_of(log, line), 1u) << rec.run_id << ":\n" << log;
  }
}

INSTANTIATE_TEST_SUITE_P(cpu_exit_races, exit_output_test,
                         ::testing::Values(exit_writer{"fl_race_static_dtor", "static destructor"},
                                           exit_writer{"fl_race_atexit", "atexit handler"},
                                           exit_writer{"fl_race_shlib_dtor", "library destructor"}),
                         [](const auto& p) { return std::string(p.param.program); });

// ci/fidelity.py end to end, small: one round of two programs (one that always fails, one that
// never does) in every bare destination and two harness modes. It needs python3 and the source
// tree (found from this file's path, absolute under the project's generators).
TEST(fidelity_benchmark, runs_end_to_end_and_counts_failures_in_every_mode) {
  const fs::path script = fs::path(__FILE__).parent_path().parent_path() / "ci" / "fidelity.py";
  if (!fs::exists(script)) GTEST_SKIP() << script << " not found (the source tree is elsewhere)";
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  scratch_dir dir;
  const fs::path json = dir.path() / "fidelity.json";
  auto quoted = [](const std::string& s) { return "'" + s + "'"; };
  const std::string cmd = "timeout 120 python3 " + quoted(script.string()) + " --build " +
                          quoted(testing::bin_dir().parent_path().string()) +
                          " --runs 2 --jobs 2 --timeout 20 --modes bare-pipe,bare,bare-file,default,amplified"
                          " --program false --program 'fl_race_static_dtor --drain --exit-flood' --json " +
                          quoted(json.string()) + " 2>&1";
  std::string output;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, p)) > 0;) output.append(chunk, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << output;

  auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["reference"], "bare-pipe");
  // `bare` is recorded as what it means now: bare-null.
  EXPECT_EQ(j["modes"], nlohmann::json({"bare-pipe", "bare-null", "bare-file", "default", "amplified"}));
  ASSERT_EQ(j["rows"].size(), 10u) << j.dump(1);
  for (const auto& row : j["rows"]) {
    const bool fails = row["program"] == "false";
    EXPECT_EQ(row["runs"], 2) << row.dump();
    EXPECT_EQ(row["failures"], fails ? 2 : 0) << row.dump();
    if (row["mode"] == "default") {
      EXPECT_EQ(row["faithful"], true) << row.dump();  // the same counts: Fisher's p is 1
      EXPECT_EQ(row["p_value"], 1.0) << row.dump();
      EXPECT_EQ(row["inside_reference_interval"], true) << row.dump();
    }
    if (row["mode"] == "bare-pipe" || row["mode"] == "amplified") {
      EXPECT_TRUE(row["faithful"].is_null()) << row.dump();
      EXPECT_TRUE(row["p_value"].is_null()) << row.dump();
      EXPECT_TRUE(row["inside_reference_interval"].is_null()) << row.dump();
    }
  }
}

// ci/fidelity.py --where elsewhere (issue 38, item 3): a program run as `sh -c 'cd elsewhere &&
// exec PROG'` crashes away from where faultline started it; every crash is named by its frames
// and no core is left in the scratch directory.
TEST(fidelity_benchmark, a_crash_after_a_cd_is_named_and_leaves_no_core_behind) {
  const fs::path script = fs::path(__FILE__).parent_path().parent_path() / "ci" / "fidelity.py";
  if (!fs::exists(script)) GTEST_SKIP() << script << " not found (the source tree is elsewhere)";
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  if (auto why = enable_core_capture(); !why.empty()) GTEST_SKIP() << "no core capture here: " << why;
  if (!core_home(fs::temp_directory_path())) GTEST_SKIP() << "core_pattern does not name a file relative to the crashing process";
  scratch_dir dir;
  const fs::path json = dir.path() / "fidelity.json";
  auto quoted = [](const std::string& s) { return "'" + s + "'"; };
  const std::string cmd = "timeout 120 python3 " + quoted(script.string()) + " --build " +
                          quoted(testing::bin_dir().parent_path().string()) +
                          " --runs 3 --jobs 1 --timeout 20 --modes default --where elsewhere"
                          " --program fl_testdata_crash_in_work --json " + quoted(json.string()) + " 2>&1";
  std::string output;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, p)) > 0;) output.append(chunk, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << cmd << "\n" << output;
  auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["where"], "elsewhere");
  ASSERT_EQ(j["rows"].size(), 1u) << j.dump(1);
  const auto& row = j["rows"][0];
  EXPECT_EQ(row["failures"], 3) << row.dump();
  EXPECT_EQ(row["crashes"], 3) << row.dump();
  EXPECT_EQ(row["named_crashes"], 3) << row.dump();
  EXPECT_EQ(row["stray_cores"], 0) << row.dump();
}

}  // namespace
}  // namespace faultline::harness
