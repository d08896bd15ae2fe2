// Tests of the in-process agent, watched from outside as the runner sees it: each test runs a
// child program (posix_spawn, never fork) in a fresh run directory and checks the files of
// protocol.h, the child's output and how it died. faultline_agent_test_child links the agent;
// faultline_agent_test_plain knows nothing of it and gets libfaultline_agent.so by LD_PRELOAD.
// Waits are bounded but generous (a loaded 2-core machine); nothing asserts a duration.
// This file: install, markers, the crash handler and the stack dump (the preload and the phase
// table: agent_preload_test.cc; what both use: testing/agent_test_support.h).
#include "faults/preload/agent.h"

#include "faults/preload/testing/agent_test_support.h"

namespace faultline::agent {
namespace {

using namespace test_support;

// --- install ------------------------------------------------------------------------------

TEST(agent_install, does_nothing_without_a_run_dir) {
  child_process child({child_program, "install"}, child_env({}));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "disabled 0\ndisabled 0\nrun_dir (none)\n");
}

TEST(agent_install, fails_with_enoent_for_a_missing_directory) {
  run_directory dir;
  child_process child({child_program, "install"},
                      child_env({std::string(run_dir_env) + "=" + dir.path() + "/missing"}));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "failed " + std::to_string(ENOENT) + "\nfailed " +
                             std::to_string(ENOENT) + "\nrun_dir (none)\n");
  EXPECT_TRUE(dir.names().empty());
}

TEST(agent_install, is_idempotent_and_registers_the_process_once) {
  run_directory dir;
  child_process child({child_program, "install"}, run_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "installed 0\ninstalled 0\nrun_dir " + dir.path() + "\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\n");
}

TEST(agent_install, resolves_a_relative_run_dir_against_the_working_directory) {
  run_directory dir;
  std::string parent = dir.path().substr(0, dir.path().rfind('/'));
  std::string leaf = dir.path().substr(dir.path().rfind('/') + 1);
  child_process child({child_program, "install"},
                      child_env({std::string(run_dir_env) + "=" + leaf}), parent);
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(child.out(), "installed 0\ninstalled 0\nrun_dir " + dir.path() + "\n");
}

// --- markers ------------------------------------------------------------------------------

TEST(agent_mark, appends_markers_in_order_and_rejects_malformed_ones) {
  run_directory dir;
  child_process child({child_program, "marks"}, run_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  // work-end and custom accepted; empty, multi-line, null and over-long markers refused.
  EXPECT_EQ(child.out(), "110000\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nwork-end\ncustom\n");
}

// --- crash handler ------------------------------------------------------------------------

TEST(agent_crash, reports_the_faulting_frame_and_dies_by_the_same_signal) {
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line, "signal " + std::to_string(SIGSEGV) + " SIGSEGV");
  EXPECT_EQ(report.thread_line.rfind("thread " + std::to_string(child.pid()) + " ", 0), 0u)
      << report.thread_line;
  ASSERT_FALSE(report.frames.empty());
  // Frame 0 is the faulting instruction itself: the handler's own frames are gone, and the main
  // thread runs the handler on the agent's alternate stack, so the name is demangled.
  EXPECT_EQ(report.frames[0].index, 0);
  EXPECT_EQ(report.frames[0].function, "agent_test_child::segv_frame(int)");
  EXPECT_EQ(report.frames[0].module, real_path(child_program));
  EXPECT_GE(find_frame(report.frames, "main"), 1);
  for (std::size_t k = 0; k < report.frames.size(); ++k) {
    EXPECT_EQ(report.frames[k].index, static_cast<int>(k));
    EXPECT_EQ(report.frames[k].address.rfind("0x", 0), 0u);
  }
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nwork-end\n");
  EXPECT_NE(child.err().find("faultline-agent: signal 11 SIGSEGV"), std::string::npos)
      << child.err();
  EXPECT_NE(child.err().find("agent_test_child::segv_frame(int)"), std::string::npos);
}

TEST(agent_crash, frame_offsets_are_what_addr2line_takes) {
  if (::access("/usr/bin/addr2line", X_OK) != 0) GTEST_SKIP() << "addr2line not installed";
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  std::string command = "/usr/bin/addr2line -f -C -e '" + report.frames[0].module + "' " +
                        report.frames[0].offset;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[512] = {};
  ASSERT_NE(std::fgets(line, sizeof(line), pipe), nullptr);
  ::pclose(pipe);
  EXPECT_EQ(std::string(line), "agent_test_child::segv_frame(int)\n");
}

TEST(agent_crash, quiet_env_keeps_stderr_clean) {
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir, {std::string(quiet_env) + "=1"}));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  EXPECT_EQ(child.err().find("faultline-agent"), std::string::npos) << child.err();
  EXPECT_TRUE(file_exists(dir.file(crash_file_prefix, child.pid())));
}

TEST(agent_crash, a_stderr_nobody_reads_does_not_change_the_signal) {
  run_directory dir;
  child_process child({child_program, "segv"}, run_env(dir), "", /*broken_stderr=*/true);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  EXPECT_TRUE(file_exists(dir.file(crash_file_prefix, child.pid())));
}

class agent_crash_signal : public ::testing::TestWithParam<int> {};

TEST_P(agent_crash_signal, is_reported_and_kept) {
  int sig = GetParam();
  run_directory dir;
  child_process child({child_program, "raise", std::to_string(sig)}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), sig)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line.rfind("signal " + std::to_string(sig) + " SIG", 0), 0u)
      << report.signal_line;
  EXPECT_GE(find_frame(report.frames, "agent_test_child::raise_frame(int)"), 0);
}

INSTANTIATE_TEST_SUITE_P(all, agent_crash_signal,
                         ::testing::Values(SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return std::string(sigabbrev_np(param_info.param));
                         });

TEST(agent_crash, names_the_crashing_thread) {
  run_directory dir;
  child_process child({child_program, "thread-segv"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  std::istringstream thread_line(report.thread_line);
  std::string word;
  pid_t tid = 0;
  std::string name;
  thread_line >> word >> tid >> name;
  EXPECT_EQ(word, "thread");
  EXPECT_NE(tid, child.pid());  // not the main thread
  EXPECT_GT(tid, 0);
  EXPECT_EQ(name, "fl-crasher");
  ASSERT_FALSE(report.frames.empty());
  // This thread has no alternate stack from the agent: names stay mangled, still recognisable.
  EXPECT_NE(report.frames[0].function.find("segv_frame"), std::string::npos);
  EXPECT_GE(find_frame(report.frames, "thread_segv_frame"), 1);
}

TEST(agent_crash, reports_a_stack_overflow_from_the_alternate_stack) {
  run_directory dir;
  child_process child({child_program, "stack-overflow"}, run_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line, "signal " + std::to_string(SIGSEGV) + " SIGSEGV");
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_child::recurse_frame(int)");
}

TEST(agent_crash, hands_over_to_the_handler_installed_before_it) {
  run_directory dir;
  child_process child({child_program, "chain-segv"}, run_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 42)) << child.err();
  EXPECT_EQ(child.out(), "previous handler ran\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_child::segv_frame(int)");
}

TEST(agent_crash, a_forked_child_reports_under_its_own_pid) {
  run_directory dir;
  child_process parent({child_program, "fork-segv"}, run_env(dir));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  std::istringstream out(parent.out());
  std::string word;
  pid_t forked = 0;
  int status = 0;
  out >> word >> forked >> status;
  ASSERT_EQ(word, "child") << parent.out();
  EXPECT_TRUE(killed_by(status, SIGSEGV));
  EXPECT_EQ(dir.read(phase_file_prefix, forked), "run\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, forked));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_child::segv_frame(int)");
  EXPECT_FALSE(file_exists(dir.file(crash_file_prefix, parent.pid())));
}

TEST(agent_crash, without_a_run_dir_the_signal_is_untouched) {
  child_process child({child_program, "segv-unchecked"}, child_env({}));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV));
  EXPECT_EQ(child.out(), "disabled\n");
  EXPECT_EQ(child.err().find("faultline-agent"), std::string::npos) << child.err();
}

// --- stack dump ---------------------------------------------------------------------------

const thread_block* block_named(const std::vector<thread_block>& blocks, const std::string& name) {
  for (const thread_block& block : blocks) {
    if (block.name == name) return &block;
  }
  return nullptr;
}

TEST(agent_stack_dump, lists_every_thread_and_the_process_survives) {
  run_directory dir;
  child_process child({child_program, "hang", "3"}, run_env(dir));
  ASSERT_TRUE(child.wait_for_line("ready")) << child.err();
  std::set<pid_t> tids = task_ids(child.pid());
  // main, 3 workers, bare, masked (and a sanitizer's own thread, where there is one)
  ASSERT_GE(tids.size(), 6u);

  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  std::string text = wait_for_dumps(dir, child.pid(), 1);
  SCOPED_TRACE("stacks." + std::to_string(child.pid()) + ":\n" + text);
  stack_dump dump = parse_stacks(text);
  EXPECT_TRUE(dump.well_formed);
  ASSERT_EQ(dump.dumps.size(), 1u);
  const std::vector<thread_block>& blocks = dump.dumps[0];

  std::set<pid_t> dumped;
  for (const thread_block& block : blocks) dumped.insert(block.tid);
  EXPECT_EQ(dumped, tids);
  EXPECT_EQ(blocks.size(), tids.size());

  for (int k = 0; k < 3; ++k) {
    const thread_block* worker = block_named(blocks, "fl-worker-" + std::to_string(k));
    ASSERT_NE(worker, nullptr) << "fl-worker-" << k;
    ASSERT_FALSE(worker->frames.empty());
    int blocked =
        find_frame(worker->frames, "agent_test_child::blocked_frame(std::atomic<int>*)");
    ASSERT_GE(blocked, 1);
    // The handler's frames are skipped: above the blocked call there is only libc's read.
    for (int f = 0; f < blocked; ++f) {
      EXPECT_NE(worker->frames[f].module, real_path(child_program)) << worker->frames[f].function;
    }
  }
  const thread_block* bare = block_named(blocks, "fl-bare");
  ASSERT_NE(bare, nullptr);
  int bare_frame = find_frame(bare->frames, "blocked_frame");
  ASSERT_GE(bare_frame, 0);
  EXPECT_EQ(bare->frames[bare_frame].function.rfind("_Z", 0), 0u)
      << "no alternate stack: the name stays mangled";
  const thread_block* masked = block_named(blocks, "fl-masked");
  ASSERT_NE(masked, nullptr);
  EXPECT_TRUE(masked->frames.empty()) << "a thread that blocks the signal cannot answer";
  for (const thread_block& block : blocks) {
    if (block.tid == child.pid()) {
      // Demangled normally; under TSan, which runs handlers late and off the alternate stack,
      // it may stay mangled.
      EXPECT_GE(find_frame(block.frames, "main_wait_frame"), 0);
    }
  }

  EXPECT_TRUE(child.running());
  // A second request appends a second complete dump.
  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  stack_dump again = parse_stacks(wait_for_dumps(dir, child.pid(), 2));
  EXPECT_TRUE(again.well_formed);
  ASSERT_EQ(again.dumps.size(), 2u);
  EXPECT_EQ(again.dumps[1].size(), tids.size());
  EXPECT_TRUE(child.running());
  EXPECT_TRUE(killed_by(child.kill_and_reap(), SIGKILL));
  EXPECT_FALSE(file_exists(dir.file(crash_file_prefix, child.pid())));
}

TEST(agent_stack_dump, gives_up_on_a_thread_that_cannot_answer_and_goes_on) {
  run_directory dir;
  child_process child({child_program, "hang-stuck"}, run_env(dir));
  ASSERT_TRUE(child.wait_for_line("ready")) << child.err();
  std::set<pid_t> tids = task_ids(child.pid());
  ASSERT_GE(tids.size(), 3u);

  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  stack_dump dump = parse_stacks(wait_for_dumps(dir, child.pid(), 1));
  EXPECT_TRUE(dump.well_formed);
  ASSERT_EQ(dump.dumps.size(), 1u);
  EXPECT_EQ(dump.dumps[0].size(), tids.size());
  const thread_block* stuck = block_named(dump.dumps[0], "fl-stuck");
  ASSERT_NE(stuck, nullptr);
  EXPECT_TRUE(stuck->frames.empty());
  const thread_block* worker = block_named(dump.dumps[0], "fl-worker-0");
  ASSERT_NE(worker, nullptr);
  EXPECT_GE(find_frame(worker->frames, "blocked_frame"), 1);
  EXPECT_TRUE(child.running());
}

}  // namespace
}  // namespace faultline::agent
