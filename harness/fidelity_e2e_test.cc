// The exit-race amplifier and faithful crash capture, end to end through `faultline exec` on the
// project's CPU exit races (harness/testdata/race): detached workers that touch memory which a
// static destructor, an atexit handler or a shared library's destructor unmaps at exit. Bare,
// they crash in some fraction of runs; with exit/end=delay(100ms) the process stays alive in its
// torn-down state and every run must crash, while the fixed program (--drain) never may. The
// crash report of a program built without debug information must name the worker's function.
// Rates here are counts of outcomes under a deterministic injector, not timings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "harness/core_dump.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::program;
using testing::run_faultline;
using testing::scratch_dir;

constexpr const char* amplifier = "exit/end=delay(100ms)";

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

}  // namespace
}  // namespace faultline::harness
