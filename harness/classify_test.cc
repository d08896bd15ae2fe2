// Classification from synthetic evidence and run directories: every outcome, the phase rules
// (agent markers, gtest premature-exit file and XML), and signatures that name the program's
// frames rather than the agent's, libc's or the C++ runtime's.
#include "harness/classify.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

class classify_dir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fl_classify_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    e_.run_dir = dir_;
    e_.log_path = dir_ / "run.log";
    e_.leader = 1000;
    write("run.log", "");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  static int exited(int code) { return code << 8; }
  static int killed(int sig) { return sig; }

  fs::path dir_;
  run_evidence e_;
};

constexpr const char* crash_text =
    "signal 11 SIGSEGV\n"
    "thread 1000 main\n"
    "#0 0x55d4c3a1b2c0 /opt/app/bin/prog+0x12c0 pool::release(void*)\n"
    "#1 0x55d4c3a1b300 /opt/app/bin/prog+0x1300 _ZN4pool7destroyEv\n"
    "#2 0x7f0000001000 /lib/x86_64-linux-gnu/libc.so.6+0x1000 __run_exit_handlers\n"
    "#3 0x7f0000002000 /lib/x86_64-linux-gnu/libc.so.6+0x2000 exit\n"
    "#4 0x55d4c3a1b400 /opt/app/bin/prog+0x1400 std::vector<int, std::allocator<int> >::~vector()\n"
    "#5 0x55d4c3a1b500 /opt/app/bin/prog+0x1500 main\n"
    "#6 0x7f0000003000 /lib/x86_64-linux-gnu/libc.so.6+0x3000 __libc_start_main\n";

TEST(parse_crash, reads_signal_thread_and_frames) {
  auto r = parse_crash(crash_text);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->signal, SIGSEGV);
  EXPECT_EQ(r->thread, 1000);
  ASSERT_EQ(r->frames.size(), 7u);
  EXPECT_EQ(r->frames[0].function, "pool::release");
  EXPECT_EQ(r->frames[0].module, "/opt/app/bin/prog");
  EXPECT_TRUE(r->frames[0].has_offset);
  EXPECT_EQ(r->frames[0].offset, 0x12c0u);
  EXPECT_EQ(r->frames[1].function, "pool::destroy");  // the agent left it mangled
}

TEST(parse_crash, rejects_text_without_a_signal_line) {
  EXPECT_FALSE(parse_crash("thread 1\n#0 0x1 a+0x1 f\n"));
  EXPECT_FALSE(parse_crash(""));
}

TEST(frames_signature, keeps_the_top_three_program_frames) {
  auto r = parse_crash(crash_text);
  EXPECT_EQ(frames_signature(r->frames), "pool::release | pool::destroy | main");
  EXPECT_EQ(frames_signature(r->frames, 1), "pool::release");
}

TEST(frames_signature, starts_after_a_signal_trampoline) {
  std::vector<frame> f = {{"crash_handler", "/opt/prog", 0x10, true},
                          {"__restore_rt", "/lib/x86_64-linux-gnu/libc.so.6", 0x20, true},
                          {"do_work", "/opt/prog", 0x30, true},
                          {"main", "/opt/prog", 0x40, true}};
  EXPECT_EQ(frames_signature(f), "do_work | main");
}

TEST(frames_signature, names_unsymbolised_frames_by_module_and_offset) {
  std::vector<frame> f = {{"??", "/opt/app/libwork.so", 0x4a2, true}, {"??", "??", 0x99, true}, {"main", "/opt/prog", 0x40, true}};
  EXPECT_EQ(frames_signature(f), "libwork.so+0x4a2 | main");
}

TEST(meaningful, skips_runtime_agent_and_startup_frames) {
  EXPECT_FALSE(meaningful({"abort", "/lib/x86_64-linux-gnu/libc.so.6", 1, true}));
  EXPECT_FALSE(meaningful({"raise", "", 0, false}));
  EXPECT_FALSE(meaningful({"__GI___clock_nanosleep", "", 0, false}));
  EXPECT_FALSE(meaningful({"faultline::agent::detail::on_crash", "/opt/prog", 1, true}));
  EXPECT_FALSE(meaningful({"write_crash", "/build/lib/libfaultline_agent.so", 1, true}));
  EXPECT_FALSE(meaningful({"std::terminate", "", 0, false}));
  EXPECT_FALSE(meaningful({"__cxxabiv1::__terminate", "", 0, false}));
  EXPECT_FALSE(meaningful({"<signal handler called>", "", 0, false}));
  EXPECT_FALSE(meaningful({"_start", "/opt/prog", 1, true}));
  EXPECT_TRUE(meaningful({"pool::release", "/opt/prog", 1, true}));
  EXPECT_TRUE(meaningful({"main", "", 0, false}));
}

TEST(strip_parameters, removes_the_final_parameter_list) {
  EXPECT_EQ(strip_parameters("ns::f(int, char*)"), "ns::f");
  EXPECT_EQ(strip_parameters("ns::f(int) const"), "ns::f");
  EXPECT_EQ(strip_parameters("S::operator()(int)"), "S::operator()");
  EXPECT_EQ(strip_parameters("f(std::function<void (int)>)"), "f");
  EXPECT_EQ(strip_parameters("main"), "main");
}

constexpr const char* gdb_stacks =
    "=== process 1000 (prog) ppid 1 pgrp 1000 state S via gdb ===\n"
    "Thread 2 (Thread 0x7f01 (LWP 1001) \"worker\"):\n"
    "#0  0x00007f in __GI___poll (fds=0x1) at poll.c:29\n"
    "#1  0x000055 in worker_loop () at w.cc:3\n"
    "\n"
    "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
    "#0  0x00007f in __futex_abstimed_wait_common64 (private=0) at futex-internal.c:57\n"
    "#1  0x00007f in __pthread_clockjoin_ex (threadid=1) at pthread_join_common.c:105\n"
    "#2  0x000055 in registry::unregister (this=0x1, id=3) at registry.cc:88\n"
    "#3  0x000055 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6\n"
    "#4  main () at main.cc:12\n"
    "\n"
    "=== process 1002 (child) ppid 1000 pgrp 1000 state S via agent ===\n"
    "thread 1002 child\n"
    "#0 0x7f00 /lib/x86_64-linux-gnu/libc.so.6+0x100 read\n"
    "#1 0x5500 /opt/child+0x200 wait_for_parent()\n"
    "#2 0x5501 /opt/child+0x300 main\n"
    "\n"
    "end\n";

TEST(thread_frames, finds_the_main_thread_in_a_gdb_section) {
  auto f = thread_frames(gdb_stacks, 1000, 1000);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[2].function, "registry::unregister");
  EXPECT_EQ(f[3].module, "/lib/x86_64-linux-gnu/libstdc++.so.6");
  EXPECT_EQ(frames_signature(f), "registry::unregister | main");
}

TEST(thread_frames, finds_a_thread_in_an_agent_section) {
  auto f = thread_frames(gdb_stacks, 1002, 1002);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(frames_signature(f), "wait_for_parent | main");
  EXPECT_TRUE(thread_frames(gdb_stacks, 4242, 4242).empty());
}

TEST(find_invariant, names_the_first_violated_invariant) {
  EXPECT_EQ(find_invariant("setup\ninvariant violated: pool/free-plus-live: 10 != 12\nmore\n"), "pool/free-plus-live");
  EXPECT_EQ(find_invariant("invariant violated: no-hang\n"), "no-hang");
  EXPECT_FALSE(find_invariant("all good\n"));
}

TEST_F(classify_dir, clean_exit_is_a_pass) {
  e_.wait_status = exited(0);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::pass);
  EXPECT_EQ(c.when, phase::none);
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.signature, "");
}

TEST_F(classify_dir, nonzero_exit_names_the_invariant) {
  write("run.log", "starting\ninvariant violated: registry/generation: released gen 3 under gen 4\n");
  e_.wait_status = exited(1);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::fail);
  EXPECT_EQ(c.when, phase::run);
  EXPECT_EQ(c.signature, "registry/generation");
}

TEST_F(classify_dir, failure_after_work_end_is_in_the_exit_phase) {
  write("phase.1000", "run\nwork-end\nmain-returned\n");
  e_.wait_status = exited(3);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::fail);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "exit 3");
}

TEST_F(classify_dir, failure_with_only_main_returned_stays_in_the_run_phase) {
  write("phase.1000", "run\nmain-returned\nexit\n");
  e_.wait_status = exited(1);
  EXPECT_EQ(classify(e_).when, phase::run);
}

TEST_F(classify_dir, crash_report_gives_signal_frames_and_phase) {
  write("crash.1000", crash_text);
  write("phase.1000", "run\nmain-returned\nexit\n");
  e_.wait_status = killed(SIGSEGV);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signal, SIGSEGV);
  EXPECT_FALSE(c.exit_code);
  EXPECT_EQ(c.signature, "SIGSEGV: pool::release | pool::destroy | main");
}

TEST_F(classify_dir, crash_during_work_is_in_the_run_phase) {
  write("crash.1000", crash_text);
  write("phase.1000", "run\n");
  e_.wait_status = killed(SIGSEGV);
  EXPECT_EQ(classify(e_).when, phase::run);
}

TEST_F(classify_dir, a_childs_crash_report_makes_a_crash_even_when_the_leader_exits_zero) {
  write("crash.1005", "signal 6 SIGABRT\nthread 1005\n#0 0x1 /opt/prog+0x10 check_failed\n");
  e_.wait_status = exited(0);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.signal, SIGABRT);
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.signature, "SIGABRT: check_failed");
}

TEST_F(classify_dir, signal_without_report_is_a_crash_named_by_the_signal) {
  e_.wait_status = killed(SIGBUS);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.when, phase::run);
  EXPECT_EQ(c.signature, "SIGBUS");
}

TEST_F(classify_dir, gtest_that_finished_and_then_crashed_is_in_the_exit_phase) {
  // The runner created the premature-exit file; gtest deleted it when its tests were done.
  e_.premature_exit_armed = true;
  e_.wait_status = killed(SIGSEGV);
  EXPECT_EQ(classify(e_).when, phase::exit);
  write(premature_exit_file, "");
  EXPECT_EQ(classify(e_).when, phase::run);  // still there: the program never finished
}

TEST_F(classify_dir, gtest_xml_all_passed_puts_a_failure_at_exit) {
  write(gtest_xml_file, "<?xml version=\"1.0\"?>\n<testsuites tests=\"2\" failures=\"0\" disabled=\"0\" errors=\"0\" name=\"AllTests\">\n</testsuites>\n");
  e_.wait_status = exited(1);
  EXPECT_EQ(classify(e_).when, phase::exit);
  write(gtest_xml_file, "<testsuites tests=\"2\" failures=\"1\" disabled=\"0\" errors=\"0\" name=\"AllTests\">\n</testsuites>\n");
  EXPECT_EQ(classify(e_).when, phase::run);
}

TEST_F(classify_dir, timeout_is_a_hang_named_by_the_main_thread) {
  write(stacks_file, gdb_stacks);
  e_.stacks_path = dir_ / stacks_file;
  e_.timed_out = true;
  e_.wait_status = killed(SIGTERM);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::hang);
  EXPECT_EQ(c.when, phase::run);
  EXPECT_EQ(c.signature, "hang: registry::unregister | main");
}

TEST_F(classify_dir, hang_without_stacks_is_plain_hang_and_markers_give_the_phase) {
  write("phase.1000", "run\nwork-end\n");
  e_.timed_out = true;
  e_.wait_status = killed(SIGKILL);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::hang);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "hang");
}

TEST_F(classify_dir, survivors_after_a_clean_exit_are_a_leak) {
  e_.wait_status = exited(0);
  e_.leaked_pids = {2001, 2002};
  e_.leaked_comms = {"sleep", "daemon"};
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::leak);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "leak: daemon,sleep");
}

TEST_F(classify_dir, shared_memory_left_behind_is_a_leak) {
  e_.wait_status = exited(0);
  e_.leaked_shm = {"faultline-acct-1"};
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::leak);
  EXPECT_EQ(c.signature, "leak: /dev/shm/faultline-acct-1");
}

TEST_F(classify_dir, a_crash_outranks_a_leak_and_a_hang_outranks_a_crash) {
  e_.wait_status = killed(SIGSEGV);
  e_.leaked_pids = {2001};
  EXPECT_EQ(classify(e_).result, outcome::crash);
  e_.timed_out = true;
  EXPECT_EQ(classify(e_).result, outcome::hang);
}

TEST_F(classify_dir, spawn_failure_is_an_error) {
  e_.spawn_failed = true;
  e_.spawn_error = "spawn ./nope: No such file or directory";
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::error);
  EXPECT_EQ(c.signature, "error: spawn ./nope: No such file or directory");
}

}  // namespace
}  // namespace faultline::harness
