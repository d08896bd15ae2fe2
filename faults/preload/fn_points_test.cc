// fn/<symbol> points (fn_points.h) in a program that knows nothing of faultline
// (testing/fn_points_child.cc): breakpoints at a function's entry, in the dynamic symbol table or
// only in the ELF one, single-stepped over so that the function still runs.
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

using namespace std::chrono_literals;
using testing::exited_0;

const std::string child_program = FAULTLINE_FN_POINTS_CHILD;
const std::string preload_library = FAULTLINE_AGENT_PRELOAD;

using testing::count;

// sum of 2k + 1 for k < n
long sum(long n) { return n * n; }

TEST(fn_points, each_call_is_a_hit_and_the_function_still_runs) {
  testing::preload_runner r(preload_library);
  auto f = r.run("fn/fn_exported_step=print", {child_program, "exported", "5", "hidden", "3"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "exported " + std::to_string(sum(5)) + "\nhidden " + std::to_string(sum(3)) + "\n");
  EXPECT_EQ(count(f.err, "fault point fn/fn_exported_step reached"), 5u) << f.err;
  EXPECT_EQ(r.reached(f.pid), "fn/fn_exported_step\n");
}

TEST(fn_points, a_function_only_the_elf_symbol_table_names_is_found) {
  testing::preload_runner r(preload_library);
  auto f = r.run("fn/_ZN12_GLOBAL__N_114fn_hidden_stepEl=2*print", {child_program, "hidden", "4"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "hidden " + std::to_string(sum(4)) + "\n");
  EXPECT_EQ(count(f.err, "reached (injected: print)"), 2u) << f.err;  // the count: 2 of 4
}

TEST(fn_points, kill_and_delay_act_at_the_entry) {
  testing::preload_runner r(preload_library);
  auto killed = r.run("fn/fn_exported_step=kill", {child_program, "hidden", "2", "exported", "2"});
  ASSERT_TRUE(WIFSIGNALED(killed.status));
  EXPECT_EQ(WTERMSIG(killed.status), SIGKILL);
  EXPECT_EQ(killed.out, "hidden 4\n");
  auto slow = r.run("fn/fn_exported_step=1*delay(300ms)", {child_program, "exported", "3"});
  ASSERT_TRUE(exited_0(slow)) << slow.err;
  EXPECT_GE(slow.took, 300ms);
}

// stop: the process stops at the entry (SIGSTOP) until it is continued; then the call goes on.
TEST(fn_points, stop_holds_the_process_at_the_entry_until_it_is_continued) {
  testing::preload_runner r(preload_library);
  auto f = r.start("fn/fn_exported_step=1*stop", {child_program, "hidden", "2", "exported", "3"});
  ASSERT_GT(f.pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(f.pid, &status, WUNTRACED), f.pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  r.collect(f);
  EXPECT_EQ(f.out, "hidden 4\n");  // stopped in the first call of the second step
  ::kill(f.pid, SIGCONT);
  ASSERT_EQ(::waitpid(f.pid, &status, 0), f.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  r.collect(f);
  EXPECT_EQ(f.out, "hidden 4\nexported 9\n");
}

TEST(fn_points, threads_stepping_over_one_breakpoint_all_run_correctly) {
  testing::preload_runner r(preload_library);
  auto f = r.run("fn/fn_exported_step=off", {child_program, "threads", "20000"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "threads " + std::to_string(4 * sum(20000)) + "\n");
}

TEST(fn_points, an_unknown_function_is_named_on_stderr_and_nothing_changes) {
  testing::preload_runner r(preload_library);
  auto f = r.run("fn/no_such_function_anywhere=kill", {child_program, "exported", "2"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "exported 4\n");
  EXPECT_NE(f.err.find("fn/no_such_function_anywhere: no such function"), std::string::npos) << f.err;
}

TEST(fn_points, an_offset_stands_inside_the_function_and_it_still_runs) {
  testing::preload_runner r(preload_library);
  // fn_asm_step's second instruction starts at byte 3: the point is reached there, once per call,
  // and stepping over it from the middle of the function leaves every result right.
  auto f = r.run("fn/fn_asm_step+3=print", {child_program, "inside", "6"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "inside " + std::to_string(sum(6)) + "\n");
  EXPECT_EQ(count(f.err, "fault point fn/fn_asm_step+3 reached"), 6u) << f.err;
  auto hex = r.run("fn/fn_asm_step+0x3=2*kill", {child_program, "inside", "5"});
  ASSERT_TRUE(WIFSIGNALED(hex.status)) << hex.err;
  EXPECT_EQ(WTERMSIG(hex.status), SIGKILL);
}

TEST(fn_points, an_offset_past_the_function_or_not_a_number_is_named_and_nothing_changes) {
  testing::preload_runner r(preload_library);
  auto past = r.run("fn/fn_asm_step+9=kill", {child_program, "inside", "2"});
  ASSERT_TRUE(exited_0(past)) << past.err;
  EXPECT_EQ(past.out, "inside 4\n");
  EXPECT_NE(past.err.find("fn/fn_asm_step+9: the offset is not inside the function (9 bytes)"), std::string::npos)
      << past.err;
  auto bad = r.run("fn/fn_asm_step+x1=kill", {child_program, "inside", "2"});
  ASSERT_TRUE(exited_0(bad)) << bad.err;
  EXPECT_NE(bad.err.find("fn/fn_asm_step+x1: the offset after '+' is not a number"), std::string::npos) << bad.err;
}

TEST(fn_points, each_process_draws_a_probability_on_its_own) {
  testing::preload_runner r(preload_library);
  // 24 forked children each hit the point once at 50%: drawn from one shared stream, all would
  // die or none would (the same draw in each); drawn apart, both outcomes happen (all or none:
  // odds of 1 in 8 million).
  r.make_phase_table();  // as the runner does: it gives each process its place
  auto f = r.run("fn/fn_exported_step=50%kill", {child_program, "fork", "24"}, {"FAULTLINE_SEED=7"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  ASSERT_EQ(f.out.rfind("fork killed=", 0), 0u) << f.out;
  const int killed = std::stoi(f.out.substr(12));
  EXPECT_GT(killed, 0) << f.out;
  EXPECT_LT(killed, 24) << f.out;
}

TEST(fn_points, a_sigtrap_of_the_program_still_reaches_the_crash_report) {
  testing::preload_runner r(preload_library);
  // With a breakpoint set, a SIGTRAP that is none of its own still reaches the agent's crash
  // handler, which reports it and lets the process die by it.
  auto f = r.run("fn/fn_exported_step=off", {child_program, "exported", "1", "trap", "0"});
  ASSERT_TRUE(WIFSIGNALED(f.status)) << f.err;
  EXPECT_EQ(WTERMSIG(f.status), SIGTRAP);
  EXPECT_EQ(f.out, "exported 1\n");
  EXPECT_EQ(testing::slurp(r.dir() / ("crash." + std::to_string(f.pid))).rfind("signal 5 SIGTRAP", 0), 0u);
}

// Issue 39: fn/ on code GCC optimized (testing/optimized_locks.c, -O2). give_slot exists only as
// give_slot.isra.0 (before: "no such function", nothing set); take_inline only as inlined copies
// (found in the DWARF by `faultline exec`; refused before run 1 without it); settle_slot's cold
// part is no entry: fn/settle_slot stands at the entry, fn/settle_slot.cold in the cold part.
TEST(fn_points, a_clone_inlined_copies_and_a_cold_part_are_found) {
  if (std::string(FAULTLINE_OPTIMIZED_LOCKS).empty()) GTEST_SKIP() << "built only with GCC (its clone names)";
  testing::preload_runner r(preload_library);
  const std::string program = FAULTLINE_OPTIMIZED_LOCKS, with_dwarf = FAULTLINE_OPTIMIZED_LOCKS_G;
  auto f = r.run("fn/give_slot=print", {program, "isra"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "isra wait=0 release=0\n");
  EXPECT_EQ(count(f.err, "fault point fn/give_slot reached in give_slot.isra.0 (injected: print)"), 1u) << f.err;
  EXPECT_EQ(r.reached(f.pid), "fn/give_slot\n");

  auto cold = r.run("fn/settle_slot.cold=print;fn/settle_slot=print", {program, "cold"});
  ASSERT_TRUE(exited_0(cold)) << cold.err;
  EXPECT_EQ(count(cold.err, "fault point fn/settle_slot reached (injected: print)"), 1u) << cold.err;
  EXPECT_EQ(count(cold.err, "fault point fn/settle_slot.cold reached (injected: print)"), 1u) << cold.err;

  const auto exec = [&](const std::string& spec, const std::string& command, std::string& logs) {
    const std::string out = (r.dir() / "campaign").string(), err = (r.dir() / "err.txt").string();
    const int status = std::system((std::string(FAULTLINE_CLI) + " exec --keep all --out " + out + " --faults '" + spec +
                                    "' -- " + command + " > /dev/null 2> " + err)
                                       .c_str());
    logs = testing::slurp(err);
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(out, ec))
      if (e.path().extension() == ".log") logs += testing::slurp(e.path());
    std::filesystem::remove_all(out, ec);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string logs;
  EXPECT_EQ(exec("fn/take_inline=print", with_dwarf + " inline", logs), 0) << logs;
  EXPECT_EQ(count(logs, "fault point fn/take_inline reached in take_inline inlined into first_taker"), 1u) << logs;
  EXPECT_EQ(count(logs, "fault point fn/take_inline reached in take_inline inlined into second_taker"), 1u) << logs;
  EXPECT_EQ(exec("fn/take_inline=print", program + " inline", logs), 2) << logs;
  EXPECT_NE(logs.find("fn/take_inline: no function take_inline"), std::string::npos) << logs;
  EXPECT_NE(logs.find("Without DWARF (.debug_info) nothing shows where a function was inlined"), std::string::npos) << logs;
  EXPECT_EQ(exec("fn/give_slot=print", program + " isra", logs), 0) << logs;
}

}  // namespace
}  // namespace faultline::agent
